"""The answer a person came for: for each model and a memory budget per device, the fastest
configuration that fits, the runner-up, and what each costs. Measured, finished cases that
trained only; pure pandas, no matplotlib."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fsdp_bench.analysis.busy import HOST_BOUND_BUSY_PCT, host_bound_detail, host_bound_text
from fsdp_bench.analysis.drift import at_least, half_width_of
from fsdp_bench.analysis.run_noise import SINGLE_RUN_NOISE, repeat_count, speed_interval, widened
from fsdp_bench.plan.catalog import intended_timing
from fsdp_bench.report.table import is_set, left_out, model_settings, trained_rows
from fsdp_bench.report.why import short_name
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import TableRow
from fsdp_bench.results.schema import memory_unit
from fsdp_bench.results.stats import CONFIDENCE_PCT, NOISY_CV_PCT

SPEED = M.tokens_per_s_per_device
# The memory a budget is checked against: what the allocator holds when known, else RSS (CPU).
MEMORY_COLUMNS = (M.peak_reserved_gib, M.peak_allocated_gib, M.peak_rss_gib)


def memory_column(df) -> str | None:
    ok = trained_rows(df)
    return next((c for c in MEMORY_COLUMNS if c in ok and ok[c].notna().any()), None)


@dataclass
class Recommendation:
    model: str  # with its sequence length and precision where the run has it at several (table.model_settings)
    memory: str  # the column the budget was checked against
    budget_gib: float | None
    picks: list[TableRow]  # best first; at most two
    over_budget: int  # trained cases left out for exceeding the budget
    unmeasured: int = 0  # trained cases without a measurement of that memory (left out only under a budget)
    tied: list[TableRow] = field(default_factory=list)  # the leaders within noise of the fastest
    unmeasured_strategies: tuple[str, ...] = ()

    def rows_of(self, df):
        """The rows of `df` this recommendation chose among: its model (table.model_settings)."""
        return df[model_settings(df) == self.model]


def recommend(df, budget_gib: float | None = None) -> list[Recommendation]:
    """Per model, the fastest trained configurations whose peak memory fits the budget, and the
    ones whose throughput is within noise of the fastest. Without a budget a case with no
    measured memory still competes (its memory shows as not measured); under a budget it cannot
    be checked, so it is left out and counted."""
    memory = memory_column(df)
    ok = trained_rows(df)
    if memory is None or SPEED not in ok or ok.empty or "model" not in ok:  # a recommendation is per model
        return []
    out = []
    for model, every in ok.groupby(model_settings(ok), sort=True):
        timed = every[every[SPEED].notna()]
        part = timed[timed[memory].notna()]
        fits = timed if budget_gib is None else part[part[memory] <= budget_gib]
        ranked = fits.sort_values([SPEED, memory], ascending=[False, True], na_position="last")
        rows = ranked.to_dict("records")
        tied = [r for r in rows if rows and speeds_overlap(rows[0], r)] if rows else []
        missing = timed[timed[memory].isna()]
        out.append(
            Recommendation(
                str(model),
                memory,
                budget_gib,
                rows[:2],
                len(part) - len(fits) if budget_gib is not None else 0,
                len(missing),
                tied,
                tuple(dict.fromkeys(missing["strategy"])),
            )
        )
    return out


def describe(row: TableRow, memory: str) -> str:
    timing = (
        ""
        if row.get("optimizer_timing") in (None, intended_timing().name)
        else f", optimizer {row['optimizer_timing']}"
    )
    value = row.get(memory)
    mem = "not measured" if value is None or value != value else format_gib(value)
    interval = speed_interval(row)
    spread = (
        "" if interval is None else f" ({_fmt_speed(interval[0])}-{_fmt_speed(interval[1])} at {level_pct(row):.0f}%)"
    )
    return (
        f"{row['strategy']} batch {row['batch_size']} x accum {row['grad_accum']}{timing} "
        f"({row[SPEED]:,.0f} tokens/s/device{spread}, step {row[M.step_time_s_median]:.3g} s, "
        f"{memory.replace('_gib', '').replace('_', ' ')} {mem})"
    )


def _fmt_speed(value: float) -> str:
    return f"{value:,.0f}"


def format_gib(value: float) -> str:
    """GiB, or MiB under 1 GiB (schema.memory_unit, the report table's and the terminal's rule)."""
    factor, unit = memory_unit(value)
    return f"{value:.2f} GiB" if unit == "GiB" else f"{value * factor:.1f} MiB"


def level_pct(row: TableRow) -> float:
    """The confidence level a case's interval reached: CONFIDENCE_PCT, lower with under 6 steps
    (the interval is then min..max)."""
    level = row.get(M.step_time_median_ci_level_pct)
    return level if isinstance(level, (int, float)) and level == level else CONFIDENCE_PCT


def noise_band(row: TableRow) -> tuple[float, float] | None:
    """The tokens/s interval two cases are compared at (analysis.run_noise.widened): a single
    run's widened for run-to-run noise, a case with repeats' as measured and spanning its repeats;
    then at least as wide as the run's measured drift between repeats (run_drift_pct), as the
    tuner widens its cases (analysis.tune.noise_band), so the two tie the same cases."""
    interval = speed_interval(row)
    if interval is None:
        return None
    repeats = row.get(M.repeats)
    low, high = widened(*interval, repeats, row.get(M.repeat_spread_pct))
    return at_least(low, high, half_width_of(row.get(M.run_drift_pct), repeat_count(repeats)))


def speeds_overlap(best: TableRow, second: TableRow) -> bool:
    """Whether the second's tokens/s band reaches the best one's (`noise_band`): within noise (a
    case without an interval cannot be told apart, so it counts as within noise)."""
    if best is second or best.get("case_id") == second.get("case_id"):
        return True
    a, b = noise_band(best), noise_band(second)
    return a is None or b is None or a[0] <= b[1]


def tied_with_best(df, best: TableRow) -> int:
    """How many other trained cases of the best one's like-for-like group (`compare_group`) its
    tokens/s is within noise of (speeds_overlap): a "best" they tie with is best by chance."""
    if "compare_group" not in df or SPEED not in df:
        return 0
    peers = trained_rows(df)
    peers = peers[
        (peers["compare_group"] == best.get("compare_group"))
        & peers[SPEED].notna()
        & (peers["case_id"] != best.get("case_id"))
    ]
    return sum(speeds_overlap(best, r) for r in peers.to_dict("records"))


NOISE_RULE = (
    f"tokens/s {CONFIDENCE_PCT}% intervals, a single run's widened +-{100 * SINGLE_RUN_NOISE:.0f}% for run-to-run noise"
    ", a case with repeats' spanning its repeats' medians"
)


def noise_rule(row: TableRow) -> str:
    """NOISE_RULE, with the run's measured drift between repeats where it has one (every row
    carries the same run_drift_pct)."""
    drift = row.get(M.run_drift_pct)
    if isinstance(drift, (int, float)) and drift > 0:
        return f"{NOISE_RULE}, each at least the run's drift between repeats wide (+-{drift:.0f}% for one run)"
    return NOISE_RULE


def separator(tied: list[TableRow]) -> str:
    """What would tell tied configurations apart, read off their measurements: a noisy step time
    (CV over NOISY_CV_PCT) is the machine's load, which more steps do not fix; single runs are
    widened for run-to-run noise, which only repeats measure; repeated ones need more steps, or
    more repeats where the run measured a drift between them (it narrows as their square root)."""
    noisy = sum(1 for r in tied if (r.get(M.step_time_cv_pct) or 0) > NOISY_CV_PCT)
    repeats = min(repeat_count(r.get(M.repeats)) for r in tied)
    parts = [f"a quieter machine ({noisy} NOISY)"] if noisy else []
    if repeats == 1:
        parts.append("--bench-repeats 3")
    elif drift := half_width_of(tied[0].get(M.run_drift_pct), 1):
        parts.append(f"at least --bench-repeats {_repeats_to_split(tied, drift, repeats)}")
    else:
        parts.append("a longer --bench-measure-cap-s")
    return " and ".join(parts)


def _repeats_to_split(tied: list[TableRow], drift_log: float, repeats: int) -> int:
    """The repeats each at which the run's drift alone (one run's half-width `drift_log`, over
    sqrt(repeats) each way) would leave the two fastest apart: a lower bound, their own intervals
    and spreads come on top; one more than `repeats` when they measured the same speed."""
    gap = math.log(tied[0][SPEED] / tied[1][SPEED]) if len(tied) > 1 and tied[1][SPEED] > 0 else 0.0
    if not gap > 0:
        return repeats + 1
    return max(repeats + 1, math.floor((2 * drift_log / gap) ** 2) + 1)


def _winner_text(rec: Recommendation, budget: str) -> str:
    best = rec.picks[0]
    if len(rec.tied) > 1:
        names = "; ".join(describe(r, rec.memory) for r in rec.tied)
        return (
            f"Recommendation ({rec.model}, {budget}): no single winner, {len(rec.tied)} configurations tied "
            f"within noise (their {noise_rule(rec.picks[0])}, overlap the fastest's): {names}; to separate them: {separator(rec.tied)}"
        )
    text = f"Recommendation ({rec.model}, {budget}): {describe(best, rec.memory)}"
    if len(rec.picks) > 1:
        second = rec.picks[1]
        slower = 100 * (1 - second[SPEED] / best[SPEED])
        text += (
            f"; runner-up {describe(second, rec.memory)}, {slower:.0f}% slower, beyond noise "
            f"(the {noise_rule(best)}, do not overlap)"
        )
    return text


def why_note(rec: Recommendation) -> str:
    """`; why: ...`, the runner-up's step against the winner's taken apart (report.why); '' when
    either has no measured parts."""
    from fsdp_bench.report.why import why_slower

    if len(rec.picks) < 2:
        return ""
    reason = why_slower(rec.picks[1], rec.picks[0])
    if not reason:
        return ""
    return f"; why{' (a difference within noise)' if len(rec.tied) > 1 else ''}: {reason}"


def host_overhead_note(rows: list[TableRow]) -> str:
    """What the ranked cases' GPU busy shares say about the ranking: '' when none is host-bound
    (or none was measured); when all are, the ranking is decided by host overhead."""
    bound = [r for r in rows if is_set(r.get(M.host_bound))]
    if not bound:
        return ""
    if len(rows) == 1:
        return f"; it is {host_bound_text(bound[0][M.gpu_busy_pct], bound[0][M.gpu_idle_ms_per_step])}"
    each = "; ".join(
        f"{short_name(r)}: {host_bound_detail(r[M.gpu_busy_pct], r[M.gpu_idle_ms_per_step])}" for r in bound
    )
    if len(bound) < len(rows):
        return f"; {len(bound)} of the {len(rows)} ranked configurations host-bound ({each})"
    return (
        f"; this ranking is decided by host overhead: {'both' if len(rows) == 2 else f'all {len(rows)}'} ranked "
        f"configurations are host-bound, the GPU busy under {HOST_BOUND_BUSY_PCT:.0f}% of the step ({each}), so "
        "their order measures Python, hook and kernel-launch time on this host more than the strategies' GPU work"
    )


def recommendation_lines(df, budget_gib: float | None = None) -> list[str]:
    lines = []
    for rec in recommend(df, budget_gib):
        budget = "no memory budget" if rec.budget_gib is None else f"budget {rec.budget_gib:g} GiB/device"
        if not rec.picks:
            lines.append(
                f"Recommendation ({rec.model}, {budget}): no trained configuration fits "
                f"({rec.over_budget} over budget, {rec.unmeasured} without a measured {rec.memory})."
            )
            continue
        text = _winner_text(rec, budget)
        text += why_note(rec)
        text += host_overhead_note(rec.tied if len(rec.tied) > 1 else rec.picks)
        if rec.over_budget:
            text += f"; {rec.over_budget} trained configuration(s) over the budget left out"
        if rec.unmeasured:
            what = ", ".join(rec.unmeasured_strategies)
            text += f"; {rec.unmeasured} trained configuration(s) ({what}) have no measured {rec.memory}" + (
                " and are left out: the budget cannot be checked"
                if rec.budget_gib is not None
                else ", ranked by speed all the same"
            )
        omitted = left_out(rec.rows_of(df), SPEED) if "model" in df else ""
        lines.append(text + (f"; {omitted}" if omitted else "") + ".")
    return lines
