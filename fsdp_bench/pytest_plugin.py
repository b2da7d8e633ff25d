"""pytest integration: `--bench-*` options, one parametrized test per case, the pytest-benchmark
bridge, and the table and charts at the end of the session.

Collection imports no torch: cases come from `fsdp_bench.options`, which is pure Python.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from fsdp_bench import faults
from fsdp_bench.case import Case, CaseError, skip_reason
from fsdp_bench.options import OPTIONS, SWITCH_OPTIONS, Sweep, parse_sweep
from fsdp_bench.results import create_run_dir, load_case_result, case_result_path, ResultError

_SWEEP_KEY = pytest.StashKey[Sweep]()
_SESSION_KEY = pytest.StashKey["BenchSession"]()
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
        sweep = parse_sweep(raw, no_report=config.getoption("bench_no_report"))
        faults.check_spec()
    except (CaseError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    session = BenchSession(sweep, config)
    if sweep.resume is not None:
        try:
            session.lock_run_dir(sweep.resume)  # before any case: a busy run is a usage error
        except RunBusy as exc:
            raise pytest.UsageError(f"--bench-resume: {exc}") from None
    config.stash[_SWEEP_KEY] = sweep
    config.stash[_SESSION_KEY] = session
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
        session.close()  # the multi-node rendezvous store, if this node hosted one
        session.unlock_run_dir()


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
    cases = sweep.suite_cases(suite) if suite else sweep.cases()
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


class RunBusy(Exception):
    """Another live sweep holds the run folder."""


class BenchSession:
    """The run folder of this pytest session, created when the first case runs, and locked
    (flock on RUN/.lock) while this session lives, so a second `--bench-resume` of a run still
    in progress is refused instead of racing it."""

    def __init__(self, sweep: Sweep, config: pytest.Config) -> None:
        self.sweep = sweep
        self.config = config
        self.run_dir: Path | None = None
        self.results: list[dict[str, Any]] = []
        self.launch = sweep.launch()
        self.store = None  # node 0's rendezvous store process in a multi-node sweep
        self._lock_fd: int | None = None

    def lock_run_dir(self, run_dir: Path) -> None:
        import fcntl

        fd = os.open(Path(run_dir) / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunBusy(f"{run_dir} is in use by another running sweep (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def unlock_run_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def ensure_run_dir(self) -> Path:
        if self.run_dir is None:
            from fsdp_bench.environment import write_environment
            from fsdp_bench.multinode import node_dir
            from fsdp_bench.runner import PROJECT_ROOT, build_env, start_rendezvous_store

            if self.launch.multi_node and self.launch.owns_results:
                # first, so that faster nodes find the rendezvous store as early as possible
                self.store = start_rendezvous_store(self.launch)
            if self.sweep.resume is not None:
                self.run_dir = self.sweep.resume
            elif self.sweep.run_id is not None:
                self.run_dir = _named_run_dir(self.sweep.results_dir / self.sweep.run_id, self.launch.owns_results)
                write_environment(node_dir(self.run_dir, self.launch.node_rank), PROJECT_ROOT, env=build_env())
            else:
                self.run_dir = create_run_dir(self.sweep.results_dir)
                self.lock_run_dir(self.run_dir)
                write_environment(self.run_dir, PROJECT_ROOT, env=build_env())
        return self.run_dir

    def close(self) -> None:
        if self.store is not None:
            from fsdp_bench.runner import stop_rendezvous_store

            stop_rendezvous_store(self.store)
            self.store = None

    def run(self, case: Case) -> dict[str, Any]:
        from fsdp_bench.runner import run_case

        run_dir = self.ensure_run_dir()
        if not self.launch.owns_results:  # node R > 0: no merged results, no resume; just run in step
            result = run_case(case, run_dir, timeout_s=self.sweep.timeout_s, grace_s=self.sweep.kill_grace_s,
                              launch=self.launch)
            self.results.append(result)
            return result
        previous = self._previous_result(run_dir, case)
        if previous is not None and previous["status"] == "ok":
            result = previous  # resumed: an ok case is never re-run
        else:
            if previous is not None:
                _set_aside(run_dir, case.id)
            result = run_case(case, run_dir, timeout_s=self.sweep.timeout_s, grace_s=self.sweep.kill_grace_s,
                              launch=self.launch)
        self.results.append(result)
        return result

    @staticmethod
    def _previous_result(run_dir: Path, case: Case) -> dict[str, Any] | None:
        path = case_result_path(run_dir, case.id)
        if not path.exists():
            if (run_dir / "cases" / case.id).exists():
                _set_aside(run_dir, case.id)  # an interrupted attempt without a result
            return None
        try:
            return load_case_result(path)
        except ResultError:
            return {"status": "failed"}


def _named_run_dir(path: Path, owner: bool) -> Path:
    """The run folder every node names alike (--bench-run-id). Node 0 makes its cases/ and
    refuses one that already holds results; other nodes only make their node folder."""
    path.mkdir(parents=True, exist_ok=True)
    if owner:
        try:
            (path / "cases").mkdir()
        except FileExistsError:
            raise pytest.UsageError(f"--bench-run-id: {path} already holds results; choose a new run id "
                                    f"or continue it with --bench-resume {path}") from None
    return path


def _set_aside(run_dir: Path, case_id: str) -> None:
    """Keep an earlier non-ok attempt under cases/.attempts/ instead of overwriting it."""
    attempts = run_dir / "cases" / ".attempts"
    attempts.mkdir(exist_ok=True)
    n = 1
    while (attempts / f"{case_id}.{n}").exists():
        n += 1
    dest = attempts / f"{case_id}.{n}"
    dest.mkdir()
    for src in (run_dir / "cases" / case_id, case_result_path(run_dir, case_id)):
        if src.exists():
            shutil.move(str(src), str(dest / src.name))


def record_benchmark_stats(benchmark: Any, case: Case, result: dict[str, Any]) -> None:
    """Feed the case's measured per-step times to pytest-benchmark, so --benchmark-json,
    --benchmark-autosave and `pytest-benchmark compare` see real step times, not a re-timing
    of the parent waiting on torchrun."""
    from fsdp_bench.metrics import slowest_rank_step_times

    times = slowest_rank_step_times(r["step_times_s"] for r in result["ranks"] if r.get("step_times_s"))
    benchmark.extra_info.update(
        {"case_id": case.id, **case.to_dict(),
         **{k: v for k, v in (result.get("metrics") or {}).items() if isinstance(v, (int, float, str, bool))}}
    )
    if not times or not benchmark.enabled:
        benchmark.skipped = True  # nothing to time; silences "fixture was not used"
        return
    benchmark.group = f"{case.model} ws{case.nproc}"
    # pytest-benchmark has no public API for externally measured times; _make_stats is what
    # its own pedantic mode uses. tests/test_plugin.py checks the JSON it produces.
    stats = benchmark._make_stats(1)
    benchmark._mode = "fsdp-bench(external timings)"
    for t in times:
        stats.update(t)


@pytest.fixture
def bench_run(request: pytest.FixtureRequest, benchmark: Any):
    """Run a case in its own torchrun, record its timings, and turn its status into the test's."""

    def _run(case: Case) -> dict[str, Any]:
        session = request.config.stash[_SESSION_KEY]
        result = session.run(case)
        record_benchmark_stats(benchmark, case, result)
        status, reason = result["status"], result.get("reason", "")
        if status == "skipped":
            pytest.skip(reason)
        if status == "oom":
            pytest.xfail(f"OOM: {reason}")
        if status != "ok":
            tail = result.get("log_tail", "")[-1500:]
            pytest.fail(f"{status.upper()}: {reason}\n--- log tail ---\n{tail}", pytrace=False)
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
                                    f"{session.run_dir / 'nodes' / f'node-{session.launch.node_rank}'}; "
                                    "node 0 writes the results and the report")
        return
    not_ok = sum(r.get("status") not in ("ok", "skipped") for r in session.results)
    if _INTERRUPTED or not_ok:
        why = "interrupted" if _INTERRUPTED else f"{not_ok} case(s) not ok"
        terminalreporter.write_line(f"{why}; to finish this run (ok cases are kept, the rest re-run): "
                                    f"pytest benchmarks --bench-resume {session.run_dir} [same --bench-* options]")
    if session.sweep.report:
        from fsdp_bench.report import write_report

        try:
            written, notes = write_report(session.run_dir)
        except Exception as exc:  # the results are safe on disk; say why the charts are not
            terminalreporter.write_line(f"report not written: {type(exc).__name__}: {exc}")
            return
        for note in notes:
            terminalreporter.write_line(f"note: {note}")
        for suite, scaled in sorted({(r["case"].get("suite"), r["case"].get("scaled_down"))
                                     for r in session.results if r.get("case", {}).get("scaled_down")}):
            terminalreporter.write_line(f"note: suite {suite} ran scaled down ({scaled})")
        terminalreporter.write_line(f"table and charts: {', '.join(p.name for p in written)}")
