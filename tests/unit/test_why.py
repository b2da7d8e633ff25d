"""The reason beside a ranking (report.why, report.recommend): two table rows' parts scaled to
their measured steps, the parts that grew named; per 1,000 tokens when the work differs."""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")

from fsdp_bench.report.recommend import recommendation_lines  # noqa: E402
from fsdp_bench.report.why import add_why_vs_best, row_parts, why_lines, why_slower  # noqa: E402


def _row(strategy, step_s, *, batch=8, host, compute=0.030, comm=0.0, probe_scale=1.2):
    """A trained case whose probe step is `probe_scale` times its measured step (the profiler's cost)."""
    parts = {"compute": compute, "comm_exposed": comm, "optimizer": 0.005, "data": 0.001, "host": host}
    window = step_s * probe_scale
    total = sum(parts.values())
    tokens = batch * 2 * 1024
    return {
        "case_id": f"{strategy}-bs{batch}",
        "model": "gpt2",
        "strategy": strategy,
        "batch_size": batch,
        "grad_accum": 1,
        "optimizer_timing": "after_shard",
        "nproc": 2,
        "status": "ok",
        "trained": True,
        "tokens_per_optimizer_step": tokens,
        "compare_group": f"gpt2 sl1024 tok{tokens} bf16",
        "step_time_s_median": step_s,
        "step_time_s_median_ci_low": step_s * 0.99,
        "step_time_s_median_ci_high": step_s * 1.01,
        "tokens_per_s_per_device": tokens / 2 / step_s,
        "peak_allocated_gib": 10.0,
        "probe_step_s": window,
        "parts_host_means": "device idle",
        **{f"part_{p}_s_per_step": v * window / total for p, v in parts.items()},
    }


def test_parts_scale_to_the_measured_step():
    parts = row_parts(_row("ddp", 0.041, host=0.005))
    assert sum(parts.values()) == pytest.approx(0.041)


def test_the_recommendation_says_why_the_runner_up_is_slower():
    ddp, fsdp2 = _row("ddp", 0.041, host=0.005), _row("fsdp2", 0.088, host=0.052)
    df = pd.DataFrame([ddp, fsdp2]).assign(is_best=[True, False], rank_in_group=[1, 2])
    line = recommendation_lines(df)[0]
    why = line.split("; why: ", 1)[1]
    assert why.startswith("fsdp2 batch 8 x accum 1 is 47.0 ms slower per step than ddp batch 8 x accum 1: ")
    assert "ms more host time (device idle) (" in why and "exposed communication 0.0 against 0.0 ms" in why
    table = add_why_vs_best(df)
    assert table["why_vs_best"].tolist() == ["", why.rstrip(".")]
    assert why_lines(table)[0].startswith("gpt2 sl1024 tok16384 bf16: fastest ddp batch 8 x accum 1 (compute ")


def test_different_work_is_compared_per_thousand_tokens():
    small, big = _row("ddp", 0.030, batch=4, host=0.001), _row("ddp", 0.080, batch=8, host=0.020)
    text = why_slower(big, small)
    assert " slower per 1,000 tokens per device than " in text
    assert why_slower({**big, "probe_step_s": None}, small) is None


def test_cases_tied_at_rank_one_get_no_reason_against_each_other():
    """Two cases at exactly the same tokens/s both rank 1: neither is slower, so neither gets a
    "why slower" (the one not kept as the group's best read "X is not slower per step than Y")."""
    a, b = _row("ddp", 0.041, host=0.005), _row("fsdp2", 0.041, host=0.006)
    slower = _row("fsdp1_full_shard", 0.088, host=0.052)
    table = add_why_vs_best(pd.DataFrame([a, b, slower]).assign(is_best=[True, True, False]))
    assert table["why_vs_best"].tolist()[:2] == ["", ""] and table["why_vs_best"].tolist()[2]
