"""The result schema: its version, the statuses a case ends in, the stages a rank passes, the one
unit every *_gib metric uses, and the checks a result file must pass to be read."""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

from fsdp_bench.results.metrics import METRICS
from fsdp_bench.results.records import CaseResult, RankRecord

SCHEMA_VERSION = 4
# Versions this code reads; older ones are brought to the current one at load (results.migrate),
# so no reader ever looks at an old shape. 2 added measurement fields (memory breakdown, model
# state, FLOPs/MFU, profile, update norms, timeline), all optional. 3: the metrics always carry
# `effective_sharding` in the catalog's words and, with a prediction, rank 0's measured peak.
# 4: every rank record carries the `measurement_version` of the loop that measured it.
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4)
# The worker's way of measuring, bumped when the timed loop changes what a step's time means; each
# rank record carries it, and a resume re-runs an ok case measured by an older loop (set aside under
# .attempts/) rather than mix two harnesses in one run. 1: update norms copied every parameter to
# the host between measured steps (files without the field). 2: norms on a few steps only, which
# halved host-bound H100 steps: the warmup steps and the first and last measured step (0e79098,
# the H100 runs of 2026-11-26), since then the warmup steps alone (no host copy between or after
# measured steps; every measured step's neighbours are as before but two, so the median stays).
MEASUREMENT_VERSION = 2
STATUSES = ("ok", "failed", "oom", "timeout", "skipped")
FAILED_STATUSES = ("failed", "oom", "timeout")

GIB = 2**30  # one gibibyte; every *_gib metric divides bytes by this


def memory_unit(largest_gib: float) -> tuple[float, str]:
    """The one unit a column, a chart axis or a line of peaks is shown in, with its factor from GiB:
    MiB when the largest is under 1 GiB (a tiny model's 10 MiB would read 0.0099 GiB), else GiB."""
    return (1024.0, "MiB") if largest_gib < 1 else (1.0, "GiB")

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


# FSDP1's ShardingStrategy names in the catalog's words ("hybrid_" + a row's sharding for hybrid
# rows), so the sharding every family really ran reads alike in records and tables (and files
# written before the words were the catalog's read like new ones).
_FSDP1_SHARDING_WORDS = {"NO_SHARD": "replicated", "SHARD_GRAD_OP": "shard_grad_op", "FULL_SHARD": "full_shard",
                         "HYBRID_SHARD": "hybrid_full_shard", "_HYBRID_SHARD_ZERO2": "hybrid_shard_grad_op"}


def sharding_word(name: str) -> str:
    """An FSDP1 ShardingStrategy name (or a word already in the catalog's terms) in catalog terms."""
    return _FSDP1_SHARDING_WORDS.get(name, name.lower())


def measurement_version(result: CaseResult) -> int:
    """The oldest loop that measured any rank of a result (files are migrated to carry it; a
    result without ranks, such as a failed stand-in, reads as the oldest)."""
    return min((r.get("measurement_version", 1) for r in result.get("ranks") or []), default=1)


def is_current_ok(result: CaseResult | None) -> bool:
    """An ok result measured by this version's loop: what a resume keeps."""
    return result is not None and result.get("status") == "ok" and measurement_version(result) == MEASUREMENT_VERSION


class ResultError(ValueError):
    """A result file cannot be used; the message names the file and the problem."""


def check_schema(path: Path, data: Any) -> None:
    if not isinstance(data, dict):
        raise ResultError(f"{path}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        readable = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))
        raise ResultError(f"{path}: schema_version {version!r} is not supported (this fsdp-bench reads {readable})")


# case fields the report reads, and their types (the case's own fields live in plan.case, which
# results/ may not import)
_CASE_FIELD_TYPES = {"strategy": str, "model": str, "nproc": int, "batch_size": int, "grad_accum": int,
                     "seq_len": int, "steps": int, "warmup": int}


_RESULT_HINTS = get_type_hints(CaseResult)
_RANK_HINTS = get_type_hints(RankRecord)


def check_field_types(path: Path, data: dict[str, Any]) -> None:
    """A case file's fields have the types results.records declares (one line naming the first
    bad one). A rank's field may be null (a rank that died early); a result's only where declared."""
    for key, hint in _RESULT_HINTS.items():
        if key in data and not _matches(data[key], hint):
            raise ResultError(f"{path}: field {key!r} should be {_hint_name(hint)}, got {type(data[key]).__name__}")
    for key, kind in _CASE_FIELD_TYPES.items():
        if key in data["case"] and not _matches(data["case"][key], kind):
            raise ResultError(f"{path}: case field {key!r} should be {_hint_name(kind)}, "
                              f"got {type(data['case'][key]).__name__}")
    _check_metrics(path, data.get("metrics", {}))
    for rank in data.get("ranks", []):
        for key, hint in _RANK_HINTS.items():
            value = rank.get(key)
            if value is not None and not _matches(value, hint):
                raise ResultError(f"{path}: rank field {key!r} should be {_hint_name(hint)}, "
                                  f"got {type(value).__name__}")


def _check_metrics(path: Path, metrics: dict[str, Any]) -> None:
    numeric = {m.name for m in METRICS if m.unit != "label"}  # a label is text (measurement_stop_reason); the registry names the rest
    for name, value in metrics.items():
        allowed = (bool, int, float) if name in numeric else (bool, int, float, str, list, dict)
        if not (value is None or isinstance(value, allowed)):
            raise ResultError(f"{path}: metric {name!r} should be a number, got {type(value).__name__}")


def _matches(value: Any, hint: Any) -> bool:
    """Whether a JSON value has a records annotation's type: unions, list[X], dict[str, X]; a
    bool is not a number, an int is a float."""
    if hint is Any:
        return True
    if is_typeddict(hint):  # a rank record inside a result: its own fields are checked apart
        return isinstance(value, dict)
    args = get_args(hint)
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        return any(_matches(value, arm) for arm in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_matches(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_matches(v, args[1]) for v in value.values())
    if isinstance(value, bool):
        return hint is bool
    return isinstance(value, (int, float) if hint is float else hint)


def _hint_name(hint: Any) -> str:
    """The type a field should have, in words: an integer, a list of numbers, an object..."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        arms = [a for a in args if a is not type(None) and not (a is int and float in args)]
        return " or ".join(_hint_name(a) for a in arms)
    if origin is list:
        return "a list" if args[0] is Any or get_origin(args[0]) is dict or is_typeddict(args[0]) else f"a list of {_plural(args[0])}"
    if origin is dict:
        return "an object" if args[1] is Any else f"an object mapping names to {_plural(args[1])}"
    return {dict: "an object", list: "a list", str: "text", int: "an integer", float: "a number",
            bool: "true or false"}.get(hint, getattr(hint, "__name__", str(hint)))


def _plural(hint: Any) -> str:
    name = _hint_name(hint)
    return {"a number": "numbers", "text": "text", "an integer": "integers"}.get(name, name)
