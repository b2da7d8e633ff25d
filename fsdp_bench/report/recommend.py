"""The answer a person came for: for each model and a memory budget per device, the fastest
configuration that fits, the runner-up, and what each costs. Measured, finished cases that
trained only; pure pandas, no matplotlib."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsdp_bench.report.table import trained_rows
from fsdp_bench.results.metrics import M

SPEED = M.tokens_per_s_per_device
# The memory a budget is checked against: what the allocator holds when known, else RSS (CPU).
MEMORY_COLUMNS = (M.peak_reserved_gib, M.peak_allocated_gib, M.peak_rss_gib)


def memory_column(df) -> str | None:
    ok = trained_rows(df)
    return next((c for c in MEMORY_COLUMNS if c in ok and ok[c].notna().any()), None)


@dataclass
class Recommendation:
    model: str
    memory: str  # the column the budget was checked against
    budget_gib: float | None
    picks: list[dict[str, Any]]  # best first; at most two
    over_budget: int  # trained cases left out for exceeding the budget
    unmeasured: int = 0  # trained cases left out for having no measurement of that memory


def recommend(df, budget_gib: float | None = None) -> list[Recommendation]:
    """Per model, the two fastest trained configurations whose peak memory fits the budget."""
    memory = memory_column(df)
    ok = trained_rows(df)
    if memory is None or SPEED not in ok or ok.empty:
        return []
    out = []
    for model, every in ok.groupby("model"):
        part = every[every[SPEED].notna() & every[memory].notna()]
        fits = part if budget_gib is None else part[part[memory] <= budget_gib]
        ranked = fits.sort_values([SPEED, memory], ascending=[False, True])
        out.append(Recommendation(str(model), memory, budget_gib, ranked.head(2).to_dict("records"),
                                  len(part) - len(fits), len(every) - len(part)))
    return out


def describe(row: dict[str, Any], memory: str) -> str:
    timing = "" if row.get("optimizer_timing") in (None, "after_shard") else f", optimizer {row['optimizer_timing']}"
    return (f"{row['strategy']} batch {row['batch_size']} x accum {row['grad_accum']}{timing} "
            f"({row[SPEED]:,.0f} tokens/s/device, step {row[M.step_time_s_median]:.3g} s, "
            f"{memory.replace('_gib', '').replace('_', ' ')} {format_gib(row[memory])})")


def format_gib(value: float) -> str:
    """GiB, or MiB when under 0.1 GiB (tiny CPU models would otherwise read 0.00 GiB)."""
    return f"{value:.2f} GiB" if value >= 0.1 else f"{value * 1024:.1f} MiB"


def speed_interval(row: dict[str, Any]) -> tuple[float, float] | None:
    """tokens/s/device at the bounds of the step-time median's confidence interval (None when
    the case has no interval)."""
    low, high, median = (row.get(k) for k in (M.step_time_s_median_ci_low, M.step_time_s_median_ci_high,
                                              M.step_time_s_median))
    if not all(isinstance(v, (int, float)) and v == v and v > 0 for v in (low, high, median)):
        return None
    return row[SPEED] * median / high, row[SPEED] * median / low


def speeds_overlap(best: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether the runner-up's speed is within the measured noise of the best one's."""
    a, b = speed_interval(best), speed_interval(second)
    return a is not None and b is not None and a[0] <= b[1]


def recommendation_lines(df, budget_gib: float | None = None) -> list[str]:
    lines = []
    for rec in recommend(df, budget_gib):
        budget = "no memory budget" if rec.budget_gib is None else f"budget {rec.budget_gib:g} GiB/device"
        if not rec.picks:
            lines.append(f"Recommendation ({rec.model}, {budget}): no trained configuration fits "
                         f"({rec.over_budget} over budget).")
            continue
        best = rec.picks[0]
        text = f"Recommendation ({rec.model}, {budget}): {describe(best, rec.memory)}"
        if len(rec.picks) > 1:
            second = rec.picks[1]
            slower = 100 * (1 - second[SPEED] / best[SPEED])
            verdict = (f"{slower:.0f}% slower, within noise (their step-time medians' confidence intervals overlap)"
                       if speeds_overlap(best, second) else f"{slower:.0f}% slower")
            text += f"; runner-up {describe(second, rec.memory)}, {verdict}"
        if rec.over_budget:
            text += f"; {rec.over_budget} trained configuration(s) over the budget left out"
        if rec.unmeasured:
            text += f"; {rec.unmeasured} trained configuration(s) without a measured {rec.memory} left out"
        lines.append(text + ".")
    return lines
