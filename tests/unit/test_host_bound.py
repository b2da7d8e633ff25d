"""Issue 32, item 3: host-bound cases named with their idle time per step, in the case's metrics,
the live line, the table (comparison.csv, per_rank.csv) and the recommendation.

The ranks are built from recorded timelines of both kinds (tests/unit/test_gpu_busy.py): the H100
GPT-2 bs4 step as profiled (host-bound), and the same kernels packed back to back (GPU-bound, a
constructed timeline, said so there).
"""

from __future__ import annotations

import json

import pytest

from fsdp_bench.analysis.aggregate import aggregate_rank_metrics, busy_metrics
from fsdp_bench.analysis.busy import HOST_BOUND_BUSY_PCT, NO_DEVICE_TIMELINE, busy_record
from fsdp_bench.worker.profiling import busy_from_events, load_trace_events
from tests.unit.test_gpu_busy import TRACE, _meta, _packed_events


def _rank(busy: dict, step_times_s: list[float], rank: int = 0) -> dict:
    return {
        "rank": rank,
        "status": "ok",
        "step_times_s": step_times_s,
        "losses": [6.0, 5.5],
        "params_changed": True,
        "memory": {"peak_allocated_bytes": 2**30},
        "gpu_busy": busy,
    }


def _recorded_rank(rank: int = 0, slower: float = 1.0) -> dict:
    """The recorded H100 rank; `slower` stretches its timed steps (the same kernels on a slower host)."""
    times = [t * slower for t in _meta()["step_times_s"]]
    return _rank(busy_record(busy_from_events(load_trace_events(TRACE)), times), times, rank)


def _packed_rank() -> dict:
    events, step_s = _packed_events()
    return _rank(busy_record(busy_from_events(events), [step_s] * 3), [step_s] * 3)


def test_case_metrics_take_the_least_busy_rank():
    gpu_bound, host_bound = _packed_rank(), _recorded_rank(rank=1)
    m = busy_metrics([gpu_bound, host_bound])
    assert m["gpu_busy_pct"] == host_bound["gpu_busy"]["pct"] and m["host_bound"] is True
    assert m["gpu_idle_ms_per_step"] == pytest.approx(105.3, abs=0.1)
    assert busy_metrics([_packed_rank()])["host_bound"] is False
    cpu = busy_metrics([_rank({"pct": None, "null_reason": NO_DEVICE_TIMELINE}, [0.1])])
    assert cpu == {"gpu_busy_pct": None, "host_bound": None, "gpu_busy_null_reason": NO_DEVICE_TIMELINE}
    assert busy_metrics([{"step_times_s": [0.1]}]) == {}  # a record made before the busy probe
    whole = aggregate_rank_metrics(tokens_per_step=4096, samples_per_step=4, world_size=1, ranks=[_recorded_rank()])
    assert whole["host_bound"] is True and json.dumps(whole)


def _result(case_id: str, strategy: str, ranks: list[dict]) -> dict:
    case = {
        "model": "gpt_124m",
        "strategy": strategy,
        "batch_size": 4,
        "grad_accum": 1,
        "optimizer_timing": "after_shard",
        "nproc": 1,
        "seq_len": 1024,
        "precision": "bf16",
    }
    metrics = aggregate_rank_metrics(tokens_per_step=4096, samples_per_step=4, world_size=1, ranks=ranks)
    return {"case_id": case_id, "case": case, "status": "ok", "metrics": metrics, "ranks": ranks}


def test_live_line_names_a_host_bound_case_and_shows_a_busy_one():
    from fsdp_bench.launch.progress import progress_line

    line = progress_line(1, 2, "fsdp2-x", _result("fsdp2-x", "fsdp2", [_recorded_rank()]), 10.0)
    assert "HOST-BOUND (GPU idle 105 ms/step, busy 16%)" in line
    line = progress_line(2, 2, "ddp-x", _result("ddp-x", "ddp", [_packed_rank()]), 10.0)
    assert "GPU busy 98%" in line and "HOST-BOUND" not in line
    cpu = _result("ddp-c", "ddp", [_rank({"pct": None, "null_reason": NO_DEVICE_TIMELINE}, [0.1, 0.1])])
    assert "busy" not in progress_line(1, 1, "ddp-c", cpu, 1.0).lower()


def test_table_and_csv_carry_the_label_per_case_and_per_rank():
    from fsdp_bench.report.table import REPORT_COLUMNS, build_per_rank_table, build_table

    results = [_result("fsdp2-hb", "fsdp2", [_recorded_rank()]), _result("ddp-gb", "ddp", [_packed_rank()])]
    df = build_table(results).set_index("case_id")
    assert df.loc["fsdp2-hb", "host_bound"] == True and df.loc["ddp-gb", "host_bound"] == False  # noqa: E712
    assert df.loc["fsdp2-hb", "gpu_idle_ms_per_step"] == pytest.approx(105.3, abs=0.1)
    assert ("host_bound", "host-bound") in REPORT_COLUMNS and ("gpu_busy_pct", "GPU busy (%)") in REPORT_COLUMNS
    per_rank = build_per_rank_table(results).set_index("case_id")
    assert per_rank.loc["fsdp2-hb", "gpu_busy_pct"] == pytest.approx(15.66, abs=0.01)
    assert per_rank.loc["ddp-gb", "host_bound"] == False  # noqa: E712


def test_recommendation_says_a_host_bound_ranking_is_decided_by_host_overhead():
    from fsdp_bench.report.recommend import recommendation_lines
    from fsdp_bench.report.summary import fastest_per_batch, host_bound_cases
    from fsdp_bench.report.table import build_table

    # Both host-bound: the recorded step, and the same kernels with 20% slower host steps.
    both = build_table(
        [_result("fsdp2-a", "fsdp2", [_recorded_rank()]), _result("ddp-b", "ddp", [_recorded_rank(slower=1.2)])]
    )
    line = recommendation_lines(both)[0]
    assert "this ranking is decided by host overhead: both ranked configurations are host-bound" in line
    assert "fsdp2 batch 4 x accum 1: GPU idle 105 ms/step, busy 16%" in line
    assert "decided by host overhead (both host-bound)" in fastest_per_batch(both)[0]
    hosts = host_bound_cases(both)[0]
    assert hosts.startswith(f"Host-bound (GPU busy under {HOST_BOUND_BUSY_PCT:.0f}% of the step) in 2 of 2")
    assert "fsdp2-a (GPU idle 105 ms/step, busy 16%)" in hosts
    # A GPU-bound winner: nothing is said to be decided by the host.
    mixed = build_table([_result("ddp-gb", "ddp", [_packed_rank()]), _result("fsdp2-a", "fsdp2", [_recorded_rank()])])
    line = recommendation_lines(mixed)[0]
    assert "decided by host overhead" not in line and "1 of the 2 ranked configurations host-bound" in line
    gpu_only = build_table([_result("ddp-gb", "ddp", [_packed_rank()])])
    assert "host-bound" not in recommendation_lines(gpu_only)[0]
    assert host_bound_cases(gpu_only) == ["GPU-bound: the GPU is busy at least 80% of the step in all 1 cases."]


def test_utilization_chart_draws_the_busy_share_not_nvml(monkeypatch, tmp_path):
    from fsdp_bench.report.charts import scaling
    from fsdp_bench.report.charts.style import RunData
    from fsdp_bench.report.table import build_table

    figures = []
    monkeypatch.setattr(scaling, "save_figure", lambda fig, path: figures.append(fig))
    ranks = [_recorded_rank()]
    ranks[0]["gpu_util"] = {"pct_mean": _meta()["gpu_util"]["pct_mean"]}  # NVML's 8.8% beside it
    scaling.chart_gpu_util(RunData(df=build_table([_result("fsdp2-hb", "fsdp2", ranks)])), tmp_path / "u.png")
    ax = figures[0].axes[0]
    assert ax.get_title().startswith("GPU busy share of the step") and [t.get_text() for t in ax.texts] == ["16%"]
