"""Run-to-run noise: is a step-time change between two runs more than a fresh process tree
changes anyway? (pure, no torch)

The steps of one process cannot tell: a new torchrun lands on other cores, another allocator
state, another load from the machine's other users, and on a busy machine that moves a case's
median by tens of percent while its within-run interval stays narrow. Only repeats
(`--bench-repeats`, each a fresh process tree) show it, as pyperf's several processes do.

The test, asv-style ("not significant" rather than a guess): per case the mean of the log step-time
medians of its repeats in each run; the run-to-run standard deviation of one repeat's log median
is pooled over every case with repeats in both runs (many cases, many degrees of freedom); the
difference of the means is significant when it exceeds Student's t at `stats.CONFIDENCE` for the
whole comparison (Bonferroni over the cases compared, so 24 cases do not give a false regression
one time in twenty per case) times its standard error. Without repeats the noise is unknown and
no timing change is significant.

"Within noise" has a size: the smallest slowdown whose interval would exclude zero at this noise and
these repeats (`detectable_pct`), and the repeats a side that would bring it down to a target
(`repeats_needed`). A true change of exactly that size is caught about half the time (its
estimate lands on either side of the bound), so a gate is tested with a larger one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fsdp_bench.results.metrics import M
from fsdp_bench.results.stats import CONFIDENCE, t_quantile

# One run's interval misses what a fresh process tree changes: on the shared 2-core CPU machine one
# repeat's median moved 4.9-28% (docs/verdicts.md), while a case's within-run interval is often
# +-2%. Until a case has repeats, its tokens/s interval is widened by this much each way before two
# cases are told apart: the recommendation, "Fastest strategy", the throughput chart and the tuner.
SINGLE_RUN_NOISE = 0.10


def speed_interval(row: Mapping[str, Any], column: str = M.tokens_per_s_per_device) -> tuple[float, float] | None:
    """tokens/s/device (or another rate inversely proportional to the step time, e.g. MFU) at the
    bounds of the step-time median's confidence interval (None when the case has no interval)."""
    low, high, median = (
        row.get(k) for k in (M.step_time_s_median_ci_low, M.step_time_s_median_ci_high, M.step_time_s_median)
    )
    value = row.get(column)
    if not all(isinstance(v, (int, float)) and v == v and v > 0 for v in (low, high, median, value)):
        return None
    return value * median / high, value * median / low


def widened(low: float, high: float, repeats: int | None, spread_pct: float | None = None) -> tuple[float, float]:
    """A tokens/s interval as wide as the noise two cases are compared at: a single run's
    (`repeats` None or 1) widened by SINGLE_RUN_NOISE each way; with repeats, as measured but at
    least as wide as the repeats' own medians (`spread_pct`, the metric repeat_spread_pct:
    (max - min) / median). The pooled steps of two or three processes still hide what a fresh
    process changes: a llama3_tiny case whose repeats' medians were 37 % apart had a pooled
    interval of +-3 %. `repeats` may come from a table's column, where pandas holds it as a float
    (3.0) once any case lacks it, and as NaN for that case: both read as the count they stand for."""
    if repeat_count(repeats) == 1:
        return low * (1 - SINGLE_RUN_NOISE), high * (1 + SINGLE_RUN_NOISE)
    if not isinstance(spread_pct, (int, float)) or not spread_pct > 0 or not low > 0:
        return low, high
    center, half = math.sqrt(low * high), min(spread_pct / 200, 0.5)
    return min(low, center / (1 + half)), max(high, center / (1 - half))


def repeat_count(repeats: Any) -> int:
    """The repeats a table's cell stands for: None, NaN, 0 and 1 are a single run; 3.0 is 3."""
    return int(repeats) if isinstance(repeats, (int, float)) and repeats > 1 else 1


@dataclass(frozen=True)
class RunNoise:
    sd_log: float  # run-to-run standard deviation of one repeat's log step-time median
    dof: int
    cases: int  # cases compared (the Bonferroni factor)

    @property
    def t(self) -> float:
        return t_quantile(1 - (1 - CONFIDENCE) / (2 * max(self.cases, 1)), self.dof)


@dataclass(frozen=True)
class TimingChange:
    change_pct: float  # new vs base step-time median (mean of log repeat medians), + is slower
    low_pct: float | None  # its interval at CONFIDENCE; None when the run-to-run noise is unknown
    high_pct: float | None
    detectable_pct: float | None = None  # the smallest slowdown this comparison calls significant

    @property
    def significant(self) -> bool:
        return self.low_pct is not None and (self.low_pct > 0 or self.high_pct < 0)


def _logs(medians: Sequence[float]) -> list[float]:
    return [math.log(m) for m in medians if isinstance(m, (int, float)) and m > 0]


def pooled_run_noise(by_case: Mapping[str, tuple[Sequence[float], Sequence[float]]]) -> RunNoise | None:
    """The run-to-run noise from every case's repeat medians (base, new); None when no case has
    two repeats in either run."""
    ss, dof = 0.0, 0
    for base, new in by_case.values():
        for medians in (_logs(base), _logs(new)):
            if len(medians) > 1:
                mean = statistics.fmean(medians)
                ss += sum((x - mean) ** 2 for x in medians)
                dof += len(medians) - 1
    if dof == 0:
        return None
    return RunNoise(math.sqrt(ss / dof), dof, len(by_case))


def timing_change(base: Sequence[float], new: Sequence[float], noise: RunNoise | None) -> TimingChange | None:
    """The step-time change of one case and its interval (see the module docstring)."""
    lb, ln = _logs(base), _logs(new)
    if not lb or not ln:
        return None
    d = statistics.fmean(ln) - statistics.fmean(lb)
    change = 100 * math.expm1(d)
    if noise is None:
        return TimingChange(change, None, None)
    half = noise.t * noise.sd_log * math.sqrt(1 / len(lb) + 1 / len(ln))
    return TimingChange(change, 100 * math.expm1(d - half), 100 * math.expm1(d + half), 100 * math.expm1(half))


MAX_REPEATS = 1000  # beyond this a target is out of reach for any sweep worth running


def repeats_needed(sd_log: float, cases: int, target_pct: float) -> int | None:
    """Repeats a side (the same on both) for a slowdown of `target_pct` to be significant at a
    run-to-run noise of `sd_log` per repeat, Bonferroni over `cases`, the noise pooled over every
    case in both runs as `pooled_run_noise` does (None: more than MAX_REPEATS, or no target)."""
    if not target_pct > 0 or not sd_log >= 0:
        return None
    bound = math.log1p(target_pct / 100)
    for n in range(2, MAX_REPEATS + 1):
        noise = RunNoise(sd_log, 2 * max(cases, 1) * (n - 1), cases)
        if noise.t * sd_log * math.sqrt(2 / n) <= bound:
            return n
    return None
