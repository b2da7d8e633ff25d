"""Issue #39 item 1: on a busy machine the terminal's answer is short (the fastest, how many are
tied with it, what would separate them), however many configurations tie; report.md keeps the list."""

from __future__ import annotations

import pandas as pd

from fsdp_bench.report.answer import ANSWER_MAX_CHARS, answer_lines
from fsdp_bench.report.recommend import recommendation_lines

STRATEGIES = ("ddp", "fsdp1_full_shard", "fsdp1_shard_grad_op", "fsdp1_no_shard", "fsdp2", "fsdp2_no_reshard")


def _row(strategy: str, batch: int, accum: int, tps: float, *, cv: float, low=0.9, high=1.1, **extra) -> dict:
    return {
        "case_id": f"{strategy}-m-ws2-bs{batch}-ga{accum}-opt_after",
        "model": "gpt_tiny",
        "strategy": strategy,
        "batch_size": batch,
        "grad_accum": accum,
        "optimizer_timing": "after_shard",
        "status": "ok",
        "trained": True,
        "params_changed": True,
        "tokens_per_s_per_device": tps,
        "step_time_s_median": 1.0,
        "step_time_s_median_ci_low": low,
        "step_time_s_median_ci_high": high,
        "step_time_cv_pct": cv,
        "peak_allocated_gib": 0.0099,
        **extra,
    }


def _busy_sweep() -> pd.DataFrame:
    """24 configurations measured at CV 13-70 % (issue #39's busy machine): most tie."""
    rows = []
    for i, strategy in enumerate(STRATEGIES):
        for j, (batch, accum) in enumerate(((2, 1), (2, 2), (4, 1), (4, 2))):
            rows.append(_row(strategy, batch, accum, 24_000 - 300 * (4 * i + j), cv=13 + 2.5 * (4 * i + j)))
    return pd.DataFrame(rows)


def test_a_busy_sweep_gets_a_short_answer_and_the_report_keeps_the_list():
    df = _busy_sweep()
    (line,) = answer_lines(df)
    (full,) = recommendation_lines(df)
    assert len(line) <= ANSWER_MAX_CHARS < len(full), (len(line), len(full))
    assert line.startswith("Recommendation (gpt_tiny): ddp batch 2 x accum 1, 24,000 tok/s/dev, peak alloc 10.1 MiB; ")
    tied = full.split(" configurations tied")[0].rsplit(" ", 1)[1]  # the full line's count
    assert f"; {tied} of 24 tied within noise (list: report.md)" in line
    # every tied case is NOISY and each ran once: the machine's load and repeats separate them
    assert line.endswith(f"to separate them: a quieter machine ({tied} NOISY) and --bench-repeats 3")


def test_quiet_repeated_ties_need_more_steps_and_a_clear_winner_says_by_how_much():
    quiet = pd.DataFrame([_row("ddp", 2, 1, 100.0, cv=2, repeats=3), _row("fsdp2", 2, 1, 99.0, cv=2, repeats=3)])
    (line,) = answer_lines(quiet)
    assert line.endswith("to separate them: a longer --bench-measure-cap-s"), line
    apart = pd.DataFrame(
        [_row("ddp", 2, 1, 100.0, cv=2, low=0.99, high=1.01), _row("fsdp2", 4, 1, 70.0, cv=2, low=0.99, high=1.01)]
    )
    (line,) = answer_lines(apart)
    # 100 against 70 tokens/s: 43% ahead (the winner's gain, as report.md's "+43% over"), not 30%
    assert line.endswith("; 43% ahead of fsdp2 batch 4 x accum 1, beyond noise") and "tied" not in line
    # a case without a measured peak (FSDP1 on CPU before its profiled peak): its RSS, named, as on the live lines
    fsdp1 = pd.DataFrame([_row("fsdp1_no_shard", 4, 1, 100.0, cv=2, peak_allocated_gib=None, peak_rss_gib=0.331)])
    (line,) = answer_lines(pd.concat([fsdp1, apart.iloc[1:]]))
    assert "100 tok/s/dev, peak alloc n/a, RSS 339 MiB; " in line, line


def test_the_longest_answer_fits():
    """A long model name, a budget, an optimizer timing and host-bound at once still fit."""
    row = _row("fsdp2_no_reshard", 16, 16, 123_456.0, cv=50, optimizer_timing="before_shard_fixed", host_bound=True)
    other = {**row, "case_id": "x", "strategy": "accelerate_fsdp2"}
    df = pd.DataFrame([row, other]).assign(model="hf:tests/data/hf_configs/mistral_gqa_tied")
    (line,) = answer_lines(df, budget_gib=40.0)
    assert len(line) <= ANSWER_MAX_CHARS, (len(line), line)


def test_a_budget_answer_says_what_it_left_out_and_report_md_separates_ties_alike():
    """The terminal's budget answer had dropped report.md's count of faster configurations over the
    budget, and the two gave different advice for separating a tie."""
    big = _row("ddp", 4, 1, 100.0, cv=2, low=0.99, high=1.01, peak_allocated_gib=2.0)
    small = _row("fsdp2", 4, 1, 70.0, cv=2, low=0.99, high=1.01, peak_allocated_gib=1.0)
    (line,) = answer_lines(pd.DataFrame([big, small]), budget_gib=1.5)
    assert "fsdp2 batch 4 x accum 1" in line and line.endswith("; 1 over the budget left out"), line
    (full,) = recommendation_lines(_busy_sweep())
    (short,) = answer_lines(_busy_sweep())
    assert short.rsplit("to separate them: ", 1)[1] in full.split("; to separate them: ", 1)[1]
    # the longest answer with a budget that left some out still fits: the count goes last
    row = _row("fsdp2_no_reshard", 16, 16, 123_456.0, cv=50, optimizer_timing="before_shard_fixed", host_bound=True)
    heavy = {**row, "case_id": "y", "strategy": "ddp", "tokens_per_s_per_device": 200_000.0, "peak_allocated_gib": 99.0}
    df = pd.DataFrame([row, {**row, "case_id": "x", "strategy": "accelerate_fsdp2"}, heavy])
    (line,) = answer_lines(df.assign(model="hf:tests/data/hf_configs/mistral_gqa_tied"), budget_gib=40.0)
    assert len(line) <= ANSWER_MAX_CHARS, (len(line), line)
