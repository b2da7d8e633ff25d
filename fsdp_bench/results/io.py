"""Files a reader sees whole or not at all: JSON and text written to a temporary file in the same
folder, then linked or renamed into place."""

from __future__ import annotations

import json
import os
import stat
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


def _write_atomic(path: Path, write: Any, *, overwrite: bool, make_parents: bool = True) -> None:
    """Call `write(fh)` on a temporary file beside `path`, fsync it, then link (no overwrite:
    fails if `path` exists) or rename (overwrite) it into place. `make_parents=False`: a missing
    folder is FileNotFoundError, never re-created (a run folder deleted under a running case)."""
    path = Path(path)
    if make_parents:
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


# Set by the test suite (tests/conftest.py), inherited by every worker it launches: each write is
# checked against its declared shape, so a field written off its declaration fails a test instead
# of a reader months later. Off in users' runs: a bad field there is a note at read time, and a
# rank's record on its way out of a failing process must not be refused.
CHECK_WRITES_ENV = "FSDP_BENCH_CHECK_WRITES"


def write_json_atomic(path: Path, data: Any, *, shape: Any, overwrite: bool = False, make_parents: bool = True) -> None:
    """Write JSON so a reader sees the whole file or none of it. `shape`: the record type the file
    is declared as (results.records), the one place its fields are named. `make_parents=False`
    for files inside a run folder that must already exist (see _write_atomic)."""
    if os.environ.get(CHECK_WRITES_ENV):
        from fsdp_bench.results.checks import record_problem

        if problem := record_problem(data, shape):
            raise ValueError(f"{path}: not a {getattr(shape, '__name__', shape)}: {problem}")

    def write(fh) -> None:
        json.dump(data, fh, indent=1, sort_keys=False, default=_json_default, allow_nan=True)
        fh.write("\n")

    _write_atomic(path, write, overwrite=overwrite, make_parents=make_parents)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace a text file (report, CSV) so a reader never sees half of it."""
    _write_atomic(path, lambda fh: fh.write(text), overwrite=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


MAX_JSON_BYTES = 64 * 2**20  # no result file is near this (a case file is KBs to a few MB)


def read_json(path: Path, *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file that is a regular file of at most `max_bytes`, decoded as UTF-8, parsed
    without blowing the stack or the integer converter: ResultError (one line) otherwise. A FIFO
    or device named *.json is never opened for reading (it could block forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ResultError(f"{path}: file not found") from None
    except OSError as exc:
        raise ResultError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ResultError(f"{path}: not a regular file")
        if st.st_size > max_bytes:
            raise ResultError(f"{path}: {st.st_size} bytes, over the {max_bytes} a result file may have")
        with os.fdopen(os.dup(fd), "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ResultError(f"{path}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise ResultError(f"{path}: over the {max_bytes} bytes a result file may have")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ResultError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ResultError(
            f"{path}: not valid JSON (truncated or hand-edited?): {exc.msg} at line {exc.lineno}"
        ) from None
    except RecursionError:
        raise ResultError(f"{path}: nested too deeply to be a result") from None
    except ValueError as exc:  # e.g. an integer over Python's digit limit
        raise ResultError(f"{path}: not usable JSON ({str(exc)[:80]})") from None


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
