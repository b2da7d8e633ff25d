"""Turn a run folder into `comparison.csv` and charts. `visualize.py` and the pytest plugin both
call `write_report`, so the session's outputs and a regenerated report are the same files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdp_bench.case import STRATEGIES
from fsdp_bench.results import flatten_result, load_run, sort_rows

# One colour per strategy, the same in every chart.
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939")
STRATEGY_COLORS = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(STRATEGIES)}


def build_table(results: list[dict[str, Any]]):
    import pandas as pd

    from fsdp_bench.metrics import loss_max_abs_dev_vs_ddp, mean_across_ranks

    rows = sort_rows(flatten_result(r) for r in results)
    curves = {r["case_id"]: mean_across_ranks(x["losses"] for x in r.get("ranks") or [])
              for r in results if r.get("ranks") and all(x.get("losses") for x in r["ranks"])}
    deviation = loss_max_abs_dev_vs_ddp(rows, curves)
    for row in rows:
        row["loss_max_abs_dev_vs_ddp"] = deviation.get(row["case_id"])
    return pd.DataFrame(rows)


def _series_label(row: Any, timings: int) -> str:
    return row["strategy"] if timings <= 1 else f"{row['strategy']} ({row['optimizer_timing']})"


def plot_vs_batch_size(df, metric: str, ylabel: str, title: str, path: Path) -> bool:
    """One panel per grad-accum, one line per strategy; non-ok cases drawn as an x at the bottom."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if metric not in df.columns or df[metric].notna().sum() == 0:
        return False
    accums = sorted(df["grad_accum"].unique())
    fig, axes = plt.subplots(1, len(accums), figsize=(5.5 * len(accums), 4.2), squeeze=False, sharey=True)
    timings = df["optimizer_timing"].nunique()
    for ax, ga in zip(axes[0], accums):
        part = df[df["grad_accum"] == ga]
        for (strategy, timing), group in part.groupby(["strategy", "optimizer_timing"], sort=False):
            color = STRATEGY_COLORS.get(strategy, "black")
            label = _series_label(group.iloc[0], timings)
            ok = group[group["status"] == "ok"].sort_values("batch_size")
            style = "-" if timing == "after_shard" else ("--" if timing == "before_shard" else ":")
            if len(ok):
                ax.plot(ok["batch_size"], ok[metric], style, marker="o", color=color, label=label)
            bad = group[group["status"].isin(["oom", "failed", "timeout"])]
            for _, row in bad.iterrows():
                ax.annotate(row["status"].upper(), (row["batch_size"], 0), xycoords=("data", "axes fraction"),
                            xytext=(0, 4), textcoords="offset points", ha="center", color=color, fontsize=8)
                ax.plot([row["batch_size"]], [0], marker="x", color=color, transform=ax.get_xaxis_transform(),
                        clip_on=False)
        ax.set_title(f"grad accum {ga}")
        ax.set_xlabel("per-device batch size (samples)")
        ax.set_xticks(sorted(df["batch_size"].unique()))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        h, lab = ax.get_legend_handles_labels()
        handles += [x for x, y in zip(h, lab) if y not in labels]
        labels += [y for y in lab if y not in labels]
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    models = ", ".join(sorted(df["model"].unique()))
    fig.suptitle(f"{title} — {models}")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


CHARTS = (
    ("tokens_per_s_per_device", "tokens/s per device", "Throughput vs batch size", "throughput_vs_batch_size.png"),
    ("peak_allocated_gib", "peak allocated memory (GiB)", "Peak memory vs batch size", "peak_memory_vs_batch_size.png"),
)


def write_report(run_dir: Path, out_dir: Path | None = None) -> tuple[list[Path], list[str]]:
    """Write the table and charts for a run; returns the files written and one note per problem."""
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    results, notes = load_run(run_dir)
    if not results:
        notes.append(f"{run_dir}: no case results to report")
        return [], notes
    df = build_table(results)
    written = []
    csv_path = out_dir / "comparison.csv"
    df.to_csv(csv_path, index=False)
    written.append(csv_path)
    for metric, ylabel, title, name in CHARTS:
        path = out_dir / name
        if plot_vs_batch_size(df, metric, ylabel, title, path):
            written.append(path)
        else:
            notes.append(f"{name} skipped: no case measured {metric}")
    return written, notes
