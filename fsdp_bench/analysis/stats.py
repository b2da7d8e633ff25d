"""Statistics over measured step times (no torch).

Step-time statistics follow pytest-benchmark's and pyperf's vocabulary; percentiles use linear
interpolation between closest ranks (numpy's default), so p50 equals the median.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable, Sequence


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
