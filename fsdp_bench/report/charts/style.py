"""What every chart shares: one colour per strategy, one line style per optimizer timing, failed
cases drawn as marks instead of gaps, the reference slice bar charts show, and atomic saving."""

from __future__ import annotations

import os
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdp_bench.plan.catalog import OPTIMIZER_TIMING_ROWS, STRATEGIES, intended_timing, strategy_order
from fsdp_bench.report.table import model_settings, ok_rows
from fsdp_bench.results.records import CaseResult, TuneAnswer
from fsdp_bench.results.schema import FAILED_STATUSES

# Colour-blind-friendly first (Okabe-Ito), then tab10's remainder; strategies keep their colour in
# every chart because the colour is looked up by name, never by position in one chart.
_PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#8C564B",
    "#7F7F7F",
    "#BCBD22",
    "#17BECF",
    "#393B79",
    "#F0E442",
)
STRATEGY_COLORS = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(STRATEGIES)}
# The optimizer-timing rows' own line styles and labels (plan.catalog), by timing name.
TIMING_STYLES = {name: row.line_style for name, row in OPTIMIZER_TIMING_ROWS.items()}
TIMING_LABELS = {name: row.label for name, row in OPTIMIZER_TIMING_ROWS.items()}
STATUS_MARKS = {"oom": "OOM", "failed": "FAIL", "timeout": "TIMEOUT"}


def strategy_color(name: str) -> str:
    """Known strategies by registry position; others (added later) by a stable hash of the name."""
    if name in STRATEGY_COLORS:
        return STRATEGY_COLORS[name]
    return _PALETTE[zlib.crc32(name.encode()) % len(_PALETTE)]


class ChartSkipped(Exception):
    """The run lacks this chart's data; the message is the one-line note a person reads."""


@dataclass
class RunData:
    """What charts read: the comparison table and the raw results (for per-rank series)."""

    df: Any
    results: dict[str, CaseResult] = field(default_factory=dict)  # case_id -> merged result
    title: str = ""
    budget_gib: float | None = None  # memory budget per device for the recommendation
    tuning: list[TuneAnswer] = field(default_factory=list)  # --bench-tune answers (RUN/tune/*.json)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Save next to the target and rename, so a reader never sees half a PNG."""
    from fsdp_bench.results.io import readable_mode

    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100, bbox_inches="tight")
        os.chmod(tmp, readable_mode())
        os.replace(tmp, path)
    finally:
        pyplot().close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


def strategies_in(df) -> list[str]:
    return sorted(df["strategy"].dropna().unique(), key=lambda s: (strategy_order(s), s))


def require(df, *columns: str) -> None:
    """Skip the chart unless some finished case has every column."""
    ok = ok_rows(df)
    missing = [c for c in columns if c not in ok.columns or not ok[c].notna().any()]
    if missing:
        raise ChartSkipped(f"no finished case has {', '.join(missing)}")


def failed_rows(df):
    return df[df["status"].isin(FAILED_STATUSES)]


def mark_failures(ax: Any, df, x_col: str, strategies: list[str]) -> None:
    """An x at the bottom of the axis, with OOM/TIMEOUT/FAIL, in the strategy's colour, for every
    case that did not finish: a missing point would read as 'not tried'."""
    for _, row in failed_rows(df).iterrows():
        k = strategies.index(row["strategy"]) if row["strategy"] in strategies else 0
        y = 0.03 + 0.07 * k  # one row per strategy so two failures at one x do not overlap
        trans = ax.get_xaxis_transform()
        ax.plot(
            [row[x_col]],
            [y],
            marker="X",
            markersize=9,
            color=strategy_color(row["strategy"]),
            markeredgecolor="black",
            markeredgewidth=0.6,
            transform=trans,
            clip_on=False,
            zorder=5,
        )
        ax.annotate(
            STATUS_MARKS.get(row["status"], row["status"]),
            (row[x_col], y),
            xycoords=trans,
            xytext=(7, -3),
            textcoords="offset points",
            fontsize=7,
            fontweight="bold",
            color=strategy_color(row["strategy"]),
        )


def strategy_handles(strategies: list[str], *, timings: list[str] | None = None, failures: bool = False):
    """Legend entries: a colour per strategy, then a line style per optimizer timing, then the failure mark."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=strategy_color(s), lw=6, label=s) for s in strategies]
    if timings and len(timings) > 1:
        handles += [
            Line2D([], [], color="black", ls=TIMING_STYLES.get(t, "-."), label=TIMING_LABELS.get(t, t)) for t in timings
        ]
    if failures:
        handles.append(
            Line2D(
                [],
                [],
                color="grey",
                marker="X",
                ls="",
                markersize=9,
                markeredgecolor="black",
                label="did not finish (OOM / TIMEOUT / FAIL)",
            )
        )
    return handles


def add_legend(fig: Any, handles: list) -> None:
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=min(4, len(handles)),
        fontsize=8,
        frameon=False,
    )


def timings_in(df) -> list[str]:
    from fsdp_bench.plan.case import timing_order

    return sorted(df["optimizer_timing"].dropna().unique(), key=lambda t: (timing_order(t), t))


@dataclass(frozen=True)
class Slice:
    """One model / grad-accum / optimizer timing (and maybe batch size) that bar charts compare
    strategies at, so the bars differ only by strategy."""

    model: str
    grad_accum: int
    optimizer_timing: str
    batch_size: int | None = None

    def select(self, df):
        part = df[
            (model_settings(df) == self.model)
            & (df["grad_accum"] == self.grad_accum)
            & (df["optimizer_timing"] == self.optimizer_timing)
        ]
        return part if self.batch_size is None else part[part["batch_size"] == self.batch_size]

    def describe(self) -> str:
        text = f"{self.model}, grad accum {self.grad_accum}, {TIMING_LABELS.get(self.optimizer_timing, self.optimizer_timing)}"
        return text if self.batch_size is None else f"{self.model}, batch {self.batch_size}, " + text.split(", ", 1)[1]


def reference_slice(df, column: str | None = None, *, with_batch: bool = True) -> Slice:
    """The slice where the most strategies have `column` measured; ties go to the optimizer built
    after sharding (the correct program), the smallest grad-accum, then the largest batch."""
    ok = ok_rows(df)
    if column is not None:
        ok = ok[ok[column].notna()] if column in ok else ok.iloc[0:0]
    if ok.empty:
        raise ChartSkipped(f"no finished case has {column}")
    # a model at several sequence lengths or precisions: one of them (Slice.select reads the same labels)
    ok = ok.assign(model=model_settings(ok))
    keys = ["model", "grad_accum", "optimizer_timing"] + (["batch_size"] if with_batch else [])
    counts = ok.groupby(keys)["strategy"].nunique().reset_index()
    counts["_after"] = counts["optimizer_timing"] == intended_timing().name
    counts["_bs"] = counts["batch_size"] if with_batch else 0
    counts = counts.sort_values(["strategy", "_after", "grad_accum", "_bs"], ascending=[False, False, True, False])
    top = counts.iloc[0]
    return Slice(
        top["model"], int(top["grad_accum"]), top["optimizer_timing"], int(top["batch_size"]) if with_batch else None
    )


def bar_positions(n_bars: int, width: float = 0.8):
    """x of each bar in grouped bars: group g, bar b."""
    step = width / max(1, n_bars)
    return lambda g, b: g - width / 2 + step * (b + 0.5), step
