"""The machine's drift while tuning, measured rather than assumed (issue 40; pure, no torch).

A single measurement says how fast a case was in its minute, not how fast it is: on a shared
machine whose load moves, a case measured in a quiet minute beats a better case measured later
under load. On a 2-core machine at load 7-9 the tuner measured fsdp1_shard_grad_op bs8 once at
17,663 tokens/s/device, called it separated beyond noise from a runner-up at 11,691, and stopped;
the full grid, right after, measured it at 9,577 and tied five configurations ahead of it.

So the tuner measures the drift as it goes: every repeat of a case runs in another round (or
round-robin within one, launch.rounds), so the spread of a case's repeat medians is what the
machine changed between them; pooled over every case with repeats (log medians, as
run_noise.pooled_run_noise) it is the run-to-run standard deviation of one measurement. The
tuner re-measures its leader each exploring round (the control), so the pool always grows.

A case's band is then at least `DRIFT_Z` x that deviation / sqrt(its repeats) each way (in log
terms), never narrower than the assumed single-run widening (run_noise.SINGLE_RUN_NOISE) or the
case's own interval and repeat spread. DRIFT_Z is the normal quantile, not Student's t at the
pool's few degrees of freedom (t at 1 dof is 12.7: every case tied for a whole tuning); instead a
lone winner is only ever claimed once the pool has MIN_DRIFT_DOF degrees of freedom and the winner
itself was measured at least twice (the control makes both true within two rounds).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fsdp_bench.analysis.run_noise import pooled_run_noise
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import CaseResult
from fsdp_bench.results.trained import untrained_reason

DRIFT_Z = 1.96  # two-sided 95% normal quantile (results.stats.CONFIDENCE)
MIN_DRIFT_DOF = 2  # degrees of freedom the pool needs before a lone winner may be claimed


@dataclass(frozen=True)
class Drift:
    """The run-to-run noise measured during the tuning: sd of one measurement's log median."""

    sd_log: float
    dof: int
    cases: int  # cases whose repeats the pool holds

    def half_width(self, repeats: int) -> float:
        """The relative half-width (log) of a case's band at `repeats` measurements."""
        return DRIFT_Z * self.sd_log / math.sqrt(max(1, repeats))

    @property
    def pct(self) -> float:
        """One measurement's band half-width in percent: what a reader compares speeds at."""
        return 100 * math.expm1(self.half_width(1))

    def describe(self) -> str:
        """`+-12% per run`, or `a factor of 3.2 per run` once the band is multiplicative in size."""
        factor = math.exp(self.half_width(1))
        return f"+-{self.pct:.0f}% per run" if factor < 2 else f"a factor of {factor:.1f} per run"

    @property
    def enough(self) -> bool:
        return self.dof >= MIN_DRIFT_DOF


def measured_drift(repeat_medians: Iterable[Sequence[float]]) -> Drift | None:
    """The pooled drift over the cases' repeat step-time medians (None: no case has two)."""
    pool = {str(i): (list(m), []) for i, m in enumerate(repeat_medians) if len(m) > 1}
    noise = pooled_run_noise(pool)
    return None if noise is None else Drift(noise.sd_log, noise.dof, len(pool))


def drift_band(low: float, high: float, repeats: int, drift: Drift | None) -> tuple[float, float]:
    """A tokens/s band (already widened for the assumed noise) widened to the measured drift."""
    return (low, high) if drift is None else at_least(low, high, drift.half_width(repeats))


def at_least(low: float, high: float, half_log: float) -> tuple[float, float]:
    """The band, at least `half_log` wide each way (log terms) about its geometric centre."""
    if not low > 0 or not high > 0 or not half_log > 0:
        return low, high
    center = math.sqrt(low * high)
    return min(low, center * math.exp(-half_log)), max(high, center * math.exp(half_log))


def run_drift(results: Iterable[CaseResult]) -> Drift | None:
    """A run's drift, pooled over the repeat medians of every case that trained, as the tuner
    pools it over the cases it measured (analysis.tune.tuning_drift): the sweep's recommendation
    then ties and separates cases as the tuner did. None: no trained case ran twice."""
    medians = []
    for result in results:
        metrics = result.get("metrics") or {}
        if result.get("status") == "ok" and not untrained_reason(metrics):
            medians.append([x for x in metrics.get(M.repeat_step_time_s_medians) or () if isinstance(x, (int, float))])
    return measured_drift(medians)


def half_width_of(drift_pct: Any, repeats: int) -> float:
    """A case's drift half-width (log) at `repeats` measurements from the run's drift in percent
    (one run's half-width, the table's run_drift_pct); 0 when the run measured none."""
    if not isinstance(drift_pct, (int, float)) or not drift_pct > 0:
        return 0.0
    return math.log1p(drift_pct / 100) / math.sqrt(max(1, repeats))
