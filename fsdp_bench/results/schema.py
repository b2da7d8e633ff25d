"""The result schema: its version, the statuses a case ends in, the stages a rank passes, the one
unit every *_gib metric uses, and the checks a result file must pass to be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdp_bench.results.records import CaseResult

SCHEMA_VERSION = 5
# Versions this code reads; older ones are brought to the current one at load (results.migrate),
# so no reader ever looks at an old shape. 2 added measurement fields (memory breakdown, model
# state, FLOPs/MFU, profile, update norms, timeline), all optional. 3: the metrics always carry
# `effective_sharding` in the catalog's words and, with a prediction, rank 0's measured peak.
# 4: every rank record carries the `measurement_version` of the loop that measured it.
# 5: every result carries its `work` (results.work), which readers used to recompute.
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5)
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
STAGES = (
    "init",
    "data",
    "model",
    "shard",
    "optimizer",
    "first_step",
    "warmup",
    "measure",
    "checkpoint",
    "memory_probe",
    "end",
)
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
_FSDP1_SHARDING_WORDS = {
    "NO_SHARD": "replicated",
    "SHARD_GRAD_OP": "shard_grad_op",
    "FULL_SHARD": "full_shard",
    "HYBRID_SHARD": "hybrid_full_shard",
    "_HYBRID_SHARD_ZERO2": "hybrid_shard_grad_op",
}


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
    if type(version) is not int or version not in READABLE_SCHEMA_VERSIONS:  # true == 1 in Python
        readable = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))
        raise ResultError(f"{path}: schema_version {version!r} is not supported (this fsdp-bench reads {readable})")
