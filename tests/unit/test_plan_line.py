"""Issue #39 item 6: the GPU plan (`--collect-only --bench-device cuda`) listed 24 ids, then
estimated "16 case(s)" without saying it assumed one GPU rank or that 8 FSDP1 cases are skipped."""

from __future__ import annotations

from fsdp_bench.launch.preflight import busy_machine_line, plan_line
from fsdp_bench.plan.case import skip_reason
from fsdp_bench.plan.options import parse_sweep


def test_the_gpu_plan_names_its_ranks_and_the_skipped_cases():
    cases = parse_sweep({"device": "cuda", "nproc": "1"}, plan_only=True).cases()
    run = [c for c in cases if skip_reason(c) is None]
    skipped = [c for c in cases if skip_reason(c) is not None]
    assert (len(cases), len(run), len(skipped)) == (24, 16, 8)
    line = plan_line(run, skipped)
    assert line.startswith("fsdp-bench: plan: 16 case(s) at 1 GPU rank(s) each (--bench-nproc N; ")
    assert line.endswith(
        "8 listed case(s) skipped before launch (fsdp1_full_shard at 1 rank; fsdp1_shard_grad_op at 1 rank)"
    )


def test_a_plain_cpu_sweep_needs_no_plan_line():
    assert plan_line(parse_sweep({"device": "cpu"}).cases(), []) is None


def test_a_busy_machine_is_said_beside_the_estimate():
    cases = parse_sweep({"device": "cpu"}).cases()
    assert busy_machine_line(cases, 7.2, 2) == (
        "fsdp-bench: load average 7.2 on 2 CPU(s): other work shares this machine, so timings will be noisy; "
        "the estimate allows for the load as it was over the last minute"
    )
    assert busy_machine_line(cases, 1.5, 2) is None


def test_a_cpu_plan_refuses_the_ranks_a_cpu_run_refuses():
    """`--collect-only --bench-nproc 100` estimated 34 minutes for a sweep the run then refused."""
    import pytest

    from fsdp_bench.plan.case import CaseError
    from fsdp_bench.plan.devices import max_cpu_ranks

    too_many = str(max_cpu_ranks() + 1)
    with pytest.raises(CaseError, match=rf"^--bench-nproc: {too_many} CPU ranks requested but at most "):
        parse_sweep({"device": "cpu", "nproc": too_many}, plan_only=True)
    assert parse_sweep({"device": "cuda", "nproc": "100"}, plan_only=True).nproc == 100  # a GPU node's plan, anywhere


def test_the_tuner_options_without_the_tuner_each_say_what_they_are():
    import pytest

    from fsdp_bench.plan.case import CaseError

    with pytest.raises(
        CaseError, match=r"^--bench-budget-gib: only with --bench-tune \(the report's budget: visualize"
    ):
        parse_sweep({"budget-gib": "8"}, plan_only=True)
    with pytest.raises(CaseError, match=r"^--bench-tune-time-s: only with --bench-tune \(the case-seconds after which"):
        parse_sweep({"tune-time-s": "60"}, plan_only=True)
