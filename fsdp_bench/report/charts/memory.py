"""Memory charts: memory at each worker stage, the breakdown at the peak against the ZeRO
expectation, and memory over time for the optimizer-timing comparison."""

from __future__ import annotations

from pathlib import Path

from fsdp_bench.plan.case import timing_order
from fsdp_bench.plan.catalog import strategy_order
from fsdp_bench.report.charts.style import (
    STATUS_MARKS,
    TIMING_LABELS,
    TIMING_STYLES,
    ChartSkipped,
    RunData,
    add_legend,
    bar_positions,
    pyplot,
    reference_slice,
    require,
    save_figure,
    strategies_in,
    strategy_color,
    strategy_handles,
)
from fsdp_bench.report.table import model_settings, ok_rows
from fsdp_bench.results.metrics import M
from fsdp_bench.results.readings import MemorySample
from fsdp_bench.results.records import CaseResult
from fsdp_bench.results.schema import GIB, STAGE_LABELS, STAGES

# The stages a rank reads memory after, in the order it passes them.
STAGE_ORDER = tuple(s for s in STAGES if s in STAGE_LABELS)
BREAKDOWN = (
    ("params", "#4C72B0"),
    ("grads", "#DD8452"),
    ("optimizer", "#55A868"),
    ("activations", "#C44E52"),
    ("other", "#BBBBBB"),
)


def _stage_series(result: CaseResult, kind: str) -> dict[str, float]:
    """stage -> the largest rank's memory (GiB) after that stage."""
    out: dict[str, float] = {}
    labels: dict[str, str] = {}
    for rank in result.get("ranks") or []:
        for entry in rank.get("stages") or []:
            value = entry.get(f"{kind}_bytes")
            if isinstance(value, (int, float)):
                stage = entry.get("stage")
                out[stage] = max(out.get(stage, 0.0), value / GIB)
                labels[stage] = entry.get("label") or stage
    return out


def _stage_kinds(results: list[CaseResult]) -> list[tuple[str, str]]:
    names = (
        ("allocated", "allocated (allocator)"),
        ("reserved", "reserved (allocator)"),
        ("rss", "process RSS (host memory)"),
    )
    present = [(k, label) for k, label in names if any(_stage_series(r, k) for r in results)]
    # RSS only when the allocator was not read (CPU runs): on GPUs it is host memory, not the question.
    return [p for p in present if p[0] != "rss"] or present


def chart_memory_stages(run: RunData, path: Path) -> None:
    df = run.df
    with_stages = [cid for cid, r in run.results.items() if any(rk.get("stages") for rk in r.get("ranks") or [])]
    if not with_stages:
        raise ChartSkipped("no case recorded memory at stages")
    ref = reference_slice(df[df["case_id"].isin(with_stages)])
    part = ref.select(df)
    part = part[part["case_id"].isin(with_stages)]
    cases = sorted(part.itertuples(), key=lambda r: (strategy_order(r.strategy), r.strategy))
    results = [run.results[c.case_id] for c in cases]
    kinds = _stage_kinds(results)
    if not kinds:
        raise ChartSkipped("no case recorded memory at stages")
    plt = pyplot()
    fig, axes = plt.subplots(
        len(kinds), 1, figsize=(max(7.0, 1.3 * len(STAGE_ORDER) + 1), 3.6 * len(kinds)), squeeze=False
    )
    for ax, (kind, kind_label) in zip(axes[:, 0], kinds):
        series = [_stage_series(r, kind) for r in results]
        stages = [s for s in STAGE_ORDER if any(s in x for x in series)]
        stages += sorted({s for x in series for s in x} - set(stages))
        pos, width = bar_positions(len(cases))
        for b, (case, values) in enumerate(zip(cases, series)):
            xs = [pos(g, b) for g, s in enumerate(stages) if s in values]
            ys = [values[s] for s in stages if s in values]
            failed = case.status != "ok"
            ax.bar(
                xs,
                ys,
                width,
                color=strategy_color(case.strategy),
                hatch="//" if failed else None,
                edgecolor="black" if failed else "none",
                linewidth=0.5,
                alpha=0.6 if failed else 1.0,
            )
            if failed:
                ax.annotate(
                    f"{STATUS_MARKS.get(case.status, case.status)} after this",
                    (xs[-1], ys[-1]),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    fontsize=7,
                    rotation=90,
                    va="bottom",
                )
        ax.set_xticks(range(len(stages)), [s.replace("_", " ") for s in stages])
        ax.set_xlabel("worker stage (memory read after it)")
        ax.set_ylabel(f"{kind} memory (GiB)")
        ax.set_title(kind_label, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"Memory at each stage, largest rank — {ref.describe()}", fontsize=11)
    fig.tight_layout()
    add_legend(fig, strategy_handles(strategies_in(part)))
    save_figure(fig, path)


def chart_memory_breakdown(run: RunData, path: Path) -> None:
    columns = [f"breakdown_{name}_gib" for name, _ in BREAKDOWN]
    require(run.df, *columns[:3])
    ref = reference_slice(run.df, M.breakdown_params_gib)
    part = ok_rows(ref.select(run.df))
    part = part[part[M.breakdown_params_gib].notna()]
    rows = sorted(part.itertuples(), key=lambda r: (strategy_order(r.strategy), r.strategy))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows) + 2.5), 4.4))
    for x, row in enumerate(rows):
        bottom = 0.0
        for (name, color), column in zip(BREAKDOWN, columns):
            value = getattr(row, column, None)
            if value is None or value != value:
                continue
            ax.bar(
                x,
                value,
                0.6,
                bottom=bottom,
                color=color,
                label=name if x == 0 else None,
                edgecolor="white",
                linewidth=0.5,
            )
            bottom += value
        expected = getattr(row, M.expected_model_state_gib, None)
        if expected is not None and expected == expected:
            ax.hlines(
                expected,
                x - 0.38,
                x + 0.38,
                colors="black",
                linestyles="--",
                lw=2,
                label="ZeRO expectation: params+grads+optimizer" if x == 0 else None,
            )
    ax.set_xticks(range(len(rows)), [r.strategy for r in rows], rotation=20, ha="right")
    for tick, row in zip(ax.get_xticklabels(), rows):
        tick.set_color(strategy_color(row.strategy))
    ax.set_ylabel("memory per device at the peak (GiB)")
    ax.set_title(f"Memory breakdown at the peak, largest rank\n{ref.describe()}", fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    save_figure(fig, path)


def _timeline(result: CaseResult) -> list[MemorySample]:
    """The timeline of the rank with the highest allocated peak."""
    best: list[MemorySample] = []
    for rank in result.get("ranks") or []:
        line = [p for p in rank.get("memory_timeline") or [] if isinstance(p, dict) and p.get("t_s") is not None]
        peak = max((p.get("allocated_bytes") or 0 for p in line), default=-1)
        if line and peak > max((p.get("allocated_bytes") or 0 for p in best), default=-1):
            best = line
    return best


def _timeline_cases(run: RunData) -> list[str]:
    """Prefer one strategy's optimizer-timing comparison (after / before / before+fix) at one
    batch; otherwise one case per strategy at the reference slice."""
    df = run.df
    have = df[df["case_id"].map(lambda c: bool(_timeline(run.results.get(c, {}))))]
    if have.empty:
        raise ChartSkipped("no case recorded memory_timeline (the allocator timeline is read on GPUs)")
    model = model_settings(have)  # a model at several sequence lengths or precisions: one of them
    groups = have.groupby([model, "strategy", "batch_size", "grad_accum"])["optimizer_timing"].nunique()
    if groups.max() > 1:
        key = groups.sort_values(ascending=False).index[0]
        part = have[
            (model == key[0])
            & (have["strategy"] == key[1])
            & (have["batch_size"] == key[2])
            & (have["grad_accum"] == key[3])
        ]
        return list(part.sort_values("optimizer_timing", key=lambda s: s.map(timing_order))["case_id"])
    ref = reference_slice(have)
    return list(ref.select(have)["case_id"])[:6]


def chart_memory_timeline(run: RunData, path: Path) -> None:
    case_ids = _timeline_cases(run)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    rows = run.df.set_index("case_id")
    for case_id in case_ids:
        row, line = rows.loc[case_id], _timeline(run.results[case_id])
        t0 = line[0]["t_s"]
        label = f"{row['strategy']}, {TIMING_LABELS.get(row['optimizer_timing'], row['optimizer_timing'])}"
        if row["status"] != "ok":
            label += f" ({STATUS_MARKS.get(row['status'], row['status'])})"
        for ax, key in zip(axes, ("allocated_bytes", "reserved_bytes")):
            points = [(p["t_s"] - t0, p[key] / GIB) for p in line if isinstance(p.get(key), (int, float))]
            if points:
                ax.plot(
                    *zip(*points),
                    TIMING_STYLES.get(row["optimizer_timing"], "-."),
                    lw=1.6,
                    color=strategy_color(row["strategy"]),
                    label=label,
                    drawstyle="steps-post",
                )
    for ax, name in zip(axes, ("allocated", "reserved")):
        ax.set_title(f"{name} memory", fontsize=10)
        ax.set_xlabel("time since the first recorded step (s)")
        ax.grid(alpha=0.3)
        if not ax.lines:
            ax.text(0.5, 0.5, f"{name} memory not recorded", ha="center", transform=ax.transAxes, color="grey")
    axes[0].set_ylabel("memory per device, largest rank (GiB)")
    axes[0].set_ylim(bottom=0)
    first = rows.loc[case_ids[0]]
    fig.suptitle(
        f"Memory over time — {first['model']}, batch {first['batch_size']}, grad accum {first['grad_accum']}",
        fontsize=11,
    )
    fig.tight_layout()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=min(3, len(labels)),
        fontsize=8,
        frameon=False,
    )
    save_figure(fig, path)
