"""Run-to-run comparison: `python visualize.py --compare BASE NEW [--threshold PCT]`.

Every case present in both runs, its headline metrics side by side with the relative change,
the cases only one run has, and a warning when the runs came from different machines or
library versions. A change is a regression when it moves a metric the wrong way by more than
the threshold (like `pytest-benchmark compare --fail`). No torch import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdp_bench.report.writer import load_report_inputs
from fsdp_bench.results.io import write_text_atomic
from fsdp_bench.report.table import build_table
from fsdp_bench.results.metrics import M

# Metric -> True when higher is better. These are the numbers a regression is judged on.
COMPARED = {
    M.tokens_per_s_per_device: True,
    M.step_time_s_median: False,
    M.peak_allocated_gib: False,
    M.mfu_pct: True,
}
# Environment fields that make two runs' numbers not directly comparable when they differ.
ENV_KEYS = ("host", "gpu_names", "gpu_count", "driver", "torch", "cuda", "nccl", "python", "cpu_count")


@dataclass
class Comparison:
    rows: list[dict[str, Any]]
    only_base: list[str]
    only_new: list[str]
    env_differences: list[str]
    regressions: list[str] = field(default_factory=list)


def relative_change_pct(base: float | None, new: float | None) -> float | None:
    if base is None or new is None or base != base or new != new or base == 0:
        return None
    return 100.0 * (new - base) / abs(base)


def is_regression(metric: str, change_pct: float | None, threshold_pct: float) -> bool:
    if change_pct is None:
        return False
    worse = -change_pct if COMPARED[metric] else change_pct
    return worse > threshold_pct


def env_differences(base: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    if base is None or new is None:
        return ["the environment of one run is unknown (env.json missing or unreadable)"]
    return [f"{key}: {base.get(key)!r} -> {new.get(key)!r}" for key in ENV_KEYS if base.get(key) != new.get(key)]


TIMED = frozenset({M.tokens_per_s_per_device, M.step_time_s_median, M.mfu_pct})  # all from step times
CI = (M.step_time_s_median_ci_low, M.step_time_s_median_ci_high)


def _ci(row: dict[str, Any]) -> tuple[float, float] | None:
    low, high = (_number(row.get(k)) for k in CI)
    return None if low is None or high is None else (low, high)


def judge_case(b: dict[str, Any], n: dict[str, Any], threshold_pct: float) -> tuple[dict[str, Any], str | None]:
    """One case's row and, when it regressed, its one regression line. A timing change counts
    only when it passes the threshold AND the two medians' confidence intervals do not overlap;
    otherwise it is "within noise". Memory is judged on the threshold alone."""
    from fsdp_bench.analysis.stats import NOISY_CV_PCT, intervals_overlap

    row: dict[str, Any] = {"case_id": b["case_id"], "status_base": b.get("status"), "status_new": n.get("status")}
    base_ci, new_ci = _ci(b), _ci(n)
    noise = base_ci is not None and new_ci is not None and intervals_overlap(base_ci, new_ci)
    worse, masked = [], False
    for metric in COMPARED:
        old, cur = _number(b.get(metric)), _number(n.get(metric))
        change = relative_change_pct(old, cur)
        row[f"{metric}_base"], row[f"{metric}_new"], row[f"{metric}_change_pct"] = old, cur, change
        if is_regression(metric, change, threshold_pct):
            if metric in TIMED and noise:
                masked = True
            else:
                worse.append(f"{metric} {old:.4g} -> {cur:.4g} ({change:+.1f}%)")
    cvs = [_number(x.get(M.step_time_cv_pct)) for x in (b, n)]
    row["noisy"] = any(cv is not None and cv > NOISY_CV_PCT for cv in cvs)
    line = None
    if b.get("status") == "ok" and n.get("status") not in ("ok", None):
        line = f"{b['case_id']}: was ok, now {n.get('status')}: {n.get('reason', '')}"
    elif worse:
        line = f"{b['case_id']}: " + "; ".join(worse)  # one line per case, not per correlated metric
    row["verdict"] = "regression" if line else "within noise" if masked else "ok"
    row["regression"] = line is not None
    return row, line


def compare_tables(base_df, new_df, *, threshold_pct: float) -> tuple[list[dict[str, Any]], list[str], list[str], list[str]]:
    """Rows for the cases in both runs, the ids only in each, and the regressions found (pure)."""
    base = {r["case_id"]: r for r in base_df.to_dict("records")} if not base_df.empty else {}
    new = {r["case_id"]: r for r in new_df.to_dict("records")} if not new_df.empty else {}
    rows, regressions = [], []
    for case_id in sorted(base.keys() & new.keys()):
        row, line = judge_case(base[case_id], new[case_id], threshold_pct)
        rows.append(row)
        if line:
            regressions.append(line)
    return rows, sorted(base.keys() - new.keys()), sorted(new.keys() - base.keys()), regressions


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def compare_runs(base_dir: Path, new_dir: Path, *, threshold_pct: float) -> tuple[Comparison, list[str]]:
    """Load both runs and compare them; also returns one line per unreadable file."""
    base_results, base_env, base_problems = load_report_inputs(base_dir)
    new_results, new_env, new_problems = load_report_inputs(new_dir)
    rows, only_base, only_new, regressions = compare_tables(
        build_table(base_results), build_table(new_results), threshold_pct=threshold_pct)
    comparison = Comparison(rows, only_base, only_new, env_differences(base_env, new_env), regressions)
    return comparison, base_problems + new_problems


def write_comparison(comparison: Comparison, out_dir: Path, *, base: Path, new: Path,
                     threshold_pct: float) -> list[Path]:
    """compare.csv, compare.md and compare.png (throughput change per case) in `out_dir`."""
    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    csv_path = out_dir / "compare.csv"
    write_text_atomic(csv_path, pd.DataFrame(comparison.rows).to_csv(index=False))
    written.append(csv_path)
    md_path = out_dir / "compare.md"
    write_text_atomic(md_path, render_comparison(comparison, base=base, new=new, threshold_pct=threshold_pct))
    written.append(md_path)
    png = out_dir / "compare.png"
    if _plot_changes(comparison, png, threshold_pct):
        written.append(png)
    return written


def render_comparison(comparison: Comparison, *, base: Path, new: Path, threshold_pct: float) -> str:
    lines = [f"# Comparison: {base.name} -> {new.name}", "",
             f"Regression threshold: {threshold_pct:g}% in the wrong direction "
             f"({', '.join(COMPARED)}), and for timings beyond the noise too: the 95% confidence "
             f"intervals of the two step-time medians must not overlap, else the change is 'within noise'. "
             f"Noisy: step-time CV above the documented bound in either run.", ""]
    if comparison.env_differences:
        lines += ["**Warning: the runs differ in machine or library versions; changes may not be the code's.**", ""]
        lines += [f"- {d}" for d in comparison.env_differences] + [""]
    header = ["case"] + [f"{m} change %" for m in COMPARED] + ["verdict", "noisy"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in comparison.rows:
        cells = [row["case_id"]] + [_pct(row[f"{m}_change_pct"]) for m in COMPARED]
        cells.append("**regression**" if row["regression"] else row["verdict"])
        cells.append("noisy" if row["noisy"] else "")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for title, ids in (("Only in the base run", comparison.only_base), ("Only in the new run", comparison.only_new)):
        if ids:
            lines += [f"## {title}", ""] + [f"- {i}" for i in ids] + [""]
    if comparison.regressions:
        lines += ["## Regressions", ""] + [f"- {r}" for r in comparison.regressions] + [""]
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}"


def _plot_changes(comparison: Comparison, path: Path, threshold_pct: float) -> bool:
    from fsdp_bench.report.charts.style import pyplot, save_figure

    points = [(r["case_id"], r["tokens_per_s_per_device_change_pct"]) for r in comparison.rows
              if r["tokens_per_s_per_device_change_pct"] is not None]
    if not points:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(points) + 1.6))
    labels, values = zip(*points)
    colors = ["#c0392b" if v < -threshold_pct else "#2e86c1" for v in values]
    ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)), labels, fontsize=7)
    ax.axvline(-threshold_pct, color="#c0392b", linestyle="--", linewidth=1, label=f"-{threshold_pct:g}% threshold")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("tokens/s per device, change from base (%)")
    ax.set_title("Throughput change per case (red: regression)")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=8)
    save_figure(fig, path)
    return True
