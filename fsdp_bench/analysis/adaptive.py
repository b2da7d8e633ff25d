"""Adaptive measurement (`--bench-target-ci-pct`): when a case has measured enough steps (pure).

After the case's `steps` (the minimum), measuring goes on until the median's confidence interval
(at `stats.CONFIDENCE`) is within +-target % of the median, or the measured steps have taken
`measure_cap_s` seconds, or MAX_STEPS steps were measured; the reason that ended it is recorded
as `measurement_stop_reason`. Every rank decides from the same numbers (the slowest rank's time
of each step, agreed by an all_reduce between steps), so all ranks stop after the same step.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from fsdp_bench.results.stats import ci_halfwidth_pct, median_ci

STOP_REASONS = ("ci_target", "time_cap", "max_steps", "fixed_steps")
MAX_STEPS = 300  # a case with a target never measures more steps than this
# With fewer steps no pair of order statistics reaches 95%: the interval is min..max, not a CI.
MIN_STEPS_FOR_CI = 6


def measurement_stop_reason(times_s: Sequence[float], *, min_steps: int, target_pct: float, cap_s: float) -> str | None:
    """Why measuring stops after these (slowest-rank) step times, or None to measure another
    step. `target_pct` 0: exactly `min_steps` steps ("fixed_steps")."""
    n = len(times_s)
    if n < min_steps:
        return None
    if target_pct <= 0:
        return "fixed_steps"
    if n >= MIN_STEPS_FOR_CI:
        low, high, _ = median_ci(times_s)
        width = ci_halfwidth_pct(low, high, statistics.median(times_s))
        if width is not None and width <= target_pct:
            return "ci_target"
    if sum(times_s) >= cap_s:
        return "time_cap"
    if n >= MAX_STEPS:
        return "max_steps"
    return None


def max_measured_steps(min_steps: int, target_pct: float) -> int:
    """The most measured steps a case can take (for the duration estimate)."""
    return min_steps if target_pct <= 0 else max(min_steps, MAX_STEPS)
