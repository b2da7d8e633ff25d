"""What one `--bench-*` option's text means: the value parsers the option table uses, each raising
a `CaseError` whose message starts with the option's name (no torch)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fsdp_bench.plan.case import CaseError, parse_mesh
from fsdp_bench.plan.flavors import MODEL_FLAVORS, hf_path_problem, is_hf_path
from fsdp_bench.plan.text_data import usable_text_problem
from fsdp_bench.results.layout import RunLayout


def _split(option: str, raw: str) -> list[str]:
    items = [s.strip() for s in raw.split(",")]
    if not any(items):
        raise CaseError(f"{option}: empty list")
    # "2,,4" is a value lost in typing, not a list of two: running the rest would hide it.
    if not all(items):
        raise CaseError(f"{option}: empty item in {raw!r}")
    return items


def _int_at_least(option: str, text: str, minimum: int, noun: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise CaseError(f"{option}: {text!r} is not a {noun}")
    return value


def _positive_int(option: str, text: str) -> int:
    return _int_at_least(option, text, 1, "positive integer")


def positive_int(option: str, text: str) -> int:
    """`text` as an integer >= 1; CaseError naming `option` otherwise."""
    return _positive_int(option, text)


def _non_negative_int(option: str, text: str) -> int:
    return _int_at_least(option, text, 0, "non-negative integer")


def _positive_float(option: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CaseError(f"{option}: {text!r} is not a positive number of seconds")
    return value


def _non_negative_float_value(option: str, text: str) -> float:
    values = _non_negative_floats(option, text)
    if len(values) != 1:
        raise CaseError(f"{option}: expected one number, got {text!r}")
    return values[0]


def _names(option: str, raw: str, known: Mapping[str, Any] | tuple[str, ...]) -> tuple[str, ...]:
    names = _split(option, raw)
    for name in names:
        if name not in known:
            raise CaseError(f"{option}: unknown value {name!r}; choose from {', '.join(known)}")
    return tuple(dict.fromkeys(names))


def parse_models(option: str, raw: str) -> tuple[str, ...]:
    """Comma-separated model names the sweep accepts (flavors or readable hf:PATH); CaseError otherwise."""
    return _models(option, raw)


def _models(option: str, raw: str) -> tuple[str, ...]:
    names = _split(option, raw)
    for name in names:
        if name not in MODEL_FLAVORS and not is_hf_path(name):
            raise CaseError(f"{option}: unknown model {name!r}; choose from {', '.join(MODEL_FLAVORS)} or hf:PATH")
        if is_hf_path(name) and (problem := hf_path_problem(name)):
            raise CaseError(f"{option}: {problem}")
    return tuple(dict.fromkeys(names))


# The spellings of on and off every switch and on/off axis accepts.
_TRUE, _FALSE = ("on", "true", "yes", "1"), ("off", "false", "no", "0")


def _on_off(option: str, raw: str) -> tuple[bool, ...]:
    """A sweep axis of on/off values ("off,on"), spelled as every switch is (_TRUE, _FALSE)."""
    out = []
    for item in _split(option, raw):
        if item.lower() not in _TRUE + _FALSE:
            raise CaseError(f"{option}: {item!r} is not on or off")
        out.append(item.lower() in _TRUE)
    return tuple(dict.fromkeys(out))


def _non_negative_floats(option: str, raw: str) -> tuple[float, ...]:
    out = []
    for item in _split(option, raw):
        try:
            value = float(item)
        except ValueError:
            value = -1.0
        if not value >= 0:
            raise CaseError(f"{option}: {item!r} is not a non-negative number")
        out.append(value)
    return tuple(dict.fromkeys(out))


def _data_folder(option: str, raw: str) -> str:
    """A folder with usable text, read through once now (as the ranks will), so a folder of
    malformed or empty files is one line before any case launches; '' is not 'synthetic'."""
    if not raw.strip():
        raise CaseError(f"{option}: empty value (leave the option out for synthetic tokens)")
    _check_path_length(option, raw)
    problem = usable_text_problem(raw)
    if problem:
        raise CaseError(f"{option}: {problem}")
    return str(Path(raw).expanduser().resolve())


PATH_MAX_BYTES, NAME_MAX_BYTES = 4095, 255  # Linux's PATH_MAX (less its NUL) and NAME_MAX


def _check_path_length(option: str, raw: str) -> None:
    """Refuse a path the kernel would refuse (ENAMETOOLONG) before anything is created."""
    full = os.fsencode(os.path.abspath(os.path.expanduser(raw)))
    if len(full) > PATH_MAX_BYTES:
        raise CaseError(f"{option}: path is {len(full)} bytes long; at most {PATH_MAX_BYTES} are allowed")
    longest = max(full.split(b"/"), key=len)
    if len(longest) > NAME_MAX_BYTES:
        raise CaseError(
            f"{option}: a folder name in the path is {len(longest)} bytes; at most {NAME_MAX_BYTES} are allowed"
        )


def _can_write_in(folder: Path) -> bool:
    """Really try: os.access says yes to root on a read-only mount or /proc."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".fsdp-bench-probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(tmp)
    return True


def _switch(option: str, text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise CaseError(f"{option}: {text!r} is not on/off (give the flag alone to turn it on)")


def _writable_dir(option: str, raw: str) -> Path:
    if not raw.strip():
        raise CaseError(f"{option}: empty value")
    _check_path_length(option, raw)
    path = Path(raw)
    probe = path
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():  # a dangling link: mkdir would fail later
            raise CaseError(f"{option}: {str(probe)!r} is a broken symbolic link")
        probe = probe.parent
    if not probe.is_dir():
        raise CaseError(f"{option}: {raw!r} is not a folder ({str(probe)!r} is a file)")
    if not _can_write_in(probe):
        raise CaseError(f"{option}: {raw!r} is not writable (cannot create files in {str(probe)!r})")
    return path


def writable_dir(option: str, raw: str) -> Path:
    """`raw` as a folder that exists or can be created and written; CaseError otherwise."""
    return _writable_dir(option, raw)


def _mesh(option: str, raw: str) -> str:
    try:
        replicate, shard = parse_mesh(raw)
    except CaseError as exc:
        raise CaseError(f"{option}: {exc}") from None
    return f"{replicate}x{shard}"


def _text(option: str, raw: str) -> str:
    if not raw.strip():
        raise CaseError(f"{option}: empty value")
    return raw.strip()


def _existing_run(option: str, raw: str) -> Path:
    _check_path_length(option, raw)
    path = Path(raw)
    if not path.is_dir():
        raise CaseError(f"{option}: {raw!r} does not exist or is not a folder")
    cases = RunLayout(path).cases_dir
    if not cases.is_dir():
        raise CaseError(f"{option}: {raw!r} is not a run folder (no cases/ inside)")
    if not _can_write_in(cases):
        raise CaseError(f"{option}: {raw!r} is not writable")
    return path


def _positive_gib(option: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise CaseError(f"{option}: {text!r} is not a positive number of GiB")
    return value


def positive_gib(option: str, text: str) -> float:
    """`text` as a finite number of GiB above 0; CaseError naming `option` otherwise."""
    return _positive_gib(option, text)


def _grace(option: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise CaseError(f"{option}: {text!r} is not a number of seconds between 0 and 3600")
    return value
