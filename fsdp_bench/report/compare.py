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

from fsdp_bench.report.compare_noise import noise_sentence
from fsdp_bench.report.table import build_table
from fsdp_bench.report.writer import load_report_inputs
from fsdp_bench.results.io import write_text_atomic
from fsdp_bench.results.metrics import BY_NAME, HIGHER, M
from fsdp_bench.results.records import CaseResult, Environment, TableRow
from fsdp_bench.results.stats import CONFIDENCE_PCT

# The numbers a regression is judged on; which way is worse is the registry's `better`.
COMPARED = (M.tokens_per_s_per_device, M.step_time_s_median, M.peak_allocated_gib, M.mfu_pct)
# Environment fields that make two runs' numbers not directly comparable when they differ.
ENV_KEYS = (
    "host",
    "gpu_names",
    "gpu_count",
    "driver",
    "torch",
    "cuda",
    "nccl",
    "python",
    "cpu_count",
    "planted_faults",
)


@dataclass
class Comparison:
    rows: list[TableRow]
    only_base: list[str]
    only_new: list[str]
    env_differences: list[str]
    regressions: list[str] = field(default_factory=list)
    noise: Any = None  # analysis.run_noise.RunNoise, or None: no repeats, run-to-run noise unknown
    threshold_pct: float = 5.0  # what a regression must also pass; the repeats advice aims at it


def relative_change_pct(base: float | None, new: float | None) -> float | None:
    if base is None or new is None or base != base or new != new or base == 0:
        return None
    return 100.0 * (new - base) / abs(base)


def is_regression(metric: str, change_pct: float | None, threshold_pct: float) -> bool:
    if change_pct is None:
        return False
    worse = -change_pct if BY_NAME[metric].better == HIGHER else change_pct
    return worse > threshold_pct


def env_differences(base: Environment | None, new: Environment | None) -> list[str]:
    if base is None or new is None:
        return ["the environment of one run is unknown (env.json missing or unreadable)"]
    return [f"{key}: {base.get(key)!r} -> {new.get(key)!r}" for key in ENV_KEYS if base.get(key) != new.get(key)]


TIMED = frozenset({M.tokens_per_s_per_device, M.step_time_s_median, M.mfu_pct})  # all from step times
MEMORY = tuple(m for m in COMPARED if m not in TIMED)
# One colour per verdict, in compare.png and nowhere else: the text verdict decides the colour.
VERDICT_COLORS = {
    "regression": "#c0392b",
    "failed": "#c0392b",
    "faster": "#27ae60",
    "within noise": "#95a5a6",
    "inconclusive": "#f0b27a",
    "ok": "#2e86c1",
}


def repeat_medians(result: CaseResult) -> list[float]:
    """A case's step-time median per repeat (one value without --bench-repeats)."""
    metrics = result.get("metrics") or {}
    medians = metrics.get(M.repeat_step_time_s_medians) or [metrics.get(M.step_time_s_median)]
    return [m for m in medians if isinstance(m, (int, float))]


def _timing_verdict(change, threshold_pct: float) -> str:
    if change is None:
        return "ok"
    if change.low_pct is None:
        return "inconclusive"
    if not change.significant:
        return "within noise"
    if abs(change.change_pct) <= threshold_pct:
        return "ok"
    return "regression" if change.change_pct > 0 else "faster"


def judge_case(b: CaseResult, n: CaseResult, threshold_pct: float, change=None) -> tuple[TableRow, str | None]:
    """One case's row and, when it regressed, its one regression line. `change`: the step-time
    change with its run-to-run interval (analysis.run_noise); a timing regression needs that
    interval to exclude zero AND the change to pass the threshold. Memory is judged on the
    threshold alone (it does not vary from run to run)."""
    from fsdp_bench.results.stats import NOISY_CV_PCT

    row: TableRow = {"case_id": b["case_id"], "status_base": b.get("status"), "status_new": n.get("status")}
    for metric in COMPARED:
        old, cur = _number(b.get(metric)), _number(n.get(metric))
        row[f"{metric}_base"], row[f"{metric}_new"] = old, cur
        row[f"{metric}_change_pct"] = relative_change_pct(old, cur)
    row["step_time_change_ci_low_pct"] = change.low_pct if change else None
    row["step_time_change_ci_high_pct"] = change.high_pct if change else None
    row["step_time_detectable_change_pct"] = change.detectable_pct if change else None
    verdict = _timing_verdict(change, threshold_pct)
    worse = []
    if verdict == "regression":
        worse += [
            f"step_time_s_median {row[f'{M.step_time_s_median}_base']:.4g} -> "
            f"{row[f'{M.step_time_s_median}_new']:.4g} s ({change.change_pct:+.1f}%, "
            f"{CONFIDENCE_PCT}% interval {change.low_pct:+.1f}%..{change.high_pct:+.1f}%, beyond run-to-run noise); "
            f"tokens_per_s_per_device {_pct(row[f'{M.tokens_per_s_per_device}_change_pct'])}%"
        ]
    for metric in MEMORY:
        if is_regression(metric, row[f"{metric}_change_pct"], threshold_pct):
            worse.append(
                f"{metric} {row[f'{metric}_base']:.4g} -> {row[f'{metric}_new']:.4g} "
                f"({row[f'{metric}_change_pct']:+.1f}%)"
            )
            verdict = "regression"
    cvs = [_number(x.get(M.step_time_cv_pct)) for x in (b, n)]
    row["noisy"] = any(cv is not None and cv > NOISY_CV_PCT for cv in cvs)
    line = None
    if b.get("status") == "ok" and n.get("status") not in ("ok", None):
        line, verdict = f"{b['case_id']}: was ok, now {n.get('status')}: {n.get('reason', '')}", "failed"
    elif worse:
        line = f"{b['case_id']}: " + "; ".join(worse)  # one line per case, not per correlated metric
    row["verdict"] = verdict
    row["regression"] = line is not None
    return row, line


def compare_tables(base_df, new_df, *, threshold_pct: float, base_results=(), new_results=()):
    """Rows for the cases in both runs, the ids only in each, the regressions found and the
    run-to-run noise (None: unknown, no repeats) (pure)."""
    from fsdp_bench.analysis.run_noise import pooled_run_noise, timing_change

    base = {r["case_id"]: r for r in base_df.to_dict("records")} if not base_df.empty else {}
    new = {r["case_id"]: r for r in new_df.to_dict("records")} if not new_df.empty else {}
    medians = {}
    for results, side in ((base_results, 0), (new_results, 1)):
        for result in results:
            case_id = result.get("case_id")
            medians.setdefault(case_id, [[], []])[side] = repeat_medians(result)
    both = sorted(base.keys() & new.keys())
    timed = {
        c: tuple(medians.get(c, [[], []]))
        for c in both
        if base[c].get("status") == "ok" and new[c].get("status") == "ok"
    }
    noise = pooled_run_noise(timed)
    rows, regressions = [], []
    for case_id in both:
        change = timing_change(*timed[case_id], noise) if case_id in timed else None
        row, line = judge_case(base[case_id], new[case_id], threshold_pct, change)
        row["repeats_base"], row["repeats_new"] = (len(m) for m in medians.get(case_id, [[], []]))
        rows.append(row)
        if line:
            regressions.append(line)
    return rows, sorted(base.keys() - new.keys()), sorted(new.keys() - base.keys()), regressions, noise


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def compare_runs(base_dir: Path, new_dir: Path, *, threshold_pct: float) -> tuple[Comparison, list[str]]:
    """Load both runs and compare them; also returns one line per unreadable file."""
    base_results, base_env, base_problems = load_report_inputs(base_dir)
    new_results, new_env, new_problems = load_report_inputs(new_dir)
    rows, only_base, only_new, regressions, noise = compare_tables(
        build_table(base_results),
        build_table(new_results),
        threshold_pct=threshold_pct,
        base_results=base_results,
        new_results=new_results,
    )
    comparison = Comparison(
        rows, only_base, only_new, env_differences(base_env, new_env), regressions, noise, threshold_pct
    )
    return comparison, base_problems + new_problems


def write_comparison(
    comparison: Comparison, out_dir: Path, *, base: Path, new: Path, threshold_pct: float
) -> list[Path]:
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
    lines = [
        f"# Comparison: {base.name} -> {new.name}",
        "",
        f"A regression: a step-time change beyond the run-to-run noise AND beyond {threshold_pct:g}% "
        f"(tokens/s and MFU follow the step time), or peak memory up by more than {threshold_pct:g}%, "
        f"or a case that was ok and now is not. {noise_sentence(comparison)} "
        f"Noisy: step-time CV above the documented bound in either run.",
        "",
    ]
    if comparison.env_differences:
        lines += ["**Warning: the runs differ in machine or library versions; changes may not be the code's.**", ""]
        lines += [f"- {d}" for d in comparison.env_differences] + [""]
    header = (
        ["case"]
        + [f"{m} change %" for m in COMPARED]
        + [f"step time change {CONFIDENCE_PCT}% interval %", "detectable step-time change %", "verdict", "noisy"]
    )
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in comparison.rows:
        cells = [row["case_id"]] + [_pct(row[f"{m}_change_pct"]) for m in COMPARED]
        low, high = row["step_time_change_ci_low_pct"], row["step_time_change_ci_high_pct"]
        cells.append("unknown" if low is None else f"{_pct(low)}..{_pct(high)}")
        cells.append("unknown" if low is None else _pct(row["step_time_detectable_change_pct"]))
        cells.append(f"**{row['verdict']}**" if row["regression"] else row["verdict"])
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
    return "" if value is None or value != value else f"{value:+.1f}"


def _throughput_change(step_change_pct: float | None) -> float | None:
    """tokens/s change (%) for a step-time change (%): throughput is tokens per step / step time."""
    return None if step_change_pct is None else 100 * (100 / (100 + step_change_pct) - 1)


def _plot_changes(comparison: Comparison, path: Path, threshold_pct: float) -> bool:
    """Throughput change per case with its run-to-run interval, coloured by the case's verdict."""
    from fsdp_bench.report.charts.style import pyplot, save_figure

    rows = [r for r in comparison.rows if r[f"{M.tokens_per_s_per_device}_change_pct"] is not None]
    if not rows:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.6))
    values = [r[f"{M.tokens_per_s_per_device}_change_pct"] for r in rows]
    errors = [
        [0.0, 0.0]
        if r["step_time_change_ci_low_pct"] is None
        else [
            max(0.0, v - _throughput_change(r["step_time_change_ci_high_pct"])),  # a bar's own
            max(0.0, _throughput_change(r["step_time_change_ci_low_pct"]) - v),
        ]  # value may sit outside
        for r, v in zip(rows, values)
    ]
    ax.barh(
        range(len(values)),
        values,
        color=[VERDICT_COLORS[r["verdict"]] for r in rows],
        xerr=list(zip(*errors)),
        ecolor="black",
        capsize=2,
    )
    ax.set_yticks(range(len(values)), [r["case_id"] for r in rows], fontsize=7)
    ax.axvline(-threshold_pct, color="#c0392b", linestyle="--", linewidth=1, label=f"-{threshold_pct:g}% threshold")
    ax.axvline(0, color="black", linewidth=0.8)
    for verdict in dict.fromkeys(r["verdict"] for r in rows):
        ax.barh([0], [0], color=VERDICT_COLORS[verdict], label=verdict)
    # Without repeats there is no interval to draw: the label said "95% run-to-run interval" over
    # bars that were not there (issue #39).
    bars = (
        f"bars: {CONFIDENCE_PCT}% run-to-run interval"
        if comparison.noise is not None
        else "no interval: run-to-run noise unknown without --bench-repeats 2+"
    )
    ax.set_xlabel(f"tokens/s per device, change from base (%), {bars}")
    ax.set_title("Throughput change per case, coloured by the verdict")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=8)
    save_figure(fig, path)
    return True
