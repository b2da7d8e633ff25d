"""Issue #16, noise: compare calls a change a regression only past the threshold AND beyond the
noise (the step-time medians' confidence intervals do not overlap), one line per case. Run
folders are copies of the golden base run with their step times edited."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from fsdp_bench.analysis.aggregate import aggregate_rank_metrics
from fsdp_bench.results.stats import median_ci, summarize_step_times
from tests.integration.test_visualize import copy_run, visualize


def scale_step_times(run, factor) -> None:
    """Multiply every rank's step times by factor(case_id, step) and recompute the metrics."""
    for path in (run / "cases").glob("*.json"):
        data = json.loads(path.read_text())
        if data["status"] != "ok":
            continue
        for rank in data["ranks"]:
            rank["step_times_s"] = [t * factor(i) for i, t in enumerate(rank["step_times_s"])]
        metrics = data["metrics"]
        tokens = metrics["tokens_per_s"] * metrics["step_time_s_median"]
        samples = metrics["samples_per_s"] * metrics["step_time_s_median"]
        fresh = aggregate_rank_metrics(
            tokens_per_step=round(tokens),
            samples_per_step=round(samples),
            world_size=len(data["ranks"]),
            ranks=data["ranks"],
        )
        metrics.update({k: v for k, v in fresh.items() if k.startswith(("step_time", "tokens_per", "samples_per"))})
        path.write_text(json.dumps(data))


def compare(tmp_path, base, new):
    proc = visualize("--compare", base, new, "--threshold", "5", "--out", tmp_path / "cmp")
    rows = {r["case_id"]: r for r in csv.DictReader((tmp_path / "cmp" / "compare.csv").open())}
    return proc, rows


def test_median_ci_order_statistics():
    assert median_ci(list(range(10)))[:2] == (1, 8)  # X(2), X(9): 97.9%, the textbook pair for n=10
    low, high, level = median_ci(list(range(100)))
    assert (low, high) == (39, 60) and level == pytest.approx(0.965, abs=1e-3)
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0, 0.75)  # too few values for 95%: min..max
    stats = summarize_step_times([0.1, 0.11, 0.09, 0.1, 0.12, 0.1, 0.1, 0.1])
    assert stats["step_time_s_median_ci_low"] <= stats["step_time_s_median"] <= stats["step_time_s_median_ci_high"]


def add_repeats(run, factors) -> None:
    """Give every ok case repeat medians: its median times each factor (what --bench-repeats records)."""
    for path in (run / "cases").glob("*.json"):
        data = json.loads(path.read_text())
        if data["status"] == "ok":
            median = data["metrics"]["step_time_s_median"]
            data["metrics"]["repeat_step_time_s_medians"] = [median * f for f in factors]
            data["metrics"]["repeats"] = len(factors)
            path.write_text(json.dumps(data))


def test_without_repeats_noise_is_unknown_and_no_timing_regression_is_claimed(tmp_path):
    base = copy_run("base", tmp_path / "a")
    new = copy_run("base", tmp_path / "b")
    scale_step_times(new, lambda i: 1.5)  # far outside every within-run interval
    proc, rows = compare(tmp_path, base, new)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REGRESSION" not in proc.stdout and "Run-to-run noise unknown" in proc.stdout
    assert {r["verdict"] for r in rows.values() if r["status_new"] == "ok"} == {"inconclusive"}
    assert "Run-to-run noise unknown" in (tmp_path / "cmp" / "compare.md").read_text()


def test_run_against_itself_with_repeats_is_not_a_regression(tmp_path):
    base = copy_run("base", tmp_path / "a")
    add_repeats(base, [0.97, 1.0, 1.04])
    same = tmp_path / "b" / base.name  # the same files in a second folder: visualize refuses one run twice
    shutil.copytree(base, same)
    proc, rows = compare(tmp_path, base, same)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {r["verdict"] for r in rows.values()} <= {"ok", "within noise"}


def test_change_within_run_to_run_noise_is_not_a_regression(tmp_path):
    base = copy_run("base", tmp_path / "a")
    new = copy_run("base", tmp_path / "b")
    add_repeats(base, [0.85, 1.0, 1.2])  # repeats 35% apart: a busy machine
    scale_step_times(new, lambda i: 1.12)  # 12% slower: past the 5% threshold, inside that noise
    add_repeats(new, [0.9, 1.0, 1.15])
    proc, rows = compare(tmp_path, base, new)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REGRESSION" not in proc.stdout
    assert any(r["verdict"] == "within noise" for r in rows.values())
    ok = [r for r in rows.values() if r["step_time_change_ci_low_pct"]]
    assert ok and all(
        float(r["step_time_change_ci_low_pct"]) < 0 < float(r["step_time_change_ci_high_pct"]) for r in ok
    )


def test_every_step_fifty_percent_slower_is_a_regression_once_per_case(tmp_path):
    base = copy_run("base", tmp_path / "a")
    new = copy_run("base", tmp_path / "b")
    add_repeats(base, [0.98, 1.0, 1.03])
    scale_step_times(new, lambda i: 1.5)
    add_repeats(new, [0.99, 1.0, 1.02])
    proc, rows = compare(tmp_path, base, new)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REGRESSION ")]
    ids = [line.split()[1].rstrip(":") for line in lines]
    assert ids and len(ids) == len(set(ids))  # one line per case, not per correlated metric
    assert all("tokens_per_s_per_device" in line and "step_time_s_median" in line for line in lines)
    assert {r["verdict"] for r in rows.values() if r["case_id"] in ids} == {"regression"}


def test_detectable_change_in_terminal_markdown_and_csv(tmp_path):
    base = copy_run("base", tmp_path / "a")
    new = copy_run("base", tmp_path / "b")
    add_repeats(base, [0.85, 1.0, 1.2])  # a busy machine: about 17% per repeat
    add_repeats(new, [0.9, 1.0, 1.15])
    proc, rows = compare(tmp_path, base, new)
    timed = [r for r in rows.values() if r["step_time_change_ci_low_pct"]]
    assert timed and all(float(r["step_time_detectable_change_pct"]) > 5 for r in timed)
    assert all(r["repeats_base"] == r["repeats_new"] == "3" for r in timed)
    shown = f"+{float(timed[0]['step_time_detectable_change_pct']):.0f}%"
    out = proc.stdout
    assert "cannot be told from noise" in out and shown in out
    assert f"within noise (smallest detectable step-time change {shown}" in out
    assert "use " in out and " repeats a side to detect +5% (the threshold)" in out
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "detectable step-time change %" in md and shown in md


def test_single_run_comparison_says_how_many_repeats_it_needs(tmp_path):
    base, same = copy_run("base", tmp_path / "a"), copy_run("base", tmp_path / "b")
    proc, rows = compare(tmp_path, base, same)
    assert proc.returncode == 0
    assert "At an assumed 10% per repeat" in proc.stdout and " repeats a side to detect +5%" in proc.stdout
    assert {r["step_time_detectable_change_pct"] for r in rows.values()} == {""}


def test_the_chart_claims_no_interval_without_repeats(tmp_path, monkeypatch):
    """Issue #39: compare.png's label said "95% run-to-run interval" over bars that were not there."""
    from fsdp_bench.report import compare as module
    from fsdp_bench.report.charts import style

    base = copy_run("base", tmp_path / "a")
    comparison, _ = module.compare_runs(base, base, threshold_pct=5)
    assert comparison.noise is None
    figures = []
    monkeypatch.setattr(style, "save_figure", lambda fig, path: figures.append(fig))
    assert module._plot_changes(comparison, tmp_path / "c.png", 5.0)
    label = figures[0].axes[0].get_xlabel()
    assert "run-to-run noise unknown" in label and "95%" not in label, label
