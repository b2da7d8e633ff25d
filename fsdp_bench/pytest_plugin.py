"""pytest integration: `--bench-*` options, one parametrized test per case, the pytest-benchmark
bridge, and the table and charts at the end of the session.

Collection imports no torch: cases come from `fsdp_bench.plan`, which is pure Python.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fsdp_bench.launch.session import DiskFull, SessionError, SweepSession
from fsdp_bench.plan import faults
from fsdp_bench.plan.case import Case, CaseError, skip_reason
from fsdp_bench.plan.options import OPTIONS, SWITCH_OPTIONS, Sweep, parse_sweep

_SWEEP_KEY = pytest.StashKey[Sweep]()
_SESSION_KEY = pytest.StashKey[SweepSession]()
_PROGRESS_KEY = pytest.StashKey[dict]()
_INTERRUPTED: list[bool] = []  # set by pytest_keyboard_interrupt (Ctrl-C or SIGTERM)


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
    _INTERRUPTED.clear()
    raw = {name: config.getoption(f"bench_{name.replace('-', '_')}") for name in OPTIONS}
    try:
        sweep = parse_sweep(raw, no_report=config.getoption("bench_no_report"), plan_only=config.option.collectonly)
        faults.check_spec()
        if sweep.gpu_name is not None:
            from fsdp_bench.analysis.duration import check_gpu_name

            check_gpu_name(sweep.gpu_name)
    except (CaseError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    session = SweepSession(sweep)
    if sweep.resume is not None:
        try:
            session.lock_run_dir(sweep.resume)  # before any case: a busy run is a usage error
            session.check_no_live_ranks(sweep.resume)
            session.check_same_settings(sweep.resume)
        except SessionError as exc:
            session.unlock_run_dir()
            raise pytest.UsageError(f"--bench-resume: {exc}") from None
    config.stash[_SWEEP_KEY] = sweep
    config.stash[_SESSION_KEY] = session
    if sweep.resume is None and not config.option.collectonly:
        session.start_environment()  # its torch import overlaps collection; closed at unconfigure
    _sigterm_as_interrupt(config)


def _sigterm_as_interrupt(config: pytest.Config) -> None:
    """SIGTERM to pytest (a scheduler, `kill`) ends the sweep like Ctrl-C: Python's default
    would exit on the spot and orphan the running case's processes; KeyboardInterrupt unwinds
    through the runner, which stops them. Restored at unconfigure."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def _interrupt(signum, frame):
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    signal.signal(signal.SIGTERM, _interrupt)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, previous))


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is not None:
        session.close()  # the run folder's lock, and the rendezvous store if this node hosted one


def pytest_keyboard_interrupt(excinfo: Any) -> None:
    _INTERRUPTED.append(True)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "bench_case" not in metafunc.fixturenames:
        return
    sweep = metafunc.config.stash[_SWEEP_KEY]
    customize = getattr(metafunc.module, "bench_sweep", None)
    if customize is not None:
        sweep = customize(sweep)
    suite = getattr(metafunc.module, "BENCH_SUITE", None)
    try:
        cases = sweep.suite_cases(suite) if suite else sweep.cases()
    except CaseError as exc:
        raise pytest.UsageError(str(exc)) from None
    params = []
    for case in cases:
        reason = skip_reason(case)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("bench_case", params)


def _module_suite(item: pytest.Item) -> str | None:
    return getattr(getattr(item, "module", None), "BENCH_SUITE", None)


def _named_on_command_line(config: pytest.Config, item: pytest.Item) -> bool:
    path = Path(str(item.fspath)).resolve()
    for arg in config.args:
        target = Path(arg.split("::")[0]).resolve()
        if target == path:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--bench-suite NAME` keeps only that suite's module; without it, suite modules run only when
    their file is named on the command line, so `pytest benchmarks` stays the strategy sweep."""
    sweep = config.stash.get(_SWEEP_KEY, None)
    if sweep is None:
        return
    keep, drop = [], []
    for item in items:
        if "bench_case" not in getattr(item, "fixturenames", ()):
            keep.append(item)
            continue
        suite = _module_suite(item)
        if sweep.suite is not None:
            wanted = suite == sweep.suite
        else:
            wanted = suite is None or _named_on_command_line(config, item)
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def record_benchmark_stats(benchmark: Any, case: Case, result: dict[str, Any]) -> None:
    """Feed the case's measured per-step times to pytest-benchmark, so --benchmark-json,
    --benchmark-autosave and `pytest-benchmark compare` see real step times, not a re-timing
    of the parent waiting on torchrun."""
    from fsdp_bench.analysis.repeats import pooled_step_times

    times = pooled_step_times(result)  # every repeat's, with --bench-repeats
    benchmark.extra_info.update(
        {"case_id": case.id, **case.to_dict(),
         **{k: v for k, v in (result.get("metrics") or {}).items() if isinstance(v, (int, float, str, bool))}}
    )
    if not times or not benchmark.enabled:
        benchmark.skipped = True  # nothing to time; silences "fixture was not used"
        return
    # Like for like: only cases doing the same work per optimizer step are compared.
    tokens = case.batch_size * case.grad_accum * case.nproc * case.seq_len
    benchmark.group = f"{case.model} sl{case.seq_len} tok{tokens} {case.precision}"
    # pytest-benchmark has no public API for externally measured times; _make_stats is what
    # its own pedantic mode uses. tests/test_plugin.py checks the JSON it produces.
    stats = benchmark._make_stats(1)
    benchmark._mode = "fsdp-bench(external timings)"
    for t in times:
        stats.update(t)


_NOT_TRAINED = {"before_shard": "optimizer built before sharding: parameters never changed"}


def _cases_to_run(items: list[pytest.Item]) -> list[Case]:
    """The collected cases that will launch (collection-time skips excluded)."""
    return [item.callspec.params["bench_case"] for item in items
            if "bench_case" in getattr(item, "fixturenames", ()) and item.get_closest_marker("skip") is None
            and hasattr(item, "callspec") and "bench_case" in item.callspec.params]


def pytest_collection_finish(session: pytest.Session) -> None:
    """How many cases will run, for the [i/N] progress lines; the duration estimate (also with
    --collect-only, to plan a sweep), and the slow-CPU guard that stops the sweep before its
    first case."""
    from fsdp_bench.analysis.duration import estimate_line, estimate_sweep, slow_cpu_line

    config = session.config
    cases = _cases_to_run(session.items)
    config.stash[_PROGRESS_KEY] = {"total": len(cases), "done": 0, "start": None}
    sweep = config.stash.get(_SWEEP_KEY, None)
    if not cases or sweep is None:
        return
    estimate = estimate_sweep(cases, repeats=sweep.repeats, gpu_name=_estimate_gpu(sweep, cases))
    refusal = None if sweep.allow_slow_cpu else slow_cpu_line(estimate)
    if refusal is not None and not config.option.collectonly:
        raise pytest.UsageError(refusal)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(estimate_line(estimate))
        if refusal is not None:  # --collect-only launches nothing; say what a run would do
            reporter.write_line(f"{refusal} (when run without --collect-only)")


def _estimate_gpu(sweep: Sweep, cases: list[Case]) -> str:
    """Whose published figures estimate the CUDA cases: --bench-gpu-name, else the visible GPU
    when the peak table knows it, else the default (H100 SXM). nvidia-smi runs only for CUDA cases."""
    from fsdp_bench.analysis.duration import DEFAULT_GPU_NAME, check_gpu_name
    from fsdp_bench.plan.options import visible_gpu_name

    if sweep.gpu_name is not None:
        return sweep.gpu_name  # checked at configure
    if not any(case.device == "cuda" for case in cases):
        return DEFAULT_GPU_NAME
    seen = visible_gpu_name()
    try:
        return check_gpu_name(seen) if seen else DEFAULT_GPU_NAME
    except ValueError:  # a GPU the table lacks: its estimate uses the default's figures
        return DEFAULT_GPU_NAME


def progress_line(i: int, total: int, case_id: str, result: dict[str, Any], elapsed_s: float) -> str:
    """`[i/N] case-id  status  step 0.123 s  1,234 tok/s/dev  peak 0.05 GiB  elapsed 1m02s  ETA 3m10s`."""
    from fsdp_bench.analysis.duration import format_duration
    from fsdp_bench.analysis.stats import NOISY_CV_PCT

    metrics = result.get("metrics") or {}
    status = result.get("status", "?")
    if status == "ok" and metrics.get("params_changed") is False:
        status = "ok(not trained)"
    parts = [f"[{i}/{total}] {case_id}", status]
    if result.get("status") == "ok":
        if isinstance(metrics.get("step_time_s_median"), (int, float)):
            parts.append(f"step {metrics['step_time_s_median']:.3f} s")
        if isinstance(metrics.get("tokens_per_s_per_device"), (int, float)):
            parts.append(f"{metrics['tokens_per_s_per_device']:,.0f} tok/s/dev")
        peak = next((metrics[k] for k in ("peak_reserved_gib", "peak_allocated_gib", "peak_rss_gib")
                     if isinstance(metrics.get(k), (int, float))), None)
        if peak is not None:
            parts.append(f"peak {peak:.2f} GiB" if peak >= 0.1 else f"peak {peak * 1024:.1f} MiB")
        cv = metrics.get("step_time_cv_pct")
        if isinstance(cv, (int, float)) and cv > NOISY_CV_PCT:
            parts.append(f"NOISY (CV {cv:.0f}%)")
        spread = metrics.get("repeat_spread_pct")
        if isinstance(spread, (int, float)):
            parts.append(f"{metrics.get('repeats')} repeats, medians spread {spread:.0f}%")
    parts.append(f"elapsed {format_duration(elapsed_s)}")
    if i < total:
        parts.append(f"ETA {format_duration(elapsed_s / i * (total - i))}")
    return "  ".join(parts)


_LIVE_KEY = pytest.StashKey[set]()  # node ids whose outcome the live [i/N] line already showed


def _write_line_keeping_file(reporter: Any, line: str) -> None:
    """`line` on a line of its own, without making pytest reprint the module's name before the
    next test (`write_line` forgets the current file, so the name came back after every line)."""
    current = reporter.currentfspath
    if reporter._tw.width_of_current_line:
        reporter._tw.line()
    reporter._tw.line(line)
    reporter.currentfspath = current


def _write_live(config: pytest.Config, line: str) -> None:
    """A line on the terminal now, from inside a test (output capture suspended for it)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        _write_line_keeping_file(reporter, line)
        return
    with capture.global_and_fixture_disabled():
        _write_line_keeping_file(reporter, line)


@pytest.hookimpl(wrapper=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    """Without -v, a case whose [i/N] line is already on screen prints no progress letter after
    it (a lone `.` under each line); the outcome still counts, and -v still shows PASSED."""
    category, letter, word = yield
    shown = config.stash.get(_LIVE_KEY, set())
    if report.when == "call" and report.nodeid in shown and config.get_verbosity() <= 0:
        return category, "", word
    return category, letter, word


def _report_progress(config: pytest.Config, node_id: str, case: Case, result: dict[str, Any]) -> None:
    progress = config.stash.get(_PROGRESS_KEY, None)
    if progress is None or progress["start"] is None:
        return
    progress["done"] += 1
    total = max(progress["total"], progress["done"])
    config.stash.setdefault(_LIVE_KEY, set()).add(node_id)
    _write_live(config, progress_line(progress["done"], total, case.id, result, time.monotonic() - progress["start"]))


def _start_progress(config: pytest.Config, session: SweepSession) -> None:
    progress = config.stash.get(_PROGRESS_KEY, None)
    if progress is None or progress["start"] is not None:
        return
    progress["start"] = time.monotonic()
    if session.launch.owns_results:
        _write_live(config, f"fsdp-bench: {progress['total']} case(s); run folder {session.ensure_run_dir()}")


@pytest.fixture
def bench_run(request: pytest.FixtureRequest, benchmark: Any):
    """Run a case in its own torchrun, record its timings, and turn its status into the test's."""

    def _run(case: Case) -> dict[str, Any]:
        session = request.config.stash[_SESSION_KEY]
        _start_progress(request.config, session)
        try:
            result = session.run(case)
        except DiskFull as exc:  # stop the sweep cleanly; the finished cases stay, resumable
            _INTERRUPTED.append(True)
            pytest.exit(f"fsdp-bench: {exc}", returncode=3)
        except SessionError as exc:
            raise pytest.UsageError(str(exc)) from None
        _report_progress(request.config, request.node.nodeid, case, result)
        record_benchmark_stats(benchmark, case, result)
        status, reason = result["status"], result.get("reason", "")
        if status == "skipped":
            pytest.skip(reason)
        if status == "oom":
            pytest.xfail(f"OOM: {reason}")
        if status != "ok":
            tail = result.get("log_tail", "")[-1500:]
            pytest.fail(f"{status.upper()}: {reason}\n--- log tail ---\n{tail}", pytrace=False)
        if (result.get("metrics") or {}).get("params_changed") is False:
            # It ran, but did not train: its speed must not read as a pass a user could pick.
            pytest.xfail(_NOT_TRAINED.get(case.optimizer_timing, "parameters never changed"))
        return result

    return _run


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or session.run_dir is None:
        return
    terminalreporter.write_sep("-", "fsdp-bench")
    terminalreporter.write_line(f"results: {session.run_dir}")
    if not session.launch.owns_results:
        terminalreporter.write_line(f"node {session.launch.node_rank}: logs under "
                                    f"{session.layout.node_root(session.launch.node_rank)}; "
                                    "node 0 writes the results and the report")
        return
    not_ok = sum(r.get("status") not in ("ok", "skipped") for r in session.results)
    if _INTERRUPTED or not_ok:
        why = "interrupted" if _INTERRUPTED else f"{not_ok} case(s) not ok"
        terminalreporter.write_line(f"{why}; to finish this run (ok cases are kept, the rest re-run): "
                                    f"pytest benchmarks --bench-resume {session.run_dir} [same --bench-* options]")
    if session.sweep.report:
        from fsdp_bench.report.writer import write_report

        try:
            written, notes = write_report(session.run_dir)
        except KeyboardInterrupt:
            # Ctrl-C while charts are drawn: every file is written atomically, so nothing is
            # half-written; say how to finish instead of a traceback, and exit as interrupted.
            pytest.exit(f"report interrupted; the results are safe. To write it: "
                        f"python visualize.py {session.run_dir}", returncode=pytest.ExitCode.INTERRUPTED)
        except Exception as exc:  # the results are safe on disk; say why the charts are not
            terminalreporter.write_line(f"report not written: {type(exc).__name__}: {exc}")
            return
        for note in notes:
            terminalreporter.write_line(f"note: {note}")
        for suite, scaled in sorted({(r["case"].get("suite"), r["case"].get("scaled_down"))
                                     for r in session.results if r.get("case", {}).get("scaled_down")}):
            terminalreporter.write_line(f"note: suite {suite} ran scaled down ({scaled})")
        terminalreporter.write_line(f"table and charts: {', '.join(p.name for p in written)}")
        for line in sweep_summary_lines(session.results):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"report: {session.run_dir / 'report.md'}")


def sweep_summary_lines(results: list[dict[str, Any]]) -> list[str]:
    """The end of a sweep in a few lines: cases by status, the fastest trained case per group of
    like-for-like cases, and the recommendation."""
    from collections import Counter

    from fsdp_bench.report.cost import time_line
    from fsdp_bench.report.recommend import recommendation_lines
    from fsdp_bench.report.table import build_table

    counts = Counter(r.get("status") for r in results)
    lines = ["cases: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda x: str(x[0])))]
    df = build_table(results)
    if "is_best" in df:
        for _, row in df[df["is_best"] == True].iterrows():  # noqa: E712
            lines.append(f"best of {row['compare_group']}: {row['case_id']} "
                         f"({row['tokens_per_s_per_device']:,.0f} tok/s/dev)")
    untrained = df[(df["status"] == "ok") & (df["trained"] == False)] if "trained" in df else df.iloc[0:0]  # noqa: E712
    if len(untrained):
        lines.append(f"not trained (never ranked): {', '.join(untrained['case_id'])}")
    spent = time_line(df)
    return lines + ([spent] if spent else []) + recommendation_lines(df)
