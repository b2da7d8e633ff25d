"""Files a reader sees whole or not at all: JSON and text written to a temporary file in the same
folder, then linked or renamed into place."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fsdp_bench.results.schema import ResultError


def readable_mode() -> int:
    """0o666 less the umask: what a plain open() gives. mkstemp makes 0600 files, which would
    hide results from the other users of a shared results folder."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_atomic(path: Path, write: Any, *, overwrite: bool) -> None:
    """Call `write(fh)` on a temporary file beside `path`, fsync it, then link (no overwrite:
    fails if `path` exists) or rename (overwrite) it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            write(fh)
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


def write_json_atomic(path: Path, data: Any, *, overwrite: bool = False) -> None:
    """Write JSON so a reader sees the whole file or none of it."""
    def write(fh) -> None:
        json.dump(data, fh, indent=1, sort_keys=False, default=_json_default, allow_nan=True)
        fh.write("\n")

    _write_atomic(path, write, overwrite=overwrite)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace a text file (report, CSV) so a reader never sees half of it."""
    _write_atomic(path, lambda fh: fh.write(text), overwrite=True)


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


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
