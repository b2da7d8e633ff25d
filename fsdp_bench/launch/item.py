"""One bench item: run its case (or, with --bench-tune, the tuner) and say what the test's
outcome is. The plugin's `bench_run` fixture is the one caller and turns the outcome into
pytest's (only the plugin imports pytest); what it shares with the other hooks is
`launch.progress.BenchState`.

Outcomes: ok passes (None); `skipped` skips; `oom` is an expected failure (xfail: a result worth
having); failed / timeout fail with the log's tail; a case that ran but never changed its
parameters where its optimizer timing says it cannot (built before sharding, unfixed) is an
xfail, so its speed never reads as a pass a user could pick; any other case that did not train
(parameters unchanged, a loss that diverged to NaN or inf or never moved) fails. Either stays a
row of the table, never ranked (results.trained).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fsdp_bench.launch.bench_stats import mark_untimed, record_benchmark_stats
from fsdp_bench.launch.progress import BenchState
from fsdp_bench.launch.session import DiskFull, SessionError
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.catalog import optimizer_timing
from fsdp_bench.results.records import CaseResult, TuneAnswer
from fsdp_bench.results.trained import PARAMETERS_UNCHANGED, untrained_reason

LOG_TAIL_SHOWN_CHARS = 1500  # of a failed case's log, under its FAILED line
Outcome = tuple[str, str] | None  # ("skip" | "xfail" | "fail", message), None: passed


def run_item(
    state: BenchState, case: Case, *, benchmark: Any, node_id: str, write: Callable[[str], None]
) -> tuple[CaseResult | TuneAnswer, Outcome]:
    """The case's result (a tuning item: the tuner's answer) and the test's outcome, after its
    live line. A SessionError (a full disk, an unusable run folder) and Ctrl-C propagate, the
    sweep marked interrupted and the benchmark fixture skipped first: it timed nothing, and its
    "fixture was not used" warning would add a warnings summary around the one closing line."""
    try:
        opening = state.opening_line()
        if opening:
            write(opening)
        if state.sweep.tune:
            # the tuning's cases are timed by the worker and reported by the answer, not by this
            # item: no stats to feed pytest-benchmark, and no "fixture was not used" warning
            mark_untimed(benchmark)
            return _run_tune(state, case, write)
        result = state.session.run(case)
    except (SessionError, KeyboardInterrupt) as exc:
        state.interrupted |= isinstance(exc, SessionError)
        state.stopped = str(exc) if isinstance(exc, SessionError) else state.stopped
        mark_untimed(benchmark)
        raise
    line = state.progress.finish_case(node_id, case.id, result, kept=case.id in state.session.kept)
    if line:
        write(line)
    record_benchmark_stats(benchmark, case, result)
    return result, item_outcome(case, result)


def stop_exit_code(exc: SessionError) -> int:
    """A full disk (3) leaves the finished cases resumable; any other SessionError (4) means the
    run folder itself is unusable."""
    return 3 if isinstance(exc, DiskFull) else 4


def item_outcome(case: Case, result: CaseResult) -> Outcome:
    """What the test says of a case's result (see the module docstring)."""
    status, reason = result["status"], result.get("reason", "")
    if status == "skipped":
        return "skip", reason
    if status == "oom":
        return "xfail", f"OOM: {reason}"
    if status != "ok":
        tail = result.get("log_tail", "")[-LOG_TAIL_SHOWN_CHARS:]
        return "fail", f"{status.upper()}: {reason}\n--- log tail ---\n{tail}"
    untrained = untrained_reason(result.get("metrics") or {})
    expected = optimizer_timing(case.optimizer_timing).not_trained_reason
    if untrained == PARAMETERS_UNCHANGED and expected:  # an optimizer built before sharding, unfixed
        return "xfail", expected
    if untrained:  # anything else that did not train is nothing this program expects
        return "fail", f"DID NOT TRAIN: {untrained}"
    return None


def _run_tune(state: BenchState, request: Any, write: Callable[[str], None]) -> tuple[TuneAnswer, Outcome]:
    """A `--bench-tune` item: the tuner's loop (launch.tune.tune_item), one live line per case.
    A TuneError propagates (a usage error); no pick fails the item."""
    from fsdp_bench.launch.tune import tune_item

    answer = tune_item(state, request, write)
    failed = ("fail", f"tune {request.model}: no pick ({answer['stopped']})") if answer["pick"] is None else None
    return answer, failed
