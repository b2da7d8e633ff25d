"""Throughput per device vs peak memory per device, trained cases only: the Pareto frontier
(nothing is both faster and smaller) and the recommended configuration."""

from __future__ import annotations

from pathlib import Path

from fsdp_bench.report.charts.style import ChartSkipped, RunData, pyplot, save_figure, strategy_color
from fsdp_bench.report.recommend import SPEED, memory_column, recommend
from fsdp_bench.report.table import left_out, trained_rows
from fsdp_bench.results.schema import memory_unit
from fsdp_bench.results.stats import pareto_front


def chart_pareto(run: RunData, path: Path) -> None:
    memory = memory_column(run.df)
    ok = trained_rows(run.df)
    if memory is None or SPEED not in ok:
        raise ChartSkipped("no case that trained has both tokens_per_s_per_device and a peak memory")
    timed = ok[ok[SPEED].notna()]
    ok = timed[timed[memory].notna()]
    missing = timed[timed[memory].isna()]  # named on the chart, never silently dropped
    scale, unit = memory_unit(float(ok[memory].max()))  # the report table's unit
    # One panel per recommendation: a model, or a model at one sequence length and precision where
    # it ran at several (table.model_settings). The ringed points are what the
    # recommendation says: its pick, or every configuration tied within noise with it (one ring
    # beside a text saying "tied" picked a winner by chance).
    recs = [r for r in recommend(run.df, run.budget_gib) if not r.rows_of(ok).empty]
    if not recs:
        raise ChartSkipped(f"no case that trained has both tokens_per_s_per_device and {memory}")
    plt = pyplot()
    fig, axes = plt.subplots(1, len(recs), figsize=(6.5 * len(recs), 4.8), squeeze=False)
    for ax, rec in zip(axes[0], recs):
        picks = [t["case_id"] for t in rec.tied] or [r["case_id"] for r in rec.picks[:1]]
        part = rec.rows_of(ok).reset_index(drop=True)
        x, y = part[memory] * scale, part[SPEED]
        for strategy, rows in part.groupby("strategy"):
            ax.scatter(x[rows.index], y[rows.index], color=strategy_color(strategy), label=strategy, s=30)
        front = pareto_front(list(zip(x, y)))
        ax.plot(x[front], y[front], color="black", linewidth=1, linestyle="--", label="Pareto frontier")
        chosen = part.index[part["case_id"].isin(picks)]
        if len(chosen):
            ring = "recommended" if len(picks) == 1 else _tied_label(len(picks), len(chosen))
            ax.scatter(x[chosen], y[chosen], s=220, facecolors="none", edgecolors="#c0392b", linewidths=2, label=ring)
        gone = rec.rows_of(missing)
        notes = (
            [f"not shown, no measured {memory}: {len(gone)} case(s) ({', '.join(dict.fromkeys(gone['strategy']))})"]
            if len(gone)
            else []
        )
        omitted = left_out(rec.rows_of(run.df), SPEED)  # did not train, failed, no tokens/s
        if omitted:
            notes.append("not shown, " + omitted)
        if notes:
            ax.text(
                0.01,
                0.01,
                "\n".join(notes),
                transform=ax.transAxes,
                fontsize=6,
                va="bottom",
                color="#7f8c8d",
                wrap=True,
            )
        if run.budget_gib is not None:
            ax.axvline(run.budget_gib * scale, color="#c0392b", linewidth=1, label="memory budget")
        ax.set_xlabel(f"{memory.replace('_gib', '').replace('_', ' ')} per device ({unit})")
        ax.set_ylabel("tokens/s per device")
        ax.set_title(rec.model)
        ax.legend(fontsize=7)
    fig.suptitle("Throughput vs peak memory (cases that trained; up and left is better)")
    save_figure(fig, path)


def _tied_label(tied: int, drawn: int) -> str:
    shown = "" if drawn == tied else f", {drawn} with a measured peak drawn"
    return f"tied within noise ({tied}{shown}): no single winner"
