"""The pytest-benchmark bridge: a case's own per-step times become the benchmark fixture's stats
(no pytest import: the fixture object is handed in)."""

from __future__ import annotations

from typing import Any

from fsdp_bench.plan.case import Case
from fsdp_bench.results.records import CaseResult


def record_benchmark_stats(benchmark: Any, case: Case, result: CaseResult) -> None:
    """Feed the case's measured per-step times to pytest-benchmark, so --benchmark-json,
    --benchmark-autosave and `pytest-benchmark compare` see real step times, not a re-timing
    of the parent waiting on torchrun. None: pytest-benchmark is not loaded (`-p no:benchmark`)."""
    from fsdp_bench.analysis.repeats import pooled_step_times

    if benchmark is None:
        return

    times = pooled_step_times(result)  # every repeat's, with --bench-repeats
    benchmark.extra_info.update(
        {
            "case_id": case.id,
            **case.to_dict(),
            **{k: v for k, v in (result.get("metrics") or {}).items() if isinstance(v, (int, float, str, bool))},
        }
    )
    if not times or not benchmark.enabled:
        mark_untimed(benchmark)  # nothing to time
        return
    # Like for like: only cases doing the same work per optimizer step are compared.
    tokens = case.batch_size * case.grad_accum * case.nproc * case.seq_len
    benchmark.group = f"{case.model} sl{case.seq_len} tok{tokens} {case.precision}"
    # pytest-benchmark has no public API for externally measured times; _make_stats is what
    # its own pedantic mode uses. tests/integration/test_sweep.py checks the JSON it produces.
    stats = benchmark._make_stats(1)
    benchmark._mode = "fsdp-bench(external timings)"
    for t in times:
        stats.update(t)


def mark_untimed(benchmark: Any) -> None:
    """An item with nothing for pytest-benchmark to time (a tuning, a case without step times):
    no stats, and no "fixture was not used" warning. `skipped` alone does not do it: pytest-
    benchmark's makereport hook resets it from the test's outcome after the call, and its cleanup
    warns unless `skipped` or `_mode` is set; a mode without stats adds no row to its table."""
    if benchmark is None:  # pytest-benchmark is not loaded
        return
    benchmark.skipped = True
    benchmark._mode = "fsdp-bench(nothing timed)"
