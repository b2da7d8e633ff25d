"""Issue #25, the rest: throughput and step-time charts carry the step-time median's confidence
interval as error bars; each peak measure has its own label on the live line; every ranking,
chart and "best" line names the cases it leaves out and why (golden base run)."""

from __future__ import annotations

import pandas as pd

from fsdp_bench.analysis.run_noise import speed_interval
from fsdp_bench.launch.progress import progress_line
from fsdp_bench.report.recommend import recommend, recommendation_lines
from fsdp_bench.report.summary import best_mfu, fastest_per_batch
from fsdp_bench.report.table import left_out
from tests.integration.test_recommend import golden_table


def _drawn(monkeypatch, module, draw, df):
    from fsdp_bench.report.charts.style import RunData

    figures = []
    monkeypatch.setattr(module, "save_figure", lambda fig, path: figures.append(fig))
    draw(RunData(df=df), "unused.png")
    return figures[0]


def _bars(ax) -> list[tuple[float, float, float]]:
    """(x, bar bottom, bar top) of every error bar drawn on the axes."""
    from matplotlib.container import ErrorbarContainer

    out = []
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer) and container.lines[2]:
            out += [(seg[0][0], seg[0][1], seg[1][1]) for seg in container.lines[2][0].get_segments()]
    return out


def test_throughput_bars_are_the_step_time_interval(monkeypatch):
    from fsdp_bench.report.charts import scaling

    df = golden_table()
    fig = _drawn(monkeypatch, scaling, scaling.chart_throughput, df)
    ax = next(a for a in fig.axes if a.get_title() == "grad accum 1")
    bars = _bars(ax)
    rows = df[(df["grad_accum"] == 1) & (df["status"] == "ok") & df["tokens_per_s_per_device"].notna()]
    expected = [speed_interval(r) for r in rows.to_dict("records") if speed_interval(r)]
    assert expected and len(bars) >= len(expected)
    for low, high in expected:  # every interval is drawn: tokens per step / the step-time bounds
        assert any(abs(b - low) < 1e-6 * high and abs(t - high) < 1e-6 * high for _x, b, t in bars), (low, high)
    # the golden run measured 3 steps: its intervals are min..max at 75%, and the chart says so
    assert "median's 75-95% confidence interval" in fig._suptitle.get_text()
    assert "fastest two within noise at batch 2" in [t.get_text() for t in ax.texts]


def test_step_breakdown_bar_is_the_median_interval(monkeypatch):
    from fsdp_bench.report.charts import time as time_charts

    row = {
        "case_id": "a",
        "model": "m",
        "strategy": "ddp",
        "batch_size": 2,
        "grad_accum": 1,
        "status": "ok",
        "optimizer_timing": "after_shard",
        "compute_s_per_step": 0.6,
        "optimizer_s_per_step": 0.2,
        "step_time_s_median": 1.0,
        "step_time_s_median_ci_low": 0.9,
        "step_time_s_median_ci_high": 1.2,
    }
    fig = _drawn(monkeypatch, time_charts, time_charts.chart_step_breakdown, pd.DataFrame([row]))
    (bar,) = _bars(fig.axes[0])
    assert bar[1:] == (0.9, 1.2)


def test_each_peak_measure_has_its_own_label():
    # issue 39: one unit down the live lines (MiB on CPU); RSS named as what stands in for alloc
    line = progress_line(1, 2, "fsdp1", {"status": "ok", "metrics": {"peak_rss_gib": 0.35}}, 1.0)
    assert "peak alloc n/a, RSS 358 MiB" in line
    cuda = {"status": "ok", "case": {"device": "cuda"}, "metrics": {"peak_reserved_gib": 0.012}}
    assert "peak reserved 0.01 GiB" in progress_line(1, 2, "ddp", cuda, 1.0)
    line = progress_line(
        1, 2, "fsdp2", {"status": "ok", "metrics": {"peak_allocated_gib": 0.012, "peak_rss_gib": 0.35}}, 1.0
    )
    assert "peak alloc 12.3 MiB" in line and "RSS" not in line


def test_every_omission_says_why():
    df = golden_table()
    why = left_out(df, "tokens_per_s_per_device")
    assert "2 did not train (fsdp2-gpt_tiny-ws2-bs1-ga1-opt_before-sl32, " in why
    assert "2 oom (" in why and "1 timeout (fsdp1_full_shard-gpt_tiny-ws2-bs2-ga2-opt_after-sl32)" in why
    (rec,) = recommendation_lines(df)
    assert rec.endswith(why + ".") and " at 75%)" in rec and " at 95%)" not in rec
    (fastest,) = fastest_per_batch(df)
    assert "left out: 1 oom (ddp-gpt_tiny-ws2-bs2-ga1-opt_after-sl32)" in fastest
    assert left_out(df[df["status"] == "ok"].assign(trained=True)) == ""
    # Highest MFU never names a case that did not train, even when it has the highest number
    mfu = df.assign(mfu_pct=[50.0 if "opt_before-" in c else 1.0 for c in df["case_id"]])
    (line,) = best_mfu(mfu)
    assert "opt_before-" not in line.split(";")[0] and "did not train" in line


def test_pareto_chart_names_cases_it_leaves_out(monkeypatch):
    from fsdp_bench.report.charts import pareto

    fig = _drawn(monkeypatch, pareto, pareto.chart_pareto, golden_table())
    notes = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "not shown, left out: 2 did not train" in notes and "2 oom" in notes


def test_pareto_chart_rings_every_tied_configuration(monkeypatch):
    """Issue #39: one ring beside a recommendation saying "tied" picked a winner by chance."""
    from fsdp_bench.report.charts import pareto

    df = golden_table()
    (rec,) = recommend(df)
    fig = _drawn(monkeypatch, pareto, pareto.chart_pareto, df)
    rings = [c for c in fig.axes[0].collections if c.get_label().startswith(("recommended", "tied within noise"))]
    (ring,) = rings
    drawn = [t for t in rec.tied if t[rec.memory] == t[rec.memory]]  # FSDP1 on CPU has no allocated peak
    assert len(rec.tied) == 5 and len(drawn) == 4 == len(ring.get_offsets())
    assert ring.get_label() == "tied within noise (5, 4 with a measured peak drawn): no single winner"
