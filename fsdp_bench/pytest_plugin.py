"""pytest integration, hooks only: `--bench-*` options, one parametrized test per case, the
pytest-benchmark bridge, and the report at the end of the session. What the hooks share lives in
`fsdp_bench.launch.progress.BenchState`; the terminal's closing lines in `fsdp_bench.report.terminal`.

Collection imports no torch: cases come from `fsdp_bench.plan`, which is pure Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fsdp_bench.launch.bench_stats import record_benchmark_stats
from fsdp_bench.launch.progress import BenchState, sigterm_as_interrupt, write_live_line
from fsdp_bench.launch.session import DiskFull, SessionError
from fsdp_bench.analysis.tune import TuneRequest
from fsdp_bench.plan import faults
from fsdp_bench.plan.case import Case, CaseError, skip_reason
from fsdp_bench.plan.options import OPTIONS, SWITCH_OPTIONS, parse_sweep
from fsdp_bench.results.metrics import M

_STATE_KEY = pytest.StashKey[BenchState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fsdp-bench", "fsdp-bench sweep (benchmarks/)")
    for name, (_attr, _parse, help_text) in OPTIONS.items():
        # A switch is a plain flag: `--bench-profile` turns it on (an optional value would
        # swallow a following test path).
        switch = {"action": "store_const", "const": "on"} if name in SWITCH_OPTIONS else {}
        group.addoption(f"--bench-{name}", dest=f"bench_{name.replace('-', '_')}", default=None, help=help_text,
                        **switch)
    group.addoption("--bench-no-report", action="store_true", default=False,
                    help="do not write the table and charts at the end of the session")


def pytest_configure(config: pytest.Config) -> None:
    raw = {name: config.getoption(f"bench_{name.replace('-', '_')}") for name in OPTIONS}
    try:
        sweep = parse_sweep(raw, no_report=config.getoption("bench_no_report"), plan_only=config.option.collectonly)
        faults.check_spec()
        if sweep.gpu_name is not None:
            from fsdp_bench.analysis.duration import check_gpu_name

            check_gpu_name(sweep.gpu_name)
    except (CaseError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    try:
        state = BenchState.open(sweep)
    except SessionError as exc:
        raise pytest.UsageError(f"--bench-resume: {exc}") from None
    config.stash[_STATE_KEY] = state
    if sweep.resume is None and not config.option.collectonly:
        state.session.start_environment()  # its torch import overlaps collection; closed at unconfigure
    config.add_cleanup(sigterm_as_interrupt())


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, None)
    if state is not None:
        state.session.close()  # the run folder's lock, and the rendezvous store if this node hosted one


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "bench_case" not in metafunc.fixturenames:
        return
    sweep = metafunc.config.stash[_STATE_KEY].sweep
    customize = getattr(metafunc.module, "bench_sweep", None)
    if customize is not None:
        sweep = customize(sweep)
    suite = getattr(metafunc.module, "BENCH_SUITE", None)
    try:
        cases = sweep.suite_cases(suite) if suite else sweep.cases()
    except CaseError as exc:
        raise pytest.UsageError(str(exc)) from None
    if sweep.tune and not suite:  # one test per model runs the tuner (docs/autotune.md)
        from fsdp_bench.analysis.tune import tune_requests

        metafunc.parametrize("bench_case", [pytest.param(r, id=r.id) for r in tune_requests(cases)])
        return
    params = []
    for case in cases:
        reason = skip_reason(case)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("bench_case", params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--bench-suite NAME` keeps only that suite's module; without it, suite modules run only when
    their file is named on the command line, so `pytest benchmarks` stays the strategy sweep."""
    state = config.stash.get(_STATE_KEY, None)
    if state is None:
        return
    sweep = state.sweep
    keep, drop = [], []
    for item in items:
        if "bench_case" not in getattr(item, "fixturenames", ()):
            keep.append(item)
            continue
        suite = getattr(getattr(item, "module", None), "BENCH_SUITE", None)
        named = any(Path(arg.split("::")[0]).resolve() == Path(str(item.fspath)).resolve() for arg in config.args)
        (keep if sweep.runs_module(suite, named_on_command_line=named) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_NOT_TRAINED = {"before_shard": "optimizer built before sharding: parameters never changed"}


def _cases_to_run(items: list[pytest.Item]) -> list[Case]:
    """The collected cases that will launch (collection-time skips excluded; a tuning item
    counts its whole grid, what the full sweep would cost)."""
    params = [item.callspec.params["bench_case"] for item in items
              if "bench_case" in getattr(item, "fixturenames", ()) and item.get_closest_marker("skip") is None
              and hasattr(item, "callspec") and "bench_case" in item.callspec.params]
    return [case for p in params for case in (p.cases if isinstance(p, TuneRequest) else (p,))]


def pytest_collection_finish(session: pytest.Session) -> None:
    """How many cases will run, for the [i/N] progress lines; the duration estimate (also with
    --collect-only, to plan a sweep), and the slow-CPU guard that stops the sweep before its
    first case."""
    from fsdp_bench.analysis.duration import estimate_gpu_name, estimate_line, estimate_sweep, slow_cpu_line

    config = session.config
    state = config.stash.get(_STATE_KEY, None)
    cases = _cases_to_run(session.items)
    if state is None:
        return
    state.progress.total = 0 if state.sweep.tune else len(cases)  # a tuning's count is not known ahead
    if not cases:
        return
    sweep = state.sweep
    estimate = estimate_sweep(cases, repeats=sweep.repeats, gpu_name=estimate_gpu_name(sweep.gpu_name, cases))
    refusal = None if sweep.allow_slow_cpu else slow_cpu_line(estimate)
    if refusal is not None and not config.option.collectonly:
        raise pytest.UsageError(refusal)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(estimate_line(estimate))
        if refusal is not None:  # --collect-only launches nothing; say what a run would do
            reporter.write_line(f"{refusal} (when run without --collect-only)")


def _write_live(config: pytest.Config, line: str) -> None:
    write_live_line(config.pluginmanager.get_plugin("terminalreporter"),
                    config.pluginmanager.get_plugin("capturemanager"), line)


@pytest.hookimpl(wrapper=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    """Without -v, a case whose [i/N] line is already on screen prints no progress letter after
    it (a lone `.` under each line); the outcome still counts, and -v still shows PASSED."""
    category, letter, word = yield
    state = config.stash.get(_STATE_KEY, None)
    shown = state.progress.shown if state is not None else set()
    if report.when == "call" and report.nodeid in shown and config.get_verbosity() <= 0:
        return category, "", word
    return category, letter, word


@pytest.fixture
def bench_run(request: pytest.FixtureRequest, benchmark: Any):
    """Run a case in its own torchrun, record its timings, and turn its status into the test's."""

    def _run(case: Case) -> dict[str, Any]:
        config = request.config
        state = config.stash[_STATE_KEY]
        opening = state.opening_line()
        if opening:
            _write_live(config, opening)
        if state.sweep.tune:
            return _run_tune(config, state, case)
        try:
            result = state.session.run(case)
        except DiskFull as exc:  # stop the sweep cleanly; the finished cases stay, resumable
            state.interrupted = True
            pytest.exit(f"fsdp-bench: {exc}", returncode=3)
        except SessionError as exc:
            raise pytest.UsageError(str(exc)) from None
        line = state.progress.finish_case(request.node.nodeid, case.id, result)
        if line:
            _write_live(config, line)
        record_benchmark_stats(benchmark, case, result)
        status, reason = result["status"], result.get("reason", "")
        if status == "skipped":
            pytest.skip(reason)
        if status == "oom":
            pytest.xfail(f"OOM: {reason}")
        if status != "ok":
            tail = result.get("log_tail", "")[-1500:]
            pytest.fail(f"{status.upper()}: {reason}\n--- log tail ---\n{tail}", pytrace=False)
        if (result.get("metrics") or {}).get(M.params_changed) is False:
            # It ran, but did not train: its speed must not read as a pass a user could pick.
            pytest.xfail(_NOT_TRAINED.get(case.optimizer_timing, "parameters never changed"))
        return result

    return _run


def _run_tune(config: pytest.Config, state: BenchState, request: Any) -> dict[str, Any]:
    """A `--bench-tune` item: the tuner's loop (fsdp_bench.launch.tune), one live line per case."""
    from fsdp_bench.launch.tune import TuneError, answer_lines, run_tune

    def on_result(case: Case, result: dict[str, Any]) -> None:
        line = state.progress.finish_case(f"{request.id}::{case.id}", case.id, result)
        if line:
            _write_live(config, line)

    sweep = state.sweep
    try:
        answer = run_tune(state.session, request, budget_gib=sweep.budget_gib, max_repeats=sweep.repeats,
                          time_budget_s=sweep.tune_time_s, on_result=on_result)
    except DiskFull as exc:
        state.interrupted = True
        pytest.exit(f"fsdp-bench: {exc}", returncode=3)
    except (SessionError, TuneError) as exc:
        raise pytest.UsageError(str(exc)) from None
    for line in answer_lines(answer):
        _write_live(config, line)
    if answer["pick"] is None:
        pytest.fail(f"tune {request.model}: no pick ({answer['stopped']})", pytrace=False)
    return answer


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, None)
    if state is None or state.session.run_dir is None:
        return
    state.interrupted |= exitstatus == pytest.ExitCode.INTERRUPTED  # Ctrl-C or SIGTERM
    session = state.session
    terminalreporter.write_sep("-", "fsdp-bench")
    terminalreporter.write_line(f"results: {session.run_dir}")
    if not session.launch.owns_results:
        terminalreporter.write_line(f"node {session.launch.node_rank}: logs under "
                                    f"{session.layout.node_root(session.launch.node_rank)}; "
                                    "node 0 writes the results and the report")
        return
    hint = state.resume_hint()
    if hint:
        terminalreporter.write_line(hint)
    if not state.sweep.report:
        return
    from fsdp_bench.report.terminal import report_lines

    try:
        lines = report_lines(session.run_dir, session.results)
    except KeyboardInterrupt:
        # Ctrl-C while charts are drawn: every file is written atomically, so nothing is
        # half-written; say how to finish instead of a traceback, and exit as interrupted.
        pytest.exit(f"report interrupted; the results are safe. To write it: "
                    f"python visualize.py {session.run_dir}", returncode=pytest.ExitCode.INTERRUPTED)
    for line in lines:
        terminalreporter.write_line(line)
