"""Older case files brought to the current schema at load, one version step at a time (pyperf's
habit: a result owns its format and upgrades old ones when read), so the report never backfills.

Each step takes a version-N dict and returns a version-N+1 dict; the input is never changed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fsdp_bench.results.metrics import M
from fsdp_bench.results.schema import GIB, SCHEMA_VERSION, sharding_word
from fsdp_bench.results.stats import slowest_rank_step_times, summarize_step_times
from fsdp_bench.results.work import work_of


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return data  # every field version 2 added is optional: absent reads as "not measured"


def _median_interval(metrics: dict[str, Any], ranks: list[dict[str, Any]]) -> None:
    """The median's confidence interval, which every verdict reads, for files written before it
    was a metric (early version-2 files): from the ranks' step times, as the aggregate computes it."""
    times = [r.get("step_times_s") for r in ranks]
    if M.step_time_s_median_ci_low not in metrics and times and all(times):
        stats = summarize_step_times(slowest_rank_step_times(times))
        metrics.update({k: v for k, v in stats.items() if "_ci_" in k})


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """The sharding the ranks really ran as a metric, in the catalog's words, rank 0's measured
    peak beside the prediction it is compared with, and the median's interval where it is missing."""
    metrics = data.get("metrics")
    ranks = [r for r in data.get("ranks") or [] if isinstance(r, dict)]
    if data.get("status") != "ok" or not isinstance(metrics, dict):
        return data
    _median_interval(metrics, ranks)
    if "effective_sharding" not in metrics:
        words = {r.get("effective_sharding") for r in ranks}
        if len(words) == 1 and None not in words:
            metrics["effective_sharding"] = sharding_word(str(words.pop()))
    if M.predicted_peak_gib in metrics and "rank0_peak_allocated_gib" not in metrics:
        peak = next(((r.get("memory") or {}).get("peak_allocated_bytes") for r in ranks if r.get("rank") == 0), None)
        ok = isinstance(peak, (int, float)) and not isinstance(peak, bool)
        metrics["rank0_peak_allocated_gib"] = peak / GIB if ok else None
    return data


def _v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    """Each rank's `measurement_version` (results.schema.MEASUREMENT_VERSION), read off what the
    rank recorded: the loop that took update norms on a few steps only also recorded which ones
    (`update_norm_steps`, version 2); before it, every step (version 1)."""
    for rank in data.get("ranks") or []:
        if isinstance(rank, dict) and "measurement_version" not in rank:
            rank["measurement_version"] = 2 if "update_norm_steps" in rank else 1
    return data


def _v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    """The work per optimizer step, as the writer now records it (results.work)."""
    if "work" not in data:
        data["work"] = work_of(data["case"]) if isinstance(data.get("case"), dict) else None
    return data


# version -> the step that lifts a file of that version by one
STEPS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5}


def migrate_case_result(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (already checked to be a readable version) at the current version."""
    version = data.get("schema_version")
    if version == SCHEMA_VERSION:
        return data
    data = copy.deepcopy(data)
    while version < SCHEMA_VERSION:
        data = STEPS[version](data)
        version += 1
        data["schema_version"] = version
    return data
