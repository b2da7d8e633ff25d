"""pytest integration: `--bench-*` options, one parametrized test per case, the pytest-benchmark
bridge, and the table and charts at the end of the session.

Collection imports no torch: cases come from `fsdp_bench.options`, which is pure Python.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from fsdp_bench.case import Case, CaseError, skip_reason
from fsdp_bench.options import OPTIONS, SWITCH_OPTIONS, Sweep, parse_sweep
from fsdp_bench.results import create_run_dir, load_case_result, case_result_path, ResultError

_SWEEP_KEY = pytest.StashKey[Sweep]()
_SESSION_KEY = pytest.StashKey["BenchSession"]()


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
        sweep = parse_sweep(raw, no_report=config.getoption("bench_no_report"))
    except CaseError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SWEEP_KEY] = sweep
    config.stash[_SESSION_KEY] = BenchSession(sweep, config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "bench_case" not in metafunc.fixturenames:
        return
    sweep = metafunc.config.stash[_SWEEP_KEY]
    customize = getattr(metafunc.module, "bench_sweep", None)
    if customize is not None:
        sweep = customize(sweep)
    params = []
    for case in sweep.cases():
        reason = skip_reason(case)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("bench_case", params)


class BenchSession:
    """The run folder of this pytest session, created when the first case runs."""

    def __init__(self, sweep: Sweep, config: pytest.Config) -> None:
        self.sweep = sweep
        self.config = config
        self.run_dir: Path | None = None
        self.results: list[dict[str, Any]] = []

    def ensure_run_dir(self) -> Path:
        if self.run_dir is None:
            from fsdp_bench.environment import write_environment
            from fsdp_bench.runner import PROJECT_ROOT, build_env

            if self.sweep.resume is not None:
                self.run_dir = self.sweep.resume
            else:
                self.run_dir = create_run_dir(self.sweep.results_dir)
                write_environment(self.run_dir, PROJECT_ROOT, env=build_env())
        return self.run_dir

    def run(self, case: Case) -> dict[str, Any]:
        from fsdp_bench.runner import run_case

        run_dir = self.ensure_run_dir()
        previous = self._previous_result(run_dir, case)
        if previous is not None and previous["status"] == "ok":
            result = previous  # resumed: an ok case is never re-run
        else:
            if previous is not None:
                _set_aside(run_dir, case.id)
            result = run_case(case, run_dir, timeout_s=self.sweep.timeout_s)
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
    if session.sweep.report:
        from fsdp_bench.report import write_report

        try:
            written, notes = write_report(session.run_dir)
        except Exception as exc:  # the results are safe on disk; say why the charts are not
            terminalreporter.write_line(f"report not written: {type(exc).__name__}: {exc}")
            return
        for note in notes:
            terminalreporter.write_line(f"note: {note}")
        terminalreporter.write_line(f"table and charts: {', '.join(p.name for p in written)}")
