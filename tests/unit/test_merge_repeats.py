"""Issue #16: the step times of all repeats of a case make its statistics, each repeat weighing
alike, and the spread between repeats is measured; a failed repeat fails the case. On made-up
repeats; a real sweep's repeats are tested in tests/integration/test_interleaved_repeats.py."""

from __future__ import annotations

import pytest

from fsdp_bench.analysis.repeats import merge_repeats, pooled_step_times

CASE = "ddp-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"


def _repeat(n: int, times: list[float], status: str = "ok") -> dict:
    case = {
        "strategy": "ddp",
        "model": "gpt_tiny",
        "nproc": 2,
        "batch_size": 2,
        "grad_accum": 1,
        "seq_len": 32,
        "steps": len(times),
        "warmup": 1,
    }
    return {
        "case_id": CASE,
        "case": case,
        "status": status,
        "reason": "" if status == "ok" else "rank 1 died",
        "repeat": n,
        "duration_s": 5.0,
        "metrics": {"step_time_s_median": sorted(times)[len(times) // 2]} if times else {},
        "ranks": [{"rank": 0, "step_times_s": times}, {"rank": 1, "step_times_s": [t / 2 for t in times]}],
    }


def test_merge_pools_the_step_times_and_measures_the_spread():
    merged = merge_repeats([_repeat(1, [1.0, 1.0, 1.0]), _repeat(2, [2.0, 2.0, 2.0])])
    m = merged["metrics"]
    assert m["repeats"] == 2 and m["steps_measured"] == 6
    assert m["repeat_step_time_s_medians"] == [1.0, 2.0]
    assert m["repeat_spread_pct"] == pytest.approx(100 * (2.0 - 1.0) / 1.5)
    assert m["step_time_s_median"] == 1.5
    assert pooled_step_times(merged) == [1.0] * 3 + [2.0] * 3
    assert merged["duration_s"] == 10.0 and "repeat" not in merged


def test_each_repeat_weighs_alike_however_many_steps_it_measured():
    """A time-capped loop measures more steps on a quiet machine: gpt2_small_odd ddp bs4 accum 2
    measured 50 steps at 0.0243 s in one repeat and 11 at 0.1448 s in the other, and the pooled
    median (0.0321 s) was the quiet repeat's alone."""
    quiet, loaded = [0.0243] * 50, [0.1448] * 11
    merged = merge_repeats([_repeat(1, quiet), _repeat(2, loaded)])
    m = merged["metrics"]
    assert m["steps_measured"] == 61
    assert m["step_time_s_median"] == pytest.approx((0.0243 + 0.1448) / 2)  # 11 steps from each
    assert pooled_step_times(merged) == quiet + loaded  # the raw record keeps every step
    alike = merge_repeats([_repeat(1, [1.0, 3.0] * 5), _repeat(2, [2.0] * 10)])
    assert alike["metrics"]["step_time_s_median"] == 2.0


def test_a_failed_repeat_fails_the_case_and_says_which():
    merged = merge_repeats([_repeat(1, [1.0, 1.0]), _repeat(2, [], status="failed")])
    assert merged["status"] == "failed"
    assert merged["reason"] == "repeat 2 of 2: rank 1 died"
    early = merge_repeats([_repeat(1, [], status="failed")], planned=3)  # the first failure ends the case
    assert early["reason"] == "repeat 1 of 3: rank 1 died"
    assert [r["status"] for r in merged["repeats"]] == ["ok", "failed"]
