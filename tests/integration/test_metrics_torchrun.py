"""The measurements of real 2-rank gloo cases (one small sweep shared by every assert).

Each strategy runs once in its own torchrun with profiling on: gpt_tiny, fp32, seq_len 64,
1 warmup + 3 measured steps, the same seed, data and global batch.
"""

from __future__ import annotations

import pytest

from fsdp_bench.plan.case import Case
from fsdp_bench.results.layout import create_run_dir
from fsdp_bench.results.schema import STAGE_LABELS
from fsdp_bench.results.stats import mean_across_ranks

# versions: profiler traces (step markers, collective events, HTA), MemTracker, FlopCounterMode
pytestmark = [pytest.mark.slow, pytest.mark.versions]

STRATEGIES = ("ddp", "fsdp1_full_shard", "fsdp1_shard_grad_op", "fsdp1_no_shard", "fsdp2", "fsdp2_no_reshard")
# Loss parity tolerance (fp32, 4 steps, lr 1e-3): DDP all-reduces gradients, FSDP reduce-scatters
# them, so sums run in another order; float32 rounding (~1e-7 relative per op) stays far below
# 1e-4 absolute at a loss of ~6, while a step that trains differently moves the loss by >1e-2.
LOSS_ABS_TOL = 1e-4


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from fsdp_bench.launch.runner import run_case

    run = create_run_dir(tmp_path_factory.mktemp("metrics"))
    out = {}
    for strategy in STRATEGIES:
        case = Case(strategy=strategy, model="gpt_tiny", seq_len=64, steps=3, warmup=1, profile=True)
        out[strategy] = run_case(case, run, timeout_s=300)
        assert out[strategy]["status"] == "ok", (strategy, out[strategy]["reason"], out[strategy]["log_tail"][-2000:])
    out["_run"] = run
    return out


def _cases(results):
    return {k: v for k, v in results.items() if not k.startswith("_")}


def test_stage_records_present_ordered_and_printed_on_rank_0(results):
    order = [s for s in STAGE_LABELS]
    for strategy, res in _cases(results).items():
        for rank in res["ranks"]:
            stages = [s["stage"] for s in rank["stages"]]
            assert stages == order, (strategy, stages)
            assert all(s["rank"] == rank["rank"] and s["rss_bytes"] > 0 for s in rank["stages"])
        log = (results["_run"] / "cases" / res["case_id"] / "log.txt").read_text()
        for label in STAGE_LABELS.values():
            assert f"[fsdp-bench] rank 0 {label}: rss_gib=" in log
        assert "[fsdp-bench] rank 1" not in log


def test_breakdown_sums_to_measured_peak(results):
    for strategy in ("ddp", "fsdp2", "fsdp2_no_reshard"):
        for rank in results[strategy]["ranks"]:
            parts = rank["memory_breakdown_bytes"]
            assert set(parts) == {"params", "grads", "optimizer", "activations", "other"}
            assert all(v >= 0 for v in parts.values()) and parts["params"] > 0 and parts["activations"] > 0
            assert sum(parts.values()) == pytest.approx(rank["memory"]["peak_allocated_bytes"], rel=0.05)
        assert results[strategy]["metrics"]["breakdown_params_gib"] > 0


def test_fsdp1s_breakdown_is_its_profiled_peaks(results):
    """MemTracker refuses FSDP1; its profiled peak is taken apart instead, into the same five parts."""
    for strategy in ("fsdp1_full_shard", "fsdp1_shard_grad_op", "fsdp1_no_shard"):
        for rank in results[strategy]["ranks"]:
            parts = rank["memory_breakdown_bytes"]
            assert parts == rank["memory"]["profiled_peak"]["breakdown_bytes"], rank.get("memory_breakdown_null_reason")
            assert sum(parts.values()) == rank["memory"]["peak_allocated_bytes"]
            assert min(parts["params"], parts["optimizer"], parts["activations"]) > 0, parts
        assert results[strategy]["metrics"]["breakdown_activations_gib"] > 0


def test_fsdp1s_peak_is_the_profiled_one_and_the_predicted_one(results):
    """MemTracker refuses FSDP1; the profiler's memory events give its CPU peak instead."""
    for strategy in ("fsdp1_full_shard", "fsdp1_shard_grad_op", "fsdp1_no_shard"):
        for rank in results[strategy]["ranks"]:
            memory, profiled = rank["memory"], rank["memory"]["profiled_peak"]
            assert memory["method"].startswith("profiled_probe_steps"), memory
            assert profiled["drift_bytes"] == profiled["missed_frees"] == 0, profiled
            assert memory["peak_allocated_bytes"] == profiled["peak_bytes"] > profiled["resident_bytes"] > 0
            assert memory["peak_allocated_bytes"] == pytest.approx(rank["prediction"]["peak_bytes"], rel=0.01)
        assert results[strategy]["metrics"]["peak_allocated_gib"] > 0


def test_model_state_matches_zero_expectation(results):
    n = results["ddp"]["ranks"][0]["n_params"]
    expected_total = {"ddp": 16 * n, "fsdp2": 16 * n / 2, "fsdp2_no_reshard": 16 * n / 2}
    for strategy, total in expected_total.items():
        for rank in results[strategy]["ranks"]:
            expected = rank["expected_model_state_bytes"]
            assert expected["textbook_total"] == total  # the ZeRO formula, beside the allocated figure
            measured = rank["measured_model_state_bytes"]
            assert measured["total"] == pytest.approx(total, rel=0.10), strategy
            # allocated: the formula plus AdamW's 4-byte step counter per parameter; exact here
            assert measured["total"] == expected["total"] > total, strategy
            assert measured["params"] == pytest.approx(rank["expected_model_state_bytes"]["params"], rel=0.10)
        assert results[strategy]["metrics"]["model_state_measured_over_expected"] == pytest.approx(1.0, abs=0.10)


def test_flop_formula_agrees_with_flop_counter(results):
    for strategy, res in _cases(results).items():
        m = res["metrics"]
        assert m["flops_per_token"] > 0 and m["flops_per_token_counter"] > 0
        assert m["flop_formula_over_counter"] == pytest.approx(1.0, abs=0.15), strategy
        assert m["tflops_per_s_per_device"] > 0
        assert m["mfu_pct"] is None and "CPU" in m["mfu_null_reason"]


def test_exposed_comm_between_zero_and_total(results, tmp_path):
    for strategy, res in _cases(results).items():
        m = res["metrics"]
        assert m["comm_total_s_per_step"] > 0, strategy
        assert 0 <= m["comm_exposed_s_per_step"] <= m["comm_total_s_per_step"] + 1e-9
        assert m["compute_s_per_step"] > 0 and m["optimizer_s_per_step"] > 0
        traces = list((results["_run"] / "cases" / res["case_id"] / "tb_profile").glob("rank*.pt.trace.json"))
        assert len(traces) == 2, traces
    assert results["ddp"]["metrics"]["comm_all_reduce_s_per_step"] > 0
    assert results["fsdp2"]["metrics"]["comm_all_gather_s_per_step"] > 0


def _trace_dir(results, strategy: str):
    return results["_run"] / "cases" / results[strategy]["case_id"] / "tb_profile"


def test_trace_has_a_profiler_step_per_profiled_step(results):
    """torch.profiler's schedule marks each profiled step `ProfilerStep#N` (TensorBoard and HTA
    split a trace into steps by them); the profiler's warmup step is not in the trace."""
    import json

    for strategy in ("ddp", "fsdp2"):
        for rank in results[strategy]["ranks"]:
            (trace,) = _trace_dir(results, strategy).glob(f"rank{rank['rank']}.*.pt.trace.json")
            events = json.loads(trace.read_text())["traceEvents"]
            steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
            assert steps == ["ProfilerStep#1", "ProfilerStep#2"], (strategy, steps)
            assert rank["profile"]["steps_profiled"] == 2


# HTA parses traces in a fork()ed multiprocessing pool; forked from pytest, whose threads (the
# sweep's env.json reader, gloo, matplotlib) may hold a lock at that moment, a worker can wait on a
# semaphore forever (CI hung 10 minutes here once). A fresh interpreter has no such threads.
_HTA = """
import json, sys
from hta.trace_analysis import TraceAnalysis
# HTA drops the last ProfilerStep by default (on GPUs its kernels may be cut off); ours ends synchronized
a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
print(json.dumps({r: [int(i) for i in a.t.get_iterations(r)] for r in sorted(a.t.get_all_traces())}))
"""


def test_holistic_trace_analysis_finds_the_steps(results):
    import json
    import subprocess
    import sys

    pytest.importorskip(
        "hta.trace_analysis", reason="HolisticTraceAnalysis is not installed: pip install -e '.[trace]'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", _HTA, str(_trace_dir(results, "fsdp2"))], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"0": [1, 2], "1": [1, 2]}


def test_update_norms_and_params_changed(results):
    for res in _cases(results).values():
        for rank in res["ranks"]:
            assert len(rank["update_norms"]) == 1 and min(rank["update_norms"]) > 0
            assert rank["update_norm_steps"] == [0]  # the warmup step, never a measured one
        assert res["metrics"]["params_changed"] is True
        assert 0 < res["metrics"]["measure_timed_share_pct"] <= 100


def test_loss_parity_across_strategies(results):
    ddp = mean_across_ranks(r["losses"] for r in results["ddp"]["ranks"])
    assert len(ddp) == 4 and ddp[-1] < ddp[0]
    for strategy, res in _cases(results).items():
        curve = mean_across_ranks(r["losses"] for r in res["ranks"])
        deviation = max(abs(a - b) for a, b in zip(curve, ddp))
        assert deviation <= LOSS_ABS_TOL, (strategy, deviation, curve, ddp)


def test_report_table_has_the_loss_deviation_column(results):
    from fsdp_bench.report.table import build_table

    df = build_table([v for k, v in results.items() if not k.startswith("_")]).set_index("strategy")
    assert df.loc["ddp", "loss_max_abs_dev_vs_ddp"] == 0.0
    assert df["loss_max_abs_dev_vs_ddp"].max() <= LOSS_ABS_TOL
    for column in ("mfu_pct", "comm_exposed_s_per_step", "breakdown_activations_gib", "flop_formula_over_counter"):
        assert column in df.columns
