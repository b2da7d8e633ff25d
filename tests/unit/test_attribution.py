"""The step taken apart (analysis.attribution) on hand-made timelines: disjoint parts that sum to
the step, the rank the others wait for, and the reason between two cases (report.why)."""

from __future__ import annotations

import pytest

from fsdp_bench.analysis.aggregate import parts_metrics
from fsdp_bench.analysis.attribution import PARTS, critical_rank, dominant_part, reason_text, scaled_parts, step_parts

# Two 10 s steps. Step 1: data 0-1, compute 1-5 with an all-gather 2-4 under it (hidden), an
# all-gather 5-6 alone (exposed), nothing 6-7 (host), optimizer 7-9 (its ops count as optimizer),
# a reduce-scatter 8.5-9.5 (0.5 s exposed after the optimizer), nothing 9.5-10.
STEPS = [(0.0, 10.0), (20.0, 30.0)]
COMPUTE = [(1.0, 5.0), (7.0, 9.0), (21.0, 25.0)]
COMM = {"all_gather": [(2.0, 4.0), (5.0, 6.0)], "reduce_scatter": [(8.5, 9.5), (26.0, 27.0)]}


def test_parts_are_disjoint_and_sum_to_the_step():
    p = step_parts(STEPS, compute=COMPUTE, comm_by_kind=COMM, optimizer=[(7.0, 9.0)], data=[(0.0, 1.0)])
    assert p["steps"] == 2 and p["window_s"] == pytest.approx(10.0)
    assert sum(p[f"{k}_s"] for k in PARTS) == pytest.approx(p["window_s"])
    assert p["optimizer_s"] == pytest.approx(2.0 / 2)
    assert p["data_s"] == pytest.approx(1.0 / 2)
    assert p["compute_s"] == pytest.approx((4.0 + 4.0) / 2)  # step 2: 21-25
    assert p["comm_exposed_by_kind_s"] == pytest.approx({"all_gather": 1.0 / 2, "reduce_scatter": (0.5 + 1.0) / 2})
    assert p["comm_exposed_s"] == pytest.approx(2.5 / 2)
    assert p["host_s"] == pytest.approx(10.0 - 1.0 - 0.5 - 4.0 - 1.25)


def test_no_window_says_so():
    assert step_parts([], compute=COMPUTE, comm_by_kind={})["null_reason"] == "no step window"


def _parts(**seconds):
    base = {f"{p}_s": 0.0 for p in PARTS}
    base.update({f"{k}_s": v for k, v in seconds.items()})
    base["window_s"] = sum(v for k, v in base.items() if k.endswith("_s"))
    return base


def test_the_rank_others_wait_for_is_the_one_with_least_exposed_communication():
    # A host delay on rank 1: rank 1 spends it in Python, rank 0 waits for it in a collective.
    waiting = _parts(compute=0.02, comm_exposed=0.031)
    delayed = _parts(compute=0.02, host=0.03, comm_exposed=0.001)
    assert critical_rank([waiting, delayed]) == 1
    assert critical_rank([None, {"null_reason": "x"}]) is None
    m = parts_metrics(
        [{"step_parts": waiting, "step_times_s": [0.05]}, {"step_parts": delayed, "step_times_s": [0.04]}]
    )
    assert m["parts_rank"] == 1 and m["part_host_s_per_step"] == 0.03
    assert m["probe_vs_median_pct"] == pytest.approx(100 * (0.051 / 0.04 - 1))
    assert parts_metrics([{}]) == {}


def test_the_parts_are_scaled_to_the_steps_timed_without_the_profiler():
    # A 50 ms profiled window whose plain steps took 40 ms: the profiler's 25% comes out of every
    # part alike, and the probe step (what the parts sum to) is the plain one.
    window = _parts(compute=0.03, host=0.015, comm_exposed=0.005)
    window["comm_exposed_by_kind_s"] = {"all_reduce": 0.005}
    m = parts_metrics([{"step_parts": {**window, "plain_step_s": 0.04}, "step_times_s": [0.05, 0.04, 0.045]}])
    assert m["probe_step_s"] == 0.04 and m["probe_window_s"] == pytest.approx(0.05)
    assert m["part_compute_s_per_step"] == pytest.approx(0.024) and m["part_host_s_per_step"] == pytest.approx(0.012)
    assert m["part_comm_all_reduce_s_per_step"] == pytest.approx(0.004)
    assert sum(m[f"part_{p}_s_per_step"] for p in PARTS) == pytest.approx(0.04)
    assert m["probe_profiler_overhead_pct"] == pytest.approx(25.0)
    assert m["probe_vs_median_pct"] == pytest.approx(100 * (0.04 / 0.045 - 1))


def test_scaled_parts_keep_their_shares_of_the_measured_step():
    scaled = scaled_parts(_parts(compute=0.03, host=0.01), 0.02)
    assert scaled["compute"] == pytest.approx(0.015) and scaled["host"] == pytest.approx(0.005)
    assert sum(scaled.values()) == pytest.approx(0.02)


def test_reason_names_the_part_that_grew_and_always_the_exposed_communication():
    ddp = {"compute": 0.030, "comm_exposed": 0.0, "optimizer": 0.005, "data": 0.001, "host": 0.005}
    fsdp2 = {"compute": 0.031, "comm_exposed": 0.0, "optimizer": 0.005, "data": 0.001, "host": 0.050}
    text = reason_text("fsdp2 batch 8", "ddp batch 8", fsdp2, ddp)
    assert text.startswith("fsdp2 batch 8 is 46.0 ms slower per step than ddp batch 8: 45.0 ms more host time (98%")
    assert "exposed communication 0.0 against 0.0 ms" in text
    assert dominant_part(fsdp2, ddp) == "host"
    assert "not slower" in reason_text("a", "b", ddp, fsdp2)
    assert "offset" not in text
    # a part that grew by more than the whole gap: the part that shrank is named too
    shifted = {**fsdp2, "comm_exposed": 0.040, "host": 0.0}
    assert "; offset by 5.0 ms less host time" in reason_text("b", "a", shifted, ddp)


def test_two_cases_a_hair_apart_that_trade_parts_get_no_share_of_the_gap():
    """Seen at the end of a default CPU sweep: 21.2 ms more compute read as "20053% of the
    difference" of two cases 0.1 ms apart. The parts are given, and what offset them, not shares."""
    faster = {"compute": 0.0138, "comm_exposed": 0.002, "optimizer": 0.002, "data": 0.0, "host": 0.0262}
    slower = {**faster, "compute": 0.0350, "host": 0.0051}
    text = reason_text("b", "a", slower, faster)
    assert text.startswith("b is 0.1 ms slower per step than a: 21.2 ms more compute (35.0 against 13.8 ms)")
    assert "% of the difference" not in text and "; offset by 21.1 ms less host time" in text
    # below 1.5 times the gap a share still reads as one
    assert "(140% of the difference" in reason_text("b", "a", {**faster, "compute": 0.0278, "host": 0.0222}, faster)


def test_planted_causes_act_in_every_step_and_only_there():
    from fsdp_bench.plan.faults import check_spec, faults_for

    assert faults_for("fsdp2-x", 1, "host_delay@step:1,comm_delay@step:0") == {"step": "host_delay"}
    check_spec("slow_optimizer@step:1/fsdp2")
    for bad in ("host_delay@measure:1", "raise@step:0"):
        with pytest.raises(ValueError, match="act in every step and only there: KIND@step:RANK"):
            check_spec(bad)


def test_back_to_back_step_windows_are_two_steps():
    # the probe's marked steps follow each other: their spans touch, and each is a step
    p = step_parts([(0.0, 5.0), (5.0, 10.0)], compute=[(1.0, 4.0), (6.0, 9.0)], comm_by_kind={})
    assert p["steps"] == 2 and p["window_s"] == 5.0
    assert p["compute_s"] == 3.0 and p["host_s"] == 2.0
