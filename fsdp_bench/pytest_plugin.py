"""pytest integration, hooks only: `--bench-*` options, one parametrized test per case, the
pytest-benchmark bridge, and the report at the end of the session. What the hooks share lives in
`fsdp_bench.launch.progress.BenchState`; what one item does in `fsdp_bench.launch.item`; the
terminal's closing lines in `fsdp_bench.report.terminal`.

Collection imports no torch: cases come from `fsdp_bench.plan`, which is pure Python.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

import pytest

from fsdp_bench.launch import progress
from fsdp_bench.launch.parallel_pytest import is_bench_node_id, is_xdist_worker, refusal_line, xdist_workers
from fsdp_bench.launch.progress import BenchState
from fsdp_bench.launch.session import SessionError
from fsdp_bench.plan.case import Case, CaseError, skip_reason
from fsdp_bench.plan.options import OPTIONS, bench_option_specs, parse_sweep, unknown_option_line
from fsdp_bench.results.records import CaseResult, TuneAnswer

_STATE_KEY = pytest.StashKey[BenchState]()
_CLOSING_KEY = pytest.StashKey[list]()  # the recommendation and the run's place: the terminal's last lines
# pytest-benchmark's --benchmark-skip marks every test using its fixture skipped, every case here
BENCHMARK_SKIP_LINE = (
    "fsdp-bench: --benchmark-skip skips every case (each is a pytest-benchmark test), so nothing runs; "
    "drop it to run the sweep"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fsdp-bench", "fsdp-bench sweep (benchmarks/)")
    for flag, kwargs in bench_option_specs():
        group.addoption(flag, **kwargs)
    _suggest_bench_options(parser)


def _suggest_bench_options(parser: pytest.Parser) -> None:
    """A misspelled `--bench-*` option is one line naming the closest one. pytest parses the
    command line after this plugin is loaded and calls no hook on a parse error, so the parser's
    own parse is wrapped; other errors pass through as pytest words them."""
    parse = parser.parse

    def parse_suggesting(*args: Any, **kwargs: Any) -> Any:
        try:
            return parse(*args, **kwargs)
        except pytest.UsageError as exc:
            line = unknown_option_line(str(exc))
            if line is None:
                raise
            raise pytest.UsageError(line) from None

    parser.parse = parse_suggesting  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    raw = {name: config.getoption(f"bench_{name.replace('-', '_')}") for name in OPTIONS}
    try:
        sweep = parse_sweep(
            raw,
            no_report=config.getoption("bench_no_report"),
            plan_only=config.option.collectonly,
            root=config.rootpath,
        )
        progress.check_inputs(sweep)
    except (CaseError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    worker = is_xdist_worker(config)  # refused before any case (launch.parallel_pytest)
    try:
        state = BenchState.open(sweep, check_resume=not worker)
    except SessionError as exc:
        raise pytest.UsageError(f"--bench-resume: {exc}") from None
    config.stash[_STATE_KEY] = state
    state.invocation = progress.invocation_words(sys.argv[0], config.invocation_params.args)
    if not config.pluginmanager.hasplugin("benchmark"):
        config.pluginmanager.register(_NoBenchmark(), "fsdp-bench-no-benchmark")
    if not config.getoption("bench_benchmark_table") and hasattr(config.option, "benchmark_quiet"):
        # pytest-benchmark's own tables (read when its trylast configure builds its session)
        # are 200+ columns wide and would bury the recommendation; --bench-benchmark-table
        # (or --benchmark-verbose) brings them back. --benchmark-json / compare are unaffected.
        config.option.benchmark_quiet = True
    if not (config.option.collectonly or worker):
        # Its torch import overlaps collection; its facts are the preflight's interpreter check
        # and calibration, and (in a new run) env.json. Closed at unconfigure.
        state.session.start_environment()
    config.add_cleanup(progress.sigterm_as_interrupt())


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

        params = [
            pytest.param(r, id=r.id, marks=[] if r.cases else [pytest.mark.skip(reason=r.skipped[0].reason)])
            for r in tune_requests(cases)
        ]
        metafunc.parametrize("bench_case", params)
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
    keep, drop = progress.split_items(state.sweep, items, config.args)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """How many cases will run, for the [i/N] progress lines; then, before any case launches,
    the preflight (launch.preflight): the workers' interpreter imports torch (and sees a GPU for
    CUDA), the calibrated duration estimate (also with --collect-only, to plan a sweep), and the
    slow-CPU and host-memory guards. A refusal is a usage error: one line, no run folder."""
    from fsdp_bench.launch.preflight import run_preflight

    config = session.config
    state = config.stash.get(_STATE_KEY, None)
    if state is None:
        return
    cases = progress.cases_to_run(session.items)
    state.progress.total = 0 if state.sweep.tune else len(cases)  # a tuning's count is not known ahead
    if not cases and config.getoption("benchmark_skip", False) and progress.cases_skipped(session.items):
        _write_line(config, BENCHMARK_SKIP_LINE)
    elif not (cases or config.option.collectonly):  # said last, where pytest says only "N skipped"
        state.skip_reasons = progress.skip_reasons(session.items)
    if not cases or is_xdist_worker(config):
        return
    skipped = progress.cases_skipped(session.items)
    preflight = run_preflight(state.session, cases, collect_only=config.option.collectonly, skipped=skipped)
    if preflight.refusal is not None:
        raise pytest.UsageError(preflight.refusal)
    for line in preflight.lines:
        _write_line(config, line)
    if not (config.option.collectonly or state.sweep.tune):
        state.plan_repeats(cases, partial(progress.write_live_line, config.pluginmanager))


def _write_line(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist's controller, once a worker has collected: a sweep under `-n` stops here, one line,
    before any case launches (launch.parallel_pytest); the project's own tests pass."""
    if any(is_bench_node_id(node_id) for node_id in ids):
        pytest.exit(refusal_line(xdist_workers(node.config)), returncode=pytest.ExitCode.USAGE_ERROR)


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


class _NoBenchmark:
    """Under `-p no:benchmark` the sweep runs the same, without feeding pytest-benchmark: its
    `benchmark` fixture is None (launch.bench_stats). Otherwise bench_run asks for the real one,
    so --benchmark-only and --benchmark-skip see every case as a benchmark."""

    @pytest.fixture
    def benchmark(self) -> None:
        return None


@pytest.fixture
def bench_run(request: pytest.FixtureRequest, benchmark: Any):
    """Run a case in its own torchrun, record its timings, and turn its status into the test's
    (launch.item says which)."""
    from fsdp_bench.launch.item import run_item, stop_exit_code
    from fsdp_bench.launch.tune import TuneError

    def _run(case: Case) -> CaseResult | TuneAnswer:
        if is_xdist_worker(request.config):  # the controller exits first wherever it can tell
            pytest.fail(refusal_line(xdist_workers(request.config)), pytrace=False)
        state, write = request.config.stash[_STATE_KEY], partial(progress.write_live_line, request.config.pluginmanager)
        try:
            result, outcome = run_item(state, case, benchmark=benchmark, node_id=request.node.nodeid, write=write)
        except SessionError as exc:  # a full disk, an unusable run folder: one line, no further case
            pytest.exit(state.stop_line(exc), returncode=stop_exit_code(exc))
        except TuneError as exc:
            raise pytest.UsageError(str(exc)) from None
        if outcome is not None:
            kind, message = outcome
            {"skip": pytest.skip, "xfail": pytest.xfail, "fail": partial(pytest.fail, pytrace=False)}[kind](message)
        return result

    return _run


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, None)
    if state is None:
        return
    if state.session.run_dir is None:
        if state.skip_reasons:
            from fsdp_bench.report.terminal import no_case_line

            config.stash[_CLOSING_KEY] = [no_case_line(state.skip_reasons)]
        return
    state.interrupted |= exitstatus == pytest.ExitCode.INTERRUPTED  # Ctrl-C or SIGTERM
    terminalreporter.write_sep("-", "fsdp-bench")
    head, writes_report = state.summary_head()
    for line in head:
        terminalreporter.write_line(line)
    if not writes_report:
        return
    from fsdp_bench.report.terminal import report_sections, with_run_status

    run_dir, (partial_run, resume) = state.session.run_dir, state.run_status()
    try:
        body, closing = report_sections(
            run_dir,
            state.session.results,
            write=state.sweep.report,
            budget_gib=state.sweep.budget_gib,
            kept=state.session.kept,
        )
    except KeyboardInterrupt:
        # Ctrl-C while charts are drawn: every file is written atomically, so nothing is
        # half-written; say how to finish instead of a traceback, and exit as interrupted.
        finish = f"; {resume}" if resume else ""
        pytest.exit(
            f"report interrupted; the results are safe. To write it: python visualize.py {run_dir}{finish}",
            returncode=pytest.ExitCode.INTERRUPTED,
        )
    for line in body:
        terminalreporter.write_line(line)
    config.stash[_CLOSING_KEY] = with_run_status(closing, partial_run, resume)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    """Outermost, so after pytest's own closing `=== N passed in Xs ===`: the recommendation and
    where the run is are the last lines on the terminal."""
    result = yield
    for line in session.config.stash.get(_CLOSING_KEY, []):
        _write_line(session.config, line)
    return result
