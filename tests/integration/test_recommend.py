"""Issue #16, recommendation: per model and memory budget, the fastest trained configuration that
fits and the runner-up, in report.md and a Pareto chart (golden base run)."""

from __future__ import annotations

from fsdp_bench.report.recommend import format_gib, recommend, recommendation_lines
from fsdp_bench.report.table import build_table
from fsdp_bench.results.load import load_run
from fsdp_bench.results.stats import pareto_front
from tests.integration.test_visualize import GOLDEN, copy_run, visualize


def golden_table():
    results, _ = load_run(GOLDEN / "base")
    return build_table(results)


def test_pareto_front():
    points = [(1.0, 10.0), (2.0, 5.0), (2.0, 20.0), (3.0, 15.0), (4.0, 30.0)]
    assert pareto_front(points) == [0, 2, 4]


def test_fastest_that_fits_then_runner_up_and_budget():
    df = golden_table()
    free = recommend(df)[0]
    speeds = [p["tokens_per_s_per_device"] for p in free.picks]
    trained = df[df["trained"] == True]  # noqa: E712
    measured = trained[trained[free.memory].notna()]
    # issue 25: without a budget, cases with no measured memory (FSDP1 on CPU) still compete
    assert speeds[0] == trained["tokens_per_s_per_device"].max() and speeds[0] > speeds[1]
    assert free.unmeasured == len(trained) - len(measured) and free.over_budget == 0
    budget = (free.picks[0][free.memory] + measured[free.memory].min()) / 2  # the fastest no longer fits
    tight = recommend(df, budget)[0]
    assert tight.over_budget >= 1 and all(p[free.memory] <= budget for p in tight.picks)
    assert tight.picks[0]["case_id"] != free.picks[0]["case_id"]
    assert all(p["trained"] for p in tight.picks)  # the fast non-training fsdp2 opt_before never shows
    assert "no trained configuration fits" in recommendation_lines(df, 1e-9)[0]


def test_report_and_chart_show_the_recommendation(tmp_path):
    run = copy_run("base", tmp_path)
    proc = visualize(run, "--budget-gib", "0.003")
    assert proc.returncode == 0, proc.stderr
    text = (run / "report.md").read_text()
    assert "Recommendation (gpt_tiny, budget 0.003 GiB/device):" in text
    assert "runner-up" in text or "tied within noise" in text
    assert (run / "pareto_throughput_vs_memory.png").read_bytes()[:4] == b"\x89PNG"
    assert format_gib(0.002) == "2.0 MiB" and format_gib(1.5) == "1.50 GiB"


def test_peak_memory_chart_uses_mib_for_tiny_values_and_names_missing_series(monkeypatch, tmp_path):
    from fsdp_bench.report.charts import scaling
    from fsdp_bench.report.charts.style import RunData

    figures = []
    monkeypatch.setattr(scaling, "save_figure", lambda fig, path: figures.append(fig))
    scaling.chart_peak_memory(RunData(df=golden_table()), tmp_path / "m.png")
    axes = [ax for ax in figures[0].axes if ax.get_visible() and ax.get_title()]
    labels = {ax.get_title(): ax.get_ylabel() for ax in axes}
    assert any("allocated" in t and "(MiB)" in y for t, y in labels.items()), labels
    assert any("RSS" in t and "(GiB)" in y for t, y in labels.items()), labels  # 0.3 GiB stays GiB
    notes = [t.get_text() for ax in axes for t in ax.texts]
    assert "not measured: fsdp1_full_shard" in notes  # FSDP1 on CPU records no allocator peak


def test_bad_budget_is_a_one_line_error(tmp_path):
    proc = visualize(copy_run("base", tmp_path), "--budget-gib", "-1")
    assert proc.returncode == 2 and "--budget-gib: -1 is not a positive number of GiB" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_runner_up_within_the_noise_is_said_to_be():
    import pandas as pd

    def row(case, tps, median, low, high):
        return {
            "case_id": case,
            "model": "m",
            "strategy": case,
            "batch_size": 2,
            "grad_accum": 1,
            "optimizer_timing": "after_shard",
            "status": "ok",
            "trained": True,
            "params_changed": True,
            "tokens_per_s_per_device": tps,
            "step_time_s_median": median,
            "peak_allocated_gib": 0.5,
            "step_time_s_median_ci_low": low,
            "step_time_s_median_ci_high": high,
        }

    # 100 vs 92 tokens/s: the intervals [91, 111] and [88, 96] overlap
    noisy = pd.DataFrame([row("a", 100.0, 1.0, 0.9, 1.1), row("b", 92.0, 1.0, 0.96, 1.05)])
    (line,) = recommendation_lines(noisy)
    # issue 25: no winner by chance: both are named, tied, with what would separate them
    assert "no single winner, 2 configurations tied within noise" in line and "--bench-repeats" in line
    assert "a batch 2" in line and "b batch 2" in line and "95% intervals, a single run's widened +-10%" in line
    # tight intervals of single runs: 8 % is within what a fresh process changes (run_noise), tied
    tight = pd.DataFrame([row("a", 100.0, 1.0, 0.99, 1.01), row("b", 92.0, 1.0, 0.99, 1.01)])
    (line,) = recommendation_lines(tight)
    assert "no single winner, 2 configurations tied" in line
    # the same 8 % measured over repeats (their spread in the interval): one winner, beyond noise
    repeated = tight.assign(repeats=3)
    (line,) = recommendation_lines(repeated)
    assert "8% slower, beyond noise" in line and "tied" not in line
    assert line.startswith("Recommendation (m, no memory budget): a batch 2")
    # unless the repeats' own medians are 20 % apart: pooled steps hide that, the band does not
    (line,) = recommendation_lines(repeated.assign(repeat_spread_pct=[20.0, 1.0]))
    assert "no single winner, 2 configurations tied" in line
    assert "a case with repeats' spanning its repeats' medians" in line
    (line,) = recommendation_lines(repeated.assign(repeat_spread_pct=[2.0, 1.0]))
    assert "8% slower, beyond noise" in line
    # single runs 30 % apart with tight intervals: beyond even the widened bands
    apart = pd.DataFrame([row("a", 100.0, 1.0, 0.99, 1.01), row("b", 70.0, 1.0, 0.99, 1.01)])
    (line,) = recommendation_lines(apart)
    assert "30% slower, beyond noise" in line and "tied" not in line
