"""What a comparison's timing verdicts could see: the run-to-run noise, the smallest change it
could detect, and the repeats that would detect the threshold (terminal and compare.md; pure).

"Within noise" alone does not say whether nothing changed or whether the comparison could not
have seen 40 %: on the shared 2-core CPU machine one repeat moved 4.9-28 % (docs/verdicts.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fsdp_bench.analysis.run_noise import SINGLE_RUN_NOISE, repeats_needed
from fsdp_bench.results.stats import CONFIDENCE_PCT

FALLBACK_TARGET_PCT = 10.0  # the repeats advice's target when --threshold is 0


def _span(values: Iterable[float], fmt: str = "{:g}") -> str:
    values = sorted(set(values))
    if not values:
        return "?"
    low, high = fmt.format(values[0]), fmt.format(values[-1])
    return low if low == high else f"{low}-{high}"


def detectable_span(rows: Iterable[Mapping[str, Any]]) -> str | None:
    """'+45%' or '+38%-+52%': the smallest detectable step-time change over these rows."""
    values = [
        r["step_time_detectable_change_pct"] for r in rows if r.get("step_time_detectable_change_pct") is not None
    ]
    return _span(values, "+{:.0f}%") if values else None


def _target(threshold_pct: float) -> float:
    return threshold_pct if threshold_pct > 0 else FALLBACK_TARGET_PCT


def _advice(sd_log: float, cases: int, threshold_pct: float, reached: bool) -> str:
    target = _target(threshold_pct)
    what = "the threshold" if threshold_pct > 0 else "no threshold is set"
    if reached:
        return f"these repeats already detect +{target:g}% ({what})."
    n = repeats_needed(sd_log, cases, target)
    if n is None:
        return f"no practical number of repeats a side would detect +{target:g}% ({what})."
    return f"use {n} repeats a side to detect +{target:g}% ({what})."


def noise_sentence(comparison: Any) -> str:
    """How the timing verdicts were reached and what they could have seen (compare.md, terminal)."""
    threshold = getattr(comparison, "threshold_pct", 5.0)
    timed = [r for r in comparison.rows if r.get("repeats_base") and r.get("repeats_new")]
    cases = max(len(timed), 1)
    if comparison.noise is None:
        return (
            "Run-to-run noise unknown: neither run has repeats (--bench-repeats 2 or more), and the steps of "
            "one process cannot show what a fresh process changes, so no timing change is called a "
            "regression; timing verdicts are 'inconclusive'. At an assumed "
            f"{100 * SINGLE_RUN_NOISE:.0f}% per repeat (the single-run widening, analysis/run_noise.py), "
            + _advice(SINGLE_RUN_NOISE, cases, threshold, reached=False)
        )
    noise = comparison.noise
    span = detectable_span(timed) or "?"
    worst = max((r["step_time_detectable_change_pct"] or 0) for r in timed) if timed else float("inf")
    return (
        f"Run-to-run noise from the repeats: {100 * noise.sd_log:.1f}% per repeat "
        f"({noise.dof} degrees of freedom); a step-time change counts when its {CONFIDENCE_PCT}% "
        f"interval (for all {noise.cases} cases together) excludes zero. With "
        f"{_span(r['repeats_base'] for r in timed)} repeat(s) in the base run and "
        f"{_span(r['repeats_new'] for r in timed)} in the new, step-time changes under {span} cannot be "
        "told from noise (a slowdown of that size is caught about half the time); "
        + _advice(noise.sd_log, noise.cases, threshold, reached=worst <= _target(threshold))
    )
