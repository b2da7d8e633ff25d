"""Charts of a metric against batch size: throughput, peak memory, MFU, and the GPU-utilization
heatmap. One line per strategy (colour) and optimizer timing (line style); failed cases marked."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fsdp_bench.analysis.run_noise import speed_interval
from fsdp_bench.report.charts.style import (
    STATUS_MARKS,
    TIMING_STYLES,
    ChartSkipped,
    RunData,
    add_legend,
    failed_rows,
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
from fsdp_bench.report.recommend import level_pct, speeds_overlap
from fsdp_bench.report.table import model_settings, ok_rows, trained_rows
from fsdp_bench.results.metrics import M
from fsdp_bench.results.metrics import label as metric_label
from fsdp_bench.results.stats import CONFIDENCE_PCT

MEMORY_KINDS = (
    (M.peak_allocated_gib, "allocated (allocator)"),
    (M.peak_reserved_gib, "reserved (allocator)"),
    (M.peak_rss_gib, "process RSS (host memory)"),
)


def _batch_axis(ax: Any, sizes: list[int]) -> None:
    if sizes and max(sizes) / max(1, min(sizes)) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("per-device batch size (samples)")


def _facets(df, extra: list[tuple[str, str]] | None = None):
    """(panel title, rows, column) per model x grad-accum (x extra columns)."""
    panels = []
    df = df.assign(model=model_settings(df))  # one panel per sequence length and precision of a model run at several
    models = sorted(df["model"].unique())
    for model in models:
        for ga in sorted(df["grad_accum"].unique()):
            part = df[(df["model"] == model) & (df["grad_accum"] == ga)]
            if part.empty:
                continue
            head = (f"{model}, " if len(models) > 1 else "") + f"grad accum {ga}"
            for column, label in extra or [(None, "")]:
                panels.append((head + (f" — {label}" if label else ""), part, column))
    return panels


def _series_errors(group, column: str, factor: float) -> list[list[float]] | None:
    """Error bars below and above each point: the metric at the bounds of the step-time median's
    confidence interval (rates only); None when no point of the series has an interval."""
    bounds = [speed_interval(row, column) for row in group.to_dict("records")]
    if all(b is None for b in bounds):
        return None
    values = list(group[column])
    return [
        [0.0 if b is None else max(0.0, (v - b[0]) * factor) for v, b in zip(values, bounds)],
        [0.0 if b is None else max(0.0, (b[1] - v) * factor) for v, b in zip(values, bounds)],
    ]


def overlapping_leaders(ok, column: str) -> list[int]:
    """Batch sizes where the two fastest series' intervals overlap: their order there is within noise."""
    sizes = []
    ok = trained_rows(ok)  # a case that did not train is never called fastest
    for size, rows in ok[ok[column].notna()].groupby("batch_size"):
        ranked = rows.sort_values(column, ascending=False).to_dict("records")
        if len(ranked) > 1 and speed_interval(ranked[0], column) and speeds_overlap(ranked[0], ranked[1]):
            sizes.append(int(size))
    return sizes


def _levels(df) -> str:
    """ "95%", or "75-95%" when some case had too few steps to reach CONFIDENCE (min..max)."""
    lowest = min((level_pct(r) for r in ok_rows(df).to_dict("records")), default=CONFIDENCE_PCT)
    return f"{CONFIDENCE_PCT}%" if lowest >= CONFIDENCE_PCT else f"{lowest:.0f}-{CONFIDENCE_PCT}%"


def _plot_series(ax: Any, ok, column: str, factor: float, with_errors: bool) -> None:
    for (strategy, timing), group in ok.groupby(["strategy", "optimizer_timing"], sort=False):
        group = group[group[column].notna()].sort_values("batch_size")
        if group.empty:
            continue
        errors = _series_errors(group, column, factor) if with_errors else None
        ax.errorbar(
            group["batch_size"],
            group[column] * factor,
            yerr=errors,
            fmt=TIMING_STYLES.get(timing, "-."),
            marker="o",
            markersize=4,
            color=strategy_color(strategy),
            lw=1.8,
            capsize=3,
            elinewidth=1,
        )
    if with_errors and (crossed := overlapping_leaders(ok, column)):
        ax.text(
            0.98,
            0.02,
            f"fastest two within noise at batch {', '.join(map(str, crossed))}",
            transform=ax.transAxes,
            fontsize=7,
            color="#555555",
            ha="right",
        )


def draw_lines_vs_batch(
    run: RunData,
    panels: list,
    ylabel: str,
    title: str,
    path: Path,
    ncols: int,
    *,
    zero_floor: bool = True,
    units: dict[str, tuple[float, str]] | None = None,
    with_errors: bool = False,
) -> None:
    """`units`: per column, (factor, y label) overriding `ylabel`, e.g. MiB for tiny memory.
    `with_errors`: the column is a rate (1 / step time); bars show its confidence interval."""
    units = units or {}
    plt = pyplot()
    df = run.df
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows), squeeze=False)
    strategies, timings = strategies_in(df), timings_in(df)
    sizes = sorted(int(b) for b in df["batch_size"].unique())
    for ax, (panel_title, part, column) in zip(axes.flat, panels):
        ok = ok_rows(part)
        missing = sorted(set(ok["strategy"]) - set(ok[ok[column].notna()]["strategy"]))
        if missing:  # finished, but this metric was not measured for them: say so, not a silent gap
            ax.text(
                0.02, 0.02, f"not measured: {', '.join(missing)}", transform=ax.transAxes, fontsize=7, color="#555555"
            )
        _plot_series(ax, ok, column, units.get(column, (1.0, ""))[0], with_errors)
        mark_failures(ax, part, "batch_size", strategies)
        ax.set_title(panel_title, fontsize=10)
        _batch_axis(ax, sizes)
        ax.set_ylabel(units.get(column, (1.0, ylabel))[1])
        if zero_floor:
            ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    bars = f"\nbars: from the step-time median's {_levels(run.df)} confidence interval" if with_errors else ""
    fig.suptitle(title + (f" — {run.title}" if run.title else "") + bars, fontsize=12)
    fig.tight_layout()
    add_legend(fig, strategy_handles(strategies, timings=timings, failures=not failed_rows(df).empty))
    save_figure(fig, path)


def chart_throughput(run: RunData, path: Path) -> None:
    require(run.df, M.tokens_per_s_per_device)
    panels = _facets(run.df, [(M.tokens_per_s_per_device, "")])
    draw_lines_vs_batch(
        run,
        panels,
        metric_label(M.tokens_per_s_per_device),
        "Throughput vs batch size (higher is better)",
        path,
        ncols=min(3, run.df["grad_accum"].nunique()),
        with_errors=True,
    )


def chart_peak_memory(run: RunData, path: Path) -> None:
    kinds = [(c, label) for c, label in MEMORY_KINDS if c in ok_rows(run.df) and ok_rows(run.df)[c].notna().any()]
    if not kinds:
        raise ChartSkipped("no finished case has peak_allocated_gib, peak_reserved_gib or peak_rss_gib")
    panels = _facets(run.df, kinds)
    # MiB per kind whose values are under 0.1 GiB: a tiny model's memory would read 0.00 GiB
    units = {c: (1024.0, "peak memory per device (MiB)") for c, _ in kinds if ok_rows(run.df)[c].max() < 0.1}
    draw_lines_vs_batch(
        run,
        panels,
        "peak memory per device (GiB)",
        "Peak memory vs batch size (largest rank; lower is better)",
        path,
        ncols=len(kinds),
        units=units,
    )


def chart_mfu(run: RunData, path: Path) -> None:
    if M.mfu_pct not in run.df or not ok_rows(run.df)[M.mfu_pct].notna().any():
        reason = ""
        if "mfu_null_reason" in run.df and run.df["mfu_null_reason"].notna().any():
            reason = f" ({run.df['mfu_null_reason'].dropna().iloc[0]})"
        raise ChartSkipped(f"no finished case has mfu_pct: no peak FLOPs known for the device{reason}")
    panels = _facets(run.df, [(M.mfu_pct, "")])
    draw_lines_vs_batch(
        run,
        panels,
        metric_label(M.mfu_pct),
        "MFU vs batch size (higher is better)",
        path,
        ncols=min(3, run.df["grad_accum"].nunique()),
        with_errors=True,
    )


# The heatmap's figure, first found first: the busy share from the device timeline; NVML's sampled
# figure only for runs made before the busy probe (it is no busy measure: see analysis.busy).
_UTIL_COLUMNS = (
    (M.gpu_busy_pct, metric_label(M.gpu_busy_pct), "GPU busy share of the step (profiler probe step)"),
    (M.gpu_util_pct_mean, metric_label(M.gpu_util_pct_mean), "NVML sampled utilization, not a busy measure"),
)


def chart_gpu_util(run: RunData, path: Path) -> None:
    found = [c for c in _UTIL_COLUMNS if c[0] in run.df and ok_rows(run.df)[c[0]].notna().any()]
    if not found:
        raise ChartSkipped("no finished case has gpu_busy_pct or gpu_util_pct_mean (measured on GPUs only)")
    column, bar_label, title = found[0]
    import numpy as np

    plt = pyplot()
    ref = reference_slice(run.df, column, with_batch=False)
    part = ref.select(run.df)
    strategies = strategies_in(part)
    sizes = sorted(int(b) for b in part["batch_size"].unique())
    grid = np.full((len(strategies), len(sizes)), np.nan)
    labels = [[""] * len(sizes) for _ in strategies]
    for _, row in part.iterrows():
        i, j = strategies.index(row["strategy"]), sizes.index(int(row["batch_size"]))
        if row["status"] == "ok" and row.get(column) == row.get(column):
            grid[i, j] = row[column]
            labels[i][j] = f"{row[column]:.0f}%"
        elif row["status"] in STATUS_MARKS:
            labels[i][j] = STATUS_MARKS[row["status"]]
    fig, ax = plt.subplots(figsize=(1.2 * len(sizes) + 3, 0.55 * len(strategies) + 2))
    image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    for i in range(len(strategies)):
        for j in range(len(sizes)):
            value = grid[i, j]
            color = "white" if value != value or value < 60 else "black"
            ax.text(
                j,
                i,
                labels[i][j] or "—",
                ha="center",
                va="center",
                fontsize=8,
                color="black" if value != value else color,
            )
    ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
    ax.set_yticks(range(len(strategies)), strategies)
    for tick, strategy in zip(ax.get_yticklabels(), strategies):
        tick.set_color(strategy_color(strategy))
    ax.set_xlabel("per-device batch size (samples)")
    fig.colorbar(image, ax=ax, label=bar_label)
    ax.set_title(f"{title}\n{ref.describe()}", fontsize=10)
    save_figure(fig, path)
