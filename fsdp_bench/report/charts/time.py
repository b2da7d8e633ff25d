"""Charts of where time goes and what training did: loss curves per strategy and optimizer
timing, total vs exposed communication, and the stacked step-time breakdown."""

from __future__ import annotations

import statistics
from pathlib import Path

from fsdp_bench.plan.catalog import strategy_order
from fsdp_bench.report.charts.style import (
    TIMING_LABELS,
    ChartSkipped,
    RunData,
    add_legend,
    bar_positions,
    mark_failures,
    pyplot,
    reference_slice,
    require,
    save_figure,
    strategies_in,
    strategy_color,
    strategy_handles,
    timings_in,
)
from fsdp_bench.report.recommend import tied_with_best
from fsdp_bench.report.table import model_settings, ok_rows
from fsdp_bench.results.metrics import M
from fsdp_bench.results.metrics import label as metric_label
from fsdp_bench.results.records import CaseResult
from fsdp_bench.results.stats import CONFIDENCE_PCT

# The parts of every case's profiled probe step (analysis.attribution), drawn when a run has them;
# older runs fall back to --bench-profile's reduction (STEP_PARTS).
PROBE_PARTS = tuple(
    (metric, metric_label(metric).split(" (")[0], color)  # the registry's label less its unit
    for metric, color in (
        (M.part_compute_s_per_step, "#4C72B0"),
        (M.part_comm_exposed_s_per_step, "#C44E52"),
        (M.part_optimizer_s_per_step, "#55A868"),
        (M.part_data_s_per_step, "#CCB974"),
        (M.part_host_s_per_step, "#8172B2"),
    )
)
STEP_PARTS = (
    (M.compute_s_per_step, "compute", "#4C72B0"),
    (M.comm_exposed_s_per_step, "exposed communication", "#C44E52"),
    (M.optimizer_s_per_step, "optimizer", "#55A868"),
    (M.data_host_s_per_step, "data / host", "#8172B2"),
)


def loss_curve(result: CaseResult) -> list[float]:
    """Mean over ranks of the loss at each optimizer step (warmup included), as the metrics do."""
    curves = [r.get("losses") or [] for r in result.get("ranks") or []]
    curves = [c for c in curves if c]
    if not curves:
        return []
    return [statistics.fmean(step) for step in zip(*curves)]


def chart_loss_curves(run: RunData, path: Path) -> None:
    df = ok_rows(run.df)
    df = df[df["case_id"].map(lambda c: len(loss_curve(run.results.get(c, {}))) > 1)]
    if df.empty:
        raise ChartSkipped("no finished case recorded more than one loss")
    # The model / batch / accum with the most (strategy, timing) curves, so panels compare like with like
    # (a model at several sequence lengths or precisions: at one of them).
    df = df.assign(model=model_settings(df))
    counts = df.groupby(["model", "batch_size", "grad_accum"]).size().reset_index(name="n")
    top = counts.sort_values(["n", "grad_accum", "batch_size"], ascending=[False, True, False]).iloc[0]
    part = df[
        (df["model"] == top["model"])
        & (df["batch_size"] == top["batch_size"])
        & (df["grad_accum"] == top["grad_accum"])
    ]
    timings = timings_in(part)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(timings), figsize=(4.8 * len(timings), 3.8), squeeze=False, sharey=True)
    strategies = strategies_in(part)
    for ax, timing in zip(axes[0], timings):
        rows = part[part["optimizer_timing"] == timing]
        rows = sorted(rows.itertuples(), key=lambda r: (strategy_order(r.strategy), r.strategy))
        for k, row in enumerate(rows):
            curve = loss_curve(run.results[row.case_id])
            # Same seed, same data: correct strategies overlap exactly; thinner lines on top keep each visible.
            ax.plot(
                range(len(curve)),
                curve,
                marker="o",
                markersize=3,
                color=strategy_color(row.strategy),
                lw=1.2 + 1.6 * (len(rows) - 1 - k),
                alpha=0.9,
            )
            warmup = getattr(row, "warmup", 0)
            warmup = int(warmup) if warmup == warmup and warmup else 0  # NaN: a file without the field
        if rows and warmup:
            ax.axvspan(-0.3, warmup - 0.5, color="grey", alpha=0.12, lw=0)
            ax.text(0.01, 0.02, "warmup", transform=ax.transAxes, fontsize=7, color="grey")
        flat = [r.strategy for r in rows if getattr(r, M.params_changed, True) is False]
        note = f"\nparameters never changed: {', '.join(flat)}" if flat else ""
        ax.set_title(TIMING_LABELS.get(timing, timing) + note, fontsize=9, color="#B00020" if flat else "black")
        ax.set_xlabel("optimizer step")
        ax.xaxis.get_major_locator().set_params(integer=True)  # steps are whole numbers
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("training loss (mean over ranks)")
    fig.suptitle(
        f"Loss curves — {top['model']}, batch {top['batch_size']}, grad accum {top['grad_accum']}", fontsize=11
    )
    fig.tight_layout()
    add_legend(fig, strategy_handles(strategies))
    save_figure(fig, path)


def _batch_sizes(part, limit: int = 4) -> list[int]:
    sizes = sorted(int(b) for b in part["batch_size"].unique())
    if len(sizes) <= limit:
        return sizes
    picks = {sizes[round(i * (len(sizes) - 1) / (limit - 1))] for i in range(limit)}
    return sorted(picks)


def chart_communication(run: RunData, path: Path) -> None:
    require(run.df, M.comm_total_s_per_step, M.comm_exposed_s_per_step)
    ref = reference_slice(run.df, M.comm_total_s_per_step, with_batch=False)
    part = ref.select(run.df)
    sizes = _batch_sizes(ok_rows(part)[ok_rows(part)[M.comm_total_s_per_step].notna()])
    part = part[part["batch_size"].isin(sizes)]
    strategies = strategies_in(part)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.5, 0.5 * len(sizes) * len(strategies) + 3), 4.4))
    pos, width = bar_positions(len(strategies))
    for g, size in enumerate(sizes):
        for b, strategy in enumerate(strategies):
            rows = part[(part["batch_size"] == size) & (part["strategy"] == strategy)]
            ok = ok_rows(rows)
            if ok.empty or ok[M.comm_total_s_per_step].isna().all():
                continue
            total, exposed = ok[M.comm_total_s_per_step].iloc[0], ok[M.comm_exposed_s_per_step].iloc[0]
            color = strategy_color(strategy)
            ax.bar(pos(g, b), total, width, color=color, alpha=0.3, edgecolor=color, hatch="..")
            if exposed == exposed:
                ax.bar(pos(g, b), exposed, width * 0.6, color=color)
    mark_failures(ax, part.assign(_g=part["batch_size"].map({s: i for i, s in enumerate(sizes)})), "_g", strategies)
    ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
    ax.set_xlabel("per-device batch size (samples)")
    ax.set_ylabel("communication time per optimizer step (s)")
    ax.set_title(
        f"Communication: total (light, dotted) vs exposed (solid, not overlapped by compute)\n{ref.describe()}",
        fontsize=10,
    )
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    add_legend(fig, strategy_handles(strategies, failures=not part[part["status"] != "ok"].empty))
    save_figure(fig, path)


def median_error(row: dict) -> list[list[float]] | None:
    """Error bar below and above a case's step-time median: its confidence interval."""
    low, high, median = (
        row.get(k) for k in (M.step_time_s_median_ci_low, M.step_time_s_median_ci_high, M.step_time_s_median)
    )
    if not all(isinstance(v, (int, float)) and v == v for v in (low, high, median)):
        return None
    return [[max(0.0, median - low)], [max(0.0, high - median)]]


def _measured_parts(df) -> list[tuple[str, str, str]]:
    for parts in (PROBE_PARTS, STEP_PARTS):
        present = [p for p in parts if p[0] in df and ok_rows(df)[p[0]].notna().any()]
        if len(present) >= 2:
            return present
    raise ChartSkipped(
        "no case measured its step's parts (part_*_s_per_step: probes off?) nor --bench-profile's "
        "compute_s_per_step, comm_exposed_s_per_step, optimizer_s_per_step, data_host_s_per_step"
    )


def _mark_winner(ax, x: int, top: float, tied: int) -> None:
    """The fastest case of its like-for-like group, marked above its bar, with how many it is
    within noise of (recommend.tied_with_best)."""
    text = "fastest" + (f"\n{tied} within noise" if tied else "")
    ax.annotate(text, (x, top), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8, weight="bold")


def chart_step_breakdown(run: RunData, path: Path) -> None:
    present = _measured_parts(run.df)
    ref = reference_slice(run.df, present[0][0], with_batch=False)
    part = ok_rows(ref.select(run.df))
    part = part[part[present[0][0]].notna()]
    sizes = _batch_sizes(part)
    plt = pyplot()
    fig, axes = plt.subplots(
        1,
        len(sizes),
        figsize=(max(4.0, 0.9 * part["strategy"].nunique() + 1.5) * len(sizes), 4.4),
        squeeze=False,
        sharey=True,
    )
    for ax, size in zip(axes[0], sizes):
        rows = sorted(
            part[part["batch_size"] == size].itertuples(), key=lambda r: (strategy_order(r.strategy), r.strategy)
        )
        for x, row in enumerate(rows):
            bottom = 0.0
            for column, label, color in present:
                value = getattr(row, column, None)
                if value is None or value != value:
                    continue
                ax.bar(x, value, 0.6, bottom=bottom, color=color, label=label if x == 0 else None)
                bottom += value
            measured = getattr(row, M.step_time_s_median, None)
            if getattr(row, "is_best", False) is True:
                top = max(bottom, measured if measured == measured and measured else 0.0)
                _mark_winner(ax, x, top, tied_with_best(run.df, row._asdict()))
            if measured is not None and measured == measured:
                ax.errorbar(
                    [x],
                    [measured],
                    yerr=median_error(row._asdict()),
                    marker="D",
                    color="black",
                    ls="",
                    markersize=5,
                    capsize=4,
                    label=f"measured step time (median, {CONFIDENCE_PCT}% interval)" if x == 0 else None,
                )
        ax.set_xticks(range(len(rows)), [r.strategy for r in rows], rotation=25, ha="right", fontsize=8)
        for tick, row in zip(ax.get_xticklabels(), rows):
            tick.set_color(strategy_color(row.strategy))
        ax.set_title(f"batch {size}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("time per optimizer step (s): bars the profiled probe step")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels), fontsize=8, frameon=False
    )
    fig.suptitle(f"Step-time breakdown — {ref.describe()}", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)
