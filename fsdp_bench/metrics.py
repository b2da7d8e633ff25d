"""Pure statistics over measured step times and per-rank records (no torch).

Step-time statistics follow pytest-benchmark's and pyperf's vocabulary; percentiles use linear
interpolation between closest ranks (numpy's default), so p50 equals the median.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Sequence

GIB = 2**30  # one gibibyte; every *_gib metric divides bytes by this


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside [0, 100]")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize_step_times(times_s: Sequence[float]) -> dict[str, float | None]:
    """Median, mean, spread and coefficient of variation of steady-state step times."""
    if not times_s:
        return {}
    mean = statistics.fmean(times_s)
    stdev = statistics.stdev(times_s) if len(times_s) > 1 else 0.0
    return {
        "step_time_s_median": statistics.median(times_s),
        "step_time_s_mean": mean,
        "step_time_s_stdev": stdev,
        "step_time_s_p10": percentile(times_s, 10),
        "step_time_s_p90": percentile(times_s, 90),
        "step_time_s_min": min(times_s),
        "step_time_s_max": max(times_s),
        "step_time_cv_pct": 100 * stdev / mean if mean > 0 else None,
    }


def slowest_rank_step_times(per_rank_times: Iterable[Sequence[float]]) -> list[float]:
    """Per step, the slowest rank's time: a synchronous step ends when its last rank does."""
    columns = list(zip(*per_rank_times))
    return [max(col) for col in columns]


def mean_across_ranks(per_rank_values: Iterable[Sequence[float]]) -> list[float]:
    columns = list(zip(*per_rank_values))
    return [statistics.fmean(col) for col in columns]


def bytes_to_gib(value: float | None) -> float | None:
    return None if value is None else value / GIB


def aggregate_rank_metrics(*, tokens_per_step: int, samples_per_step: int, world_size: int,
                           ranks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The case's headline metrics from its ranks' raw records.

    Throughput uses the median of the slowest-rank step times; losses are averaged over ranks
    (each rank's loss is the mean over its share of the global batch, so the mean is the
    global batch's loss); memory is the largest rank's.
    """
    times = [r["step_times_s"] for r in ranks if r.get("step_times_s")]
    metrics: dict[str, Any] = {}
    if times and len(times) == len(ranks):
        steps = slowest_rank_step_times(times)
        metrics.update(summarize_step_times(steps))
        median = metrics["step_time_s_median"]
        metrics["tokens_per_s"] = tokens_per_step / median
        metrics["tokens_per_s_per_device"] = tokens_per_step / median / world_size
        metrics["samples_per_s"] = samples_per_step / median
        metrics["steps_measured"] = len(steps)
    losses = [r["losses"] for r in ranks if r.get("losses")]
    if losses and len(losses) == len(ranks):
        curve = mean_across_ranks(losses)
        metrics["loss_first"] = curve[0]
        metrics["loss_last"] = curve[-1]
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes"):
        values = [r["memory"][key] for r in ranks if r.get("memory", {}).get(key) is not None]
        if values:
            metrics[key.replace("_bytes", "_gib")] = max(values) / GIB
    changed = [r["params_changed"] for r in ranks if r.get("params_changed") is not None]
    if changed:
        metrics["params_changed"] = all(changed)
    return metrics
