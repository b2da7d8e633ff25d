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
from fsdp_bench.analysis.busy import NO_DEVICE_TIMELINE, busy_record
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
