"""What the pytest plugin keeps between its hooks: the parsed sweep, its `SweepSession`, and the
progress of the live `[i/N]` lines (no pytest here: the plugin holds the hooks, this the state,
as pytest-benchmark keeps `plugin.py` and `session.py` apart)."""

from __future__ import annotations

import shlex
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdp_bench.analysis.busy import host_bound_detail
from fsdp_bench.analysis.duration import format_duration
from fsdp_bench.launch.session import DiskFull, SessionError, SweepSession
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.sweep import Sweep
from fsdp_bench.results.metrics import M, label
from fsdp_bench.results.records import CaseResult, Metrics
from fsdp_bench.results.stats import NOISY_CV_PCT
from fsdp_bench.results.trained import untrained_reason


@dataclass
class Progress:
    """How far the sweep is: cases done of those collected, since when, and which node ids
    already had their outcome printed on a live line. With repeats, the ETA counts launches
    (one per repeat; interleaved, the first case's line comes after most of the sweep's repeats):
    `launched` so far, and `launches_left` (the session's rounds) still to come. `kept`: cases a
    resume kept from the run folder, done in no time, so the ETA's time per case leaves them out."""

    total: int = 0
    done: int = 0
    kept: int = 0
    started: float | None = None
    shown: set[str] = field(default_factory=set)
    launched: int = 0
    launches_left: Callable[[], int | None] | None = None

    def start(self) -> bool:
        """True the first time (the caller then prints the sweep's opening line)."""
        if self.started is not None:
            return False
        self.started = time.monotonic()
        return True

    def finish_case(
        self, node_id: str, case_id: str, result: CaseResult, *, kept: bool = False, counter: str | None = None
    ) -> str | None:
        """The case's live line (None before the sweep started). A kept case's line says so and
        gives no time (it took none); `counter` replaces `i/N` (the tuner's, whose N is not known
        ahead), its lines without an ETA (the tuner's round lines give its own estimate)."""
        if self.started is None:
            return None
        self.done += 1
        self.kept += kept
        self.shown.add(node_id)
        total = max(self.total, self.done)
        if kept:
            return kept_line(counter or f"{self.done}/{total}", case_id, result)
        elapsed = time.monotonic() - self.started
        eta = 0.0 if counter else self._eta(elapsed, total)
        return progress_line(self.done, total, case_id, result, elapsed, eta_s=eta, counter=counter)

    def _eta(self, elapsed_s: float, total: int) -> float:
        """The cases left times the time per case launched in this session so far (with
        repeats: per launch, times the launches left); 0 (not shown) when nothing is left."""
        if self.done >= total:
            return 0.0
        by_launches = self._eta_by_launches(elapsed_s)
        if by_launches is not None:
            return by_launches
        ran = self.done - self.kept
        return elapsed_s / ran * (total - self.done) if ran else 0.0

    def finish_repeat(self, case_id: str, repeat: int, planned: int, result: CaseResult) -> str | None:
        """One launched repeat's live line (`[repeat r/N] case-id ...`), counted for the ETA."""
        self.launched += 1
        if self.started is None:
            return None
        elapsed = time.monotonic() - self.started
        eta = self._eta_by_launches(elapsed)
        line = progress_line(repeat, planned, case_id, result, elapsed, eta_s=eta or 0.0)
        return "[repeat " + line[1:]

    def _eta_by_launches(self, elapsed_s: float) -> float | None:
        """Elapsed time per launch so far times the launches left; None without repeats' rounds."""
        left = self.launches_left() if self.launches_left is not None else None
        if left is None or not self.launched:
            return None
        return elapsed_s / self.launched * left


@dataclass
class BenchState:
    """Everything the plugin's hooks share for one pytest session."""

    sweep: Sweep
    session: SweepSession
    progress: Progress = field(default_factory=Progress)
    interrupted: bool = False  # Ctrl-C, SIGTERM, or a full disk stopped the sweep
    stopped: str | None = None  # the one line a SessionError stopped the sweep with (the plugin printed it)
    invocation: tuple[str, ...] | None = None  # the command the user ran (invocation_words), for the resume hint
    skip_reasons: list[str] = field(default_factory=list)  # why each collected case was skipped before launch

    @classmethod
    def open(cls, sweep: Sweep, *, check_resume: bool = True) -> BenchState:
        """The session's state; with --bench-resume the run folder is locked and checked first
        (a busy run, live ranks or other settings: SessionError, before any case runs). An xdist
        worker, which runs no case, leaves that to the controller (`check_resume=False`)."""
        session = SweepSession(sweep)
        if sweep.resume is not None and check_resume:
            try:
                session.lock_run_dir(sweep.resume)
                session.check_no_live_ranks(sweep.resume)
                session.check_same_settings(sweep.resume)
            except SessionError:
                session.unlock_run_dir()
                raise
        return cls(sweep, session)

    def opening_line(self) -> str | None:
        if not self.progress.start() or not self.session.launch.owns_results:
            return None
        what = "tuning (cases measured as the rounds decide)" if self.sweep.tune else f"{self.progress.total} case(s)"
        return f"fsdp-bench: {what}; run folder {self.session.ensure_run_dir()}"

    def plan_repeats(self, cases: list[Case], write: Callable[[str], None]) -> None:
        """With --bench-repeats N > 1 the repeats run round-robin over the cases (launch.rounds):
        each launched repeat gets a live line through `write`, and the ETA counts launches left."""
        if self.sweep.repeats < 2:
            return
        self.session.plan_rounds(cases)
        self.progress.launches_left = self.session.launches_left

        def on_launch(case: Case, repeat: int | None, result: CaseResult) -> None:
            if repeat is not None:
                line = self.progress.finish_repeat(case.id, repeat, self.sweep.repeats, result)
                if line:
                    write(line)

        self.session.on_launch = on_launch

    def summary_head(self) -> tuple[list[str], bool]:
        """The terminal summary's first lines, and whether this node writes the report after them
        (not when the run folder is unusable, nor on a node other than 0)."""
        session = self.session
        try:
            session.check_run_dir()
        except SessionError as exc:  # nothing to report into: writing would re-create the folder
            return ([] if self.stopped else [f"no report: {exc}"]), False  # said once, not twice
        if not session.launch.owns_results:
            node = session.launch.node_rank
            return [
                f"results: {session.run_dir}",
                f"node {node}: logs under {session.layout.node_root(node)}; node 0 writes the results and the report",
            ], False
        return [], True

    def stop_line(self, exc: SessionError) -> str:
        """The one line a SessionError stops the sweep with. A full disk's ends with the command
        that resumes the run: pytest prints no summary (nor its closing lines) after that exit."""
        line = f"fsdp-bench: {exc}"
        if isinstance(exc, DiskFull):
            line += f": {resume_command(self.invocation, self.session.run_dir)}"
        return line

    def run_status(self) -> tuple[str | None, str | None]:
        """What the closing lines say of the run besides its answer: (`partial run: 1 of 4 case(s)
        ran, interrupted` when the sweep stopped before every planned case had a result, else
        None; the command that finishes the run when it stopped or a case is not ok, else None)."""
        results = self.session.results
        not_ok = sum(r.get("status") not in ("ok", "skipped") for r in results)
        done, total = len(results), self.progress.total
        why = "stopped" if self.stopped else "interrupted" if self.interrupted else "stopped early"
        partial = None
        if self.interrupted or done < total:
            kept = len(self.session.kept)
            if self.sweep.tune:  # how many cases a tuning measures is not known ahead
                partial = f"partial run: the tuning was {why} after {done} case(s) measured"
            elif kept:  # a kept case did not run in this session
                partial = f"partial run: {done} of {total} case(s) done ({kept} kept from the resumed run), {why}"
            else:
                partial = f"partial run: {done} of {total} case(s) ran, {why}"
        if partial is None and not not_ok:
            return None, None
        what = "" if partial else f"{not_ok} case(s) not ok; "
        if self.session.launch.multi_node:
            return partial, f"{what}--bench-resume is single-node only: run the missing cases in a new run"
        command = resume_command(self.invocation, self.session.run_dir)
        return partial, f"{what}to finish this run (ok cases are kept, the rest re-run): {command}"


# Options that name the run folder: a resume names it with --bench-resume alone (with
# --bench-run-id it is refused, plan.options), so both are dropped before it is added.
_RUN_FOLDER_OPTIONS = ("--bench-resume", "--bench-run-id")


def resume_command(invocation: Sequence[str] | None, run_dir: Path | None) -> str:
    """The command that finishes `run_dir`: the one the user ran (`invocation`: the program's
    words, then pytest's arguments as given), its selection (-k, paths, node ids) and options
    kept, so the resumed plan is the same cases; any --bench-resume / --bench-run-id replaced by
    `--bench-resume RUN`. Quoted for a POSIX shell."""
    if not invocation:
        invocation = ("pytest", "benchmarks")
    words, skip_value = [], False
    for word in invocation:
        if skip_value:
            skip_value = False
        elif word in _RUN_FOLDER_OPTIONS:
            skip_value = True
        elif not word.startswith(tuple(f"{o}=" for o in _RUN_FOLDER_OPTIONS)):
            words.append(word)
    return shlex.join([*words, "--bench-resume", str(run_dir)])


def invocation_words(argv0: str, args: Sequence[str]) -> tuple[str, ...]:
    """How the user started pytest (`pytest`, or `python -m pytest` where `argv0` is pytest's
    __main__.py), then its arguments."""
    program = ("python", "-m", "pytest") if Path(argv0).name == "__main__.py" else ("pytest",)
    return (*program, *args)


def progress_line(
    i: int,
    total: int,
    case_id: str,
    result: CaseResult,
    elapsed_s: float,
    *,
    eta_s: float | None = None,
    counter: str | None = None,
) -> str:
    """`[i/N] case-id  status  step 0.123 s  1,234 tok/s/dev  peak alloc 51.2 MiB  elapsed 1m02s  ETA 3m10s`.
    The ETA is `eta_s` when given (shown when > 0), else the elapsed time per case times the cases
    left. `counter` is shown in place of `i/N`."""
    parts = [f"[{counter or f'{i}/{total}'}] {case_id}", _status_word(result), *_result_parts(result)]
    parts.append(f"elapsed {format_duration(elapsed_s)}")
    if eta_s is None:
        eta_s = elapsed_s / i * (total - i) if i < total else 0.0
    if eta_s > 0:
        parts.append(f"ETA {format_duration(eta_s)}")
    return "  ".join(parts)


def kept_line(counter: str, case_id: str, result: CaseResult) -> str:
    """`[1/4] case-id  kept from the resumed run (ok)  step 0.123 s ...`: what the run folder
    holds for a case a resume does not run again; no elapsed time or ETA, as it took none."""
    parts = [f"[{counter}] {case_id}", f"kept from the resumed run ({_status_word(result)})", *_result_parts(result)]
    return "  ".join(parts)


def _status_word(result: CaseResult) -> str:
    status = result.get("status", "?")
    return "ok(not trained)" if status == "ok" and untrained_reason(result.get("metrics") or {}) else status


def _result_parts(result: CaseResult) -> list[str]:
    """An ok case's measured figures, in the live line's order; nothing for any other status."""
    if result.get("status") != "ok":
        return []
    return _measured_parts(result.get("metrics") or {}, str((result.get("case") or {}).get("device", "cpu")))


def _measured_parts(metrics: Metrics, device: str) -> list[str]:
    return [text for _, piece in LIVE_PIECES for text in piece(metrics, device)]


def _step_part(metrics: Metrics, device: str) -> list[str]:
    median = metrics.get(M.step_time_s_median)
    return [f"step {median:.3f} s"] if isinstance(median, (int, float)) else []


def _speed_part(metrics: Metrics, device: str) -> list[str]:
    speed = metrics.get(M.tokens_per_s_per_device)
    return [f"{speed:,.0f} tok/s/dev"] if isinstance(speed, (int, float)) else []


def _noise_part(metrics: Metrics, device: str) -> list[str]:
    cv = metrics.get(M.step_time_cv_pct)
    return [f"NOISY (CV {cv:.0f}%)"] if isinstance(cv, (int, float)) and cv > NOISY_CV_PCT else []


def _repeats_part(metrics: Metrics, device: str) -> list[str]:
    spread = metrics.get(M.repeat_spread_pct)
    if isinstance(spread, (int, float)) and (metrics.get(M.repeats) or 1) > 1:
        return [f"{metrics.get(M.repeats)} repeats, medians spread {spread:.0f}%"]
    return []


# The live lines are a column read down the screen: one unit for a sweep, fixed before its first
# case (MiB on CPU, where a 2-layer model's tensors are a few MiB and a rank's RSS ~330 MiB).
LIVE_MEMORY_UNIT = {"cpu": (1024.0, "MiB")}


def _peak_parts(metrics: Metrics, device: str) -> list[str]:
    """`peak alloc 10.1 MiB`; where only RSS was measured (a memory probe that failed or was skipped),
    `peak alloc n/a, RSS 338 MiB` rather than an RSS under the allocator's label, 30x larger."""
    factor, unit = LIVE_MEMORY_UNIT.get(device, (1.0, "GiB"))

    def shown(key: str) -> str:
        value = factor * metrics[key]
        return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.{1 if unit == 'MiB' else 2}f} {unit}"

    def has(key: str) -> bool:
        return isinstance(metrics.get(key), (int, float))

    allocator = next((k for k in (M.peak_reserved_gib, M.peak_allocated_gib) if has(k)), None)
    if allocator is not None:
        return [f"{label(allocator).split(' (')[0]} {shown(allocator)}"]
    return [f"peak alloc n/a, RSS {shown(M.peak_rss_gib)}"] if has(M.peak_rss_gib) else []


def _busy_parts(metrics: Metrics, device: str) -> list[str]:
    """`HOST-BOUND (GPU idle 105 ms/step, busy 16%)`, or `GPU busy 95%`; nothing where the busy
    share is not measured (CPU, --bench-no-probes)."""
    busy, idle = metrics.get(M.gpu_busy_pct), metrics.get(M.gpu_idle_ms_per_step)
    if not isinstance(busy, (int, float)):
        return []
    if metrics.get(M.host_bound) and isinstance(idle, (int, float)):
        return [f"HOST-BOUND ({host_bound_detail(busy, idle)})"]
    return [f"GPU busy {busy:.0f}%"]


# The live line's pieces in order, each with the metrics it reads: together the registry's LIVE
# metrics (a unit test holds the two equal), so a metric flagged LIVE is one the line shows.
LIVE_PIECES = (
    ((M.step_time_s_median,), _step_part),
    ((M.tokens_per_s_per_device,), _speed_part),
    ((M.peak_reserved_gib, M.peak_allocated_gib, M.peak_rss_gib), _peak_parts),
    ((M.gpu_busy_pct, M.gpu_idle_ms_per_step, M.host_bound), _busy_parts),
    ((M.step_time_cv_pct,), _noise_part),
    ((M.repeats, M.repeat_spread_pct), _repeats_part),
)


def sigterm_as_interrupt() -> Callable[[], None]:
    """SIGTERM to pytest (a scheduler, `kill`) ends the sweep like Ctrl-C: Python's default would
    exit on the spot and orphan the running case's processes; KeyboardInterrupt unwinds through
    the runner, which stops them. Returns what restores the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)

    def _interrupt(signum, frame):
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    signal.signal(signal.SIGTERM, _interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def write_live_line(plugins: Any, line: str) -> None:
    """`line` on the terminal now, from inside a test (output capture suspended for it), on a line
    of its own, without making pytest reprint the module's name before the next test
    (`write_line` forgets the current file, so the name came back after every line). `plugins`:
    pytest's plugin manager (its terminal reporter and capture manager)."""
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is None:
        return

    def write() -> None:
        current = reporter.currentfspath
        if reporter._tw.width_of_current_line:
            reporter._tw.line()
        reporter._tw.line(line)
        reporter.currentfspath = current

    if capture is None:
        write()
        return
    with capture.global_and_fixture_disabled():
        write()


def check_inputs(sweep: Sweep) -> None:
    """What the sweep reads besides its options, checked before anything runs (ValueError with
    one line): contributor faults, the free-space floor, the GPU named for the estimate."""
    from fsdp_bench.analysis.duration import check_gpu_name
    from fsdp_bench.launch.session import min_free_mib
    from fsdp_bench.plan import faults

    faults.check_spec()
    min_free_mib()
    if sweep.gpu_name is not None:
        check_gpu_name(sweep.gpu_name)


def split_items(sweep: Sweep, items: list, args: list[str]) -> tuple[list, list]:
    """pytest items (kept, deselected): a bench item runs when its module is the sweep's (a suite
    module only with --bench-suite or when its file is among `args`); other tests are kept."""
    keep, drop = [], []
    for item in items:
        if "bench_case" not in getattr(item, "fixturenames", ()):
            keep.append(item)
            continue
        suite = getattr(getattr(item, "module", None), "BENCH_SUITE", None)
        named = any(Path(arg.split("::")[0]).resolve() == Path(str(item.fspath)).resolve() for arg in args)
        (keep if sweep.runs_module(suite, named_on_command_line=named) else drop).append(item)
    return keep, drop


def cases_to_run(items: list) -> list:
    """The collected cases that will launch (pytest items; collection-time skips excluded; a
    tuning item counts its whole grid, what the full sweep would cost)."""
    from fsdp_bench.analysis.tune import TuneRequest

    params = [
        item.callspec.params["bench_case"]
        for item in items
        if "bench_case" in getattr(item, "fixturenames", ())
        and item.get_closest_marker("skip") is None
        and hasattr(item, "callspec")
        and "bench_case" in item.callspec.params
    ]
    return [case for p in params for case in (p.cases if isinstance(p, TuneRequest) else (p,))]


def cases_skipped(items: list) -> list:
    """The collected cases skipped before launch (`plan.case.skip_reason`), for the plan's line."""
    return [
        item.callspec.params["bench_case"]
        for item in items
        if item.get_closest_marker("skip") is not None
        and hasattr(item, "callspec")
        and isinstance(item.callspec.params.get("bench_case"), Case)
    ]


def skip_reasons(items: list) -> list[str]:
    """Why each collected bench item (a case, or a tuning with nothing to tune) is skipped before
    launch, one reason per item."""
    return [
        str(marker.kwargs.get("reason") or (marker.args[0] if marker.args else "skipped"))
        for item in items
        if "bench_case" in getattr(item, "fixturenames", ()) and (marker := item.get_closest_marker("skip"))
    ]
