"""The result contract between worker, runner and readers: versioned JSON written atomically.

Layout of one run:
    results/<run-id>/env.json                 where the run came from
    results/<run-id>/cases/<case-id>.json     merged result of one case (schema below)
    results/<run-id>/cases/<case-id>/         the case's working folder: case.json, rank-N.json, log.txt
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
# Versions this code reads. 2 added measurement fields (memory breakdown, model state, FLOPs/MFU,
# profile, update norms, timeline); every field 2 added is optional, so a version-1 file reads as
# a version-2 file with those fields missing.
READABLE_SCHEMA_VERSIONS = (1, 2)
STATUSES = ("ok", "failed", "oom", "timeout", "skipped")


class ResultError(ValueError):
    """A result file cannot be used; the message names the file and the problem."""


def readable_mode() -> int:
    """0o666 less the umask: what a plain open() gives. mkstemp makes 0600 files, which would
    hide results from the other users of a shared results folder."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_json_atomic(path: Path, data: Any, *, overwrite: bool = False) -> None:
    """Write JSON so a reader sees the whole file or none of it.

    The bytes go to a temporary file in the same folder, are fsynced, then linked (no
    overwrite: fails if `path` exists) or renamed (overwrite) into place.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=False, default=_json_default, allow_nan=True)
            fh.write("\n")
            fh.flush()
            os.fchmod(fh.fileno(), readable_mode())
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # atomic and refuses to replace an existing result
            os.unlink(tmp)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def read_json(path: Path) -> Any:
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise ResultError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path}: not valid JSON (truncated or hand-edited?): {exc.msg} at line {exc.lineno}") from None


def check_schema(path: Path, data: Any) -> None:
    if not isinstance(data, dict):
        raise ResultError(f"{path}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        readable = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))
        raise ResultError(f"{path}: schema_version {version!r} is not supported (this fsdp-bench reads {readable})")


def load_case_result(path: Path) -> dict[str, Any]:
    data = read_json(path)
    check_schema(path, data)
    for key in ("case_id", "case", "status"):
        if key not in data:
            raise ResultError(f"{path}: missing required field {key!r}")
    if data["status"] not in STATUSES:
        raise ResultError(f"{path}: unknown status {data['status']!r}; known: {', '.join(STATUSES)}")
    return data


def case_result_path(run_dir: Path, case_id: str) -> Path:
    return Path(run_dir) / "cases" / f"{case_id}.json"


def load_run(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every readable case result of a run, and one line per file that could not be read."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ResultError(f"{run_dir}: not a folder")
    results, problems = [], []
    for path in sorted((run_dir / "cases").glob("*.json")):
        try:
            results.append(load_case_result(path))
        except ResultError as exc:
            problems.append(str(exc))
    return results, problems


def is_run_dir(path: Path) -> bool:
    return (Path(path) / "cases").is_dir() or (Path(path) / "env.json").is_file()


def newest_run(results_dir: Path) -> Path:
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ResultError(f"{results_dir}: no results folder")
    runs = sorted((p for p in results_dir.iterdir() if p.is_dir() and is_run_dir(p)), key=lambda p: p.name)
    if not runs:
        raise ResultError(f"{results_dir}: holds no runs (run `pytest benchmarks` first)")
    return runs[-1]


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def create_run_dir(results_dir: Path) -> Path:
    """A new, never-used run folder. Names sort by start time; the pid and a counter keep two
    sweeps started in the same second apart, and mkdir's exclusivity settles any race."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1000):
        path = results_dir / f"{stamp}-{os.getpid()}-{attempt}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        (path / "cases").mkdir()
        return path
    raise ResultError(f"{results_dir}: could not create a new run folder")
