"""The result schema: its version, the statuses a case ends in, the stages a rank passes, the one
unit every *_gib metric uses, and the checks a result file must pass to be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCHEMA_VERSION = 3
# Versions this code reads; older ones are brought to the current one at load (results.migrate),
# so no reader ever looks at an old shape. 2 added measurement fields (memory breakdown, model
# state, FLOPs/MFU, profile, update norms, timeline), all optional. 3: the metrics always carry
# `effective_sharding` in the catalog's words and, with a prediction, rank 0's measured peak.
READABLE_SCHEMA_VERSIONS = (1, 2, 3)
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


# FSDP1's ShardingStrategy names in the catalog's words ("hybrid_" + a row's sharding for hybrid
# rows), so the sharding every family really ran reads alike in records and tables (and files
# written before the words were the catalog's read like new ones).
_FSDP1_SHARDING_WORDS = {"NO_SHARD": "replicated", "SHARD_GRAD_OP": "shard_grad_op", "FULL_SHARD": "full_shard",
                         "HYBRID_SHARD": "hybrid_full_shard", "_HYBRID_SHARD_ZERO2": "hybrid_shard_grad_op"}


def sharding_word(name: str) -> str:
    """An FSDP1 ShardingStrategy name (or a word already in the catalog's terms) in catalog terms."""
    return _FSDP1_SHARDING_WORDS.get(name, name.lower())


class ResultError(ValueError):
    """A result file cannot be used; the message names the file and the problem."""


def check_schema(path: Path, data: Any) -> None:
    if not isinstance(data, dict):
        raise ResultError(f"{path}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        readable = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))
        raise ResultError(f"{path}: schema_version {version!r} is not supported (this fsdp-bench reads {readable})")


# field -> the JSON type it must have in a case file (None allowed only where listed below)
_FIELD_TYPES = {"case_id": str, "case": dict, "status": str, "reason": str, "metrics": dict, "ranks": list,
                "log_tail": str, "failed_rank": int, "failed_stage": str, "duration_s": (int, float)}
_MAY_BE_NULL = ("failed_rank", "failed_stage")
# case fields the report reads, and their types
_CASE_FIELD_TYPES = {"strategy": str, "model": str, "nproc": int, "batch_size": int, "grad_accum": int,
                     "seq_len": int, "steps": int, "warmup": int}


_NUMBER = (int, float)
# optional top-level fields and the types readers use them as
_RESULT_FIELD_TYPES = {"returncode": int, "started_utc": str, "launched_unix": _NUMBER, "finished_unix": _NUMBER,
                       "repeat": int}
# rank fields the report and analysis read, and their types (None allowed for every one)
_RANK_FIELD_TYPES = {"rank": int, "world_size": int, "pid": int, "host": str, "status": str, "stage": str,
                     "error": dict, "started_utc": str, "ended_utc": str, "stages": list, "memory": dict,
                     "warmup_step_times_s": list, "step_times_s": list, "losses": list, "device_name": str,
                     "n_params": int, "memory_breakdown_bytes": dict, "expected_model_state_bytes": dict,
                     "allocator": dict, "stage_started_unix": dict}
_RANK_NUMBER_LISTS = ("warmup_step_times_s", "step_times_s", "losses")
# name -> number maps; expected_model_state_bytes also names its method and layout in text
_RANK_NUMBER_MAPS = {"memory_breakdown_bytes": _NUMBER, "stage_started_unix": _NUMBER,
                     "expected_model_state_bytes": (int, float, str)}


def check_field_types(path: Path, data: dict[str, Any]) -> None:
    """A case file's fields have the types the report reads them as (one line naming the first bad one)."""
    for key, kind in {**_FIELD_TYPES, **_RESULT_FIELD_TYPES}.items():
        value = data.get(key)
        if key in data and not (value is None and key in (*_MAY_BE_NULL, *_RESULT_FIELD_TYPES)) and not _is(value, kind):
            raise ResultError(f"{path}: field {key!r} should be {_kind_name(kind)}, got {type(value).__name__}")
    for key, kind in _CASE_FIELD_TYPES.items():
        if key in data["case"] and not _is(data["case"][key], kind):
            raise ResultError(f"{path}: case field {key!r} should be {_kind_name(kind)}, "
                              f"got {type(data['case'][key]).__name__}")
    _check_metrics(path, data.get("metrics", {}))
    if not all(isinstance(r, dict) for r in data.get("ranks", [])):
        raise ResultError(f"{path}: field 'ranks' should be a list of objects")
    for rank in data.get("ranks", []):
        _check_rank(path, rank)


def _check_metrics(path: Path, metrics: dict[str, Any]) -> None:
    from fsdp_bench.results.metrics import METRICS  # the registry names what must be a number

    numeric = {m.name for m in METRICS if m.unit != "label"}  # a label is text (measurement_stop_reason)
    for name, value in metrics.items():
        allowed = (bool, int, float) if name in numeric else (bool, int, float, str, list, dict)
        if not (value is None or _is(value, allowed)):
            raise ResultError(f"{path}: metric {name!r} should be a number, got {type(value).__name__}")


def _check_rank(path: Path, rank: dict[str, Any]) -> None:
    for key, kind in _RANK_FIELD_TYPES.items():
        value = rank.get(key)
        if value is not None and not _is(value, kind):
            raise ResultError(f"{path}: rank field {key!r} should be {_kind_name(kind)}, got {type(value).__name__}")
    for key in _RANK_NUMBER_LISTS:
        if any(not (v is None or _is(v, _NUMBER)) for v in rank.get(key) or []):
            raise ResultError(f"{path}: rank field {key!r} should hold numbers only")
    for key, kinds in _RANK_NUMBER_MAPS.items():
        if any(not (v is None or _is(v, kinds)) for v in (rank.get(key) or {}).values()):
            raise ResultError(f"{path}: rank field {key!r} should map names to numbers")
    if any(not isinstance(s, dict) for s in rank.get("stages") or []):
        raise ResultError(f"{path}: rank field 'stages' should be a list of objects")


def _is(value: Any, kind: Any) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


def _kind_name(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({dict: "an object", list: "a list", str: "text", int: "an integer",
                        float: "a number"}[k] for k in kinds)
