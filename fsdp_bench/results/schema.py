"""The result schema: its version, the statuses a case ends in, the stages a rank passes, the one
unit every *_gib metric uses, and the checks a result file must pass to be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
# Versions this code reads. 2 added measurement fields (memory breakdown, model state, FLOPs/MFU,
# profile, update norms, timeline); every field 2 added is optional, so a version-1 file reads as
# a version-2 file with those fields missing.
READABLE_SCHEMA_VERSIONS = (1, 2)
STATUSES = ("ok", "failed", "oom", "timeout", "skipped")
FAILED_STATUSES = ("failed", "oom", "timeout")

GIB = 2**30  # one gibibyte; every *_gib metric divides bytes by this

# Stages in the order a rank passes them; a failure records the stage it happened in.
STAGES = ("init", "data", "model", "shard", "optimizer", "first_step", "warmup", "measure", "checkpoint",
          "memory_probe", "end")
# Stages after which memory is read, with the label the ODSC tutorial's logs use.
STAGE_LABELS = {
    "data": "after data creation",
    "model": "after model creation",
    "shard": "after sharding",
    "optimizer": "after optimizer creation",
    "first_step": "after first step",
    "warmup": "after warmup",
    "end": "at the end",
}


class ResultError(ValueError):
    """A result file cannot be used; the message names the file and the problem."""


def check_schema(path: Path, data: Any) -> None:
    if not isinstance(data, dict):
        raise ResultError(f"{path}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        readable = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))
        raise ResultError(f"{path}: schema_version {version!r} is not supported (this fsdp-bench reads {readable})")


def load_case_result(path: Path) -> dict[str, Any]:
    from fsdp_bench.results.io import read_json

    data = read_json(path)
    check_schema(path, data)
    for key in ("case_id", "case", "status"):
        if key not in data:
            raise ResultError(f"{path}: missing required field {key!r}")
    if data["status"] not in STATUSES:
        raise ResultError(f"{path}: unknown status {data['status']!r}; known: {', '.join(STATUSES)}")
    return data


def load_run(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every readable case result of a run, and one line per file that could not be read."""
    from fsdp_bench.results.layout import RunLayout

    layout = RunLayout(Path(run_dir))
    if not layout.root.is_dir():
        raise ResultError(f"{run_dir}: not a folder")
    results, problems = [], []
    for path in layout.result_files():
        try:
            results.append(load_case_result(path))
        except ResultError as exc:
            problems.append(str(exc))
    return results, problems
