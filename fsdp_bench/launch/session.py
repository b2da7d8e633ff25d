"""The sweep as the parent runs it: one run folder per pytest session, locked while in use, each
case (or each repeat of it, round-robin over the cases: launch.rounds) run in its own torchrun,
earlier attempts set aside on resume (no torch, no pytest).

The plugin owns one `SweepSession`; pytest calls `run(case)` per collected case.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import shutil
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from fsdp_bench.launch.attempts import has_repeats, load_or_none, promote_plain_result, set_aside
from fsdp_bench.launch.rounds import RepeatRounds
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.sweep import Sweep, fingerprint_differences
from fsdp_bench.results.io import write_json_atomic
from fsdp_bench.results.layout import RunLayout, create_run_dir, foreign_entries
from fsdp_bench.results.load import load_sweep_settings
from fsdp_bench.results.records import SWEEP_SCHEMA_VERSION, CaseResult, Environment, SweepFile
from fsdp_bench.results.schema import ResultError, is_current_ok


class SessionError(RuntimeError):
    """The sweep cannot use its run folder; the message is one line for the user."""


class RunBusy(SessionError):
    """Another live sweep holds the run folder."""


class RunFolderGone(SessionError):
    """The run folder was deleted, replaced or made unwritable mid-sweep: the sweep stops."""


class DiskFull(SessionError):
    """Too little free space left in the run folder to launch another case."""


MIN_FREE_MIB_DEFAULT = 200  # below this much free space a case is not launched (FSDP_BENCH_MIN_FREE_MIB)


def min_free_mib() -> float:
    """FSDP_BENCH_MIN_FREE_MIB, checked: a value that is not a finite number >= 0 (nan, -1, "x")
    is a usage error, never a silently disabled check."""
    text = os.environ.get("FSDP_BENCH_MIN_FREE_MIB")
    if text is None:
        return MIN_FREE_MIB_DEFAULT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"FSDP_BENCH_MIN_FREE_MIB: {text!r} is not a number of MiB (>= 0)")
    return value


def check_free_space(run_dir: Path) -> None:
    """Stop before a case rather than let it die half-written on a full disk."""
    need_mib = min_free_mib()
    free_mib = shutil.disk_usage(run_dir).free / 2**20
    if free_mib < need_mib:
        raise DiskFull(
            f"only {free_mib:.0f} MiB free under {run_dir} (need {need_mib:.0f} MiB); "
            "free some space, then resume the run"
        )


class SweepSession:
    """The run folder of this pytest session, created when the first case runs, and locked
    (flock on RUN/.lock) while this session lives, so a second `--bench-resume` of a run still
    in progress is refused instead of racing it."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self.run_dir: Path | None = None
        self.results: list[CaseResult] = []
        # ids of the results a resume kept as they were, not run in this session: said on their
        # live lines, and left out of what this session's time went to
        self.kept: set[str] = set()
        self._launched: set[str] = set()  # ids of the cases this session launched (any repeat)
        self.launch = sweep.launch()
        self.store = None  # node 0's rendezvous store process in a multi-node sweep
        self._lock_fd: int | None = None
        self._identity: tuple[tuple[int, int], tuple[int, int]] | None = None  # (run folder, .lock) dev+inode
        self._torch_env = None  # the env.json torch half, read while pytest collects
        self._rounds = None  # the sweep's repeats in round-robin order (plan_rounds), launch.rounds
        # told of every launch (the case or one repeat, its result): the live lines and the ETA
        self.on_launch: Callable[[Case, int | None, CaseResult], None] | None = None

    def start_environment(self) -> None:
        """Start reading the torch half of env.json now, so it is ready by the first case."""
        from fsdp_bench.launch.environment import TorchEnvironment
        from fsdp_bench.launch.processes import build_env

        if self._torch_env is None:
            self._torch_env = TorchEnvironment(env=build_env())

    def torch_import_bytes(self) -> int | None:
        """What `import torch` costs each of the workers' processes, as the env.json reader
        measured it (the host-memory guard adds a CUDA build's extra); None when it could not say."""
        self.start_environment()
        return self._torch_env.result().get("torch_import_rss_bytes")

    def check_interpreter(self, device: str) -> Environment:
        """The torch facts of the workers' interpreter (the env.json reader's, already under
        way, so no second torch import): SessionError with one line when the cases could not
        run at all (no torch there, or a CUDA sweep whose torch sees no GPU)."""
        from fsdp_bench.launch.environment import interpreter_problem

        self.start_environment()
        facts = self._torch_env.result()
        problem = interpreter_problem(facts, device, self._torch_env.python)
        if problem is not None:
            raise SessionError(problem)
        return facts

    def kept_on_resume(self, case_ids: list[str]) -> frozenset[str]:
        """The ids of the cases a --bench-resume keeps (ok in the run folder, measured by this
        version's loop): not run again."""
        if self.sweep.resume is None or not self.launch.owns_results:
            return frozenset()
        run = RunLayout(self.sweep.resume)
        return frozenset(cid for cid in case_ids if is_current_ok(load_or_none(run.result_file(cid))))

    def _write_environment(self, folder: Path) -> None:
        from fsdp_bench.launch.environment import write_environment
        from fsdp_bench.launch.processes import PROJECT_ROOT

        self.start_environment()
        write_environment(folder, PROJECT_ROOT, self._torch_env)

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.ensure_run_dir())

    def lock_run_dir(self, run_dir: Path) -> None:
        """flock RUN/.lock, which must be our own plain file: created exclusively, or an existing
        regular file with one link (never a symlink, hard link, FIFO or device, whose target
        the pid written into it would clobber). Remembers the folder's identity (see check_run_dir)."""
        lock_file = RunLayout(Path(run_dir)).lock_file
        fd = _open_lock_file(run_dir, lock_file)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunBusy(f"{run_dir} is in use by another running sweep (pid {holder})") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            self._identity = (_identity(os.stat(run_dir)), _identity(os.fstat(fd)))
        except OSError as exc:
            os.close(fd)
            raise SessionError(f"cannot lock {run_dir}: writing {lock_file} failed ({exc.strerror})") from None
        self._lock_fd = fd

    def check_run_dir(self) -> None:
        """Stop when the run folder was removed or replaced since it was locked: writing on would
        re-create it without its lock, env.json or sweep.json, where another sweep could resume."""
        if self._identity is None or self.run_dir is None:
            return
        layout = RunLayout(self.run_dir)
        try:
            now = (_identity(os.stat(layout.root)), _identity(os.stat(layout.lock_file, follow_symlinks=False)))
        except OSError:
            now = None
        if now != self._identity or not layout.cases_dir.is_dir():
            raise RunFolderGone(
                f"{self.run_dir} was removed or replaced while the sweep ran; stopping "
                f"(the cases done so far are wherever that folder went)"
            )

    def check_no_live_ranks(self, run_dir: Path) -> None:
        """Refuse to resume a run whose earlier attempt still has ranks alive (an orphaned
        torchrun's workers): they would write into the folders a new attempt sets aside."""
        from fsdp_bench.launch.processes import live_ranks

        for work in RunLayout(Path(run_dir)).unfinished_case_dirs():
            pids = live_ranks(work.path)
            if pids:
                raise SessionError(
                    f"{work.path.name} still has ranks running from an earlier attempt "
                    f"(pid {', '.join(map(str, pids))}); stop them first"
                )

    def check_same_settings(self, run_dir: Path) -> None:
        """Refuse to resume a run with settings that change what its cases measure."""
        stored_file = RunLayout(Path(run_dir)).sweep_file
        if not stored_file.exists():  # every run folder has one since #23; without it (made by hand, or
            # re-created by an older version under a case whose folder was deleted) any settings would pass
            raise SessionError(
                f"{run_dir} has no sweep.json: cannot tell the run's settings, so it is not resumed; start a new run"
            )
        try:
            stored = load_sweep_settings(stored_file)
        except (OSError, ValueError, ResultError) as exc:
            raise SessionError(f"{exc}; cannot tell the run's settings") from None
        diffs = fingerprint_differences(stored, self.sweep.fingerprint())
        if diffs:
            raise SessionError(
                f"{run_dir} was run with other settings ({'; '.join(diffs)}); "
                "resume with the same options or start a new run"
            )

    def unlock_run_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def ensure_run_dir(self) -> Path:
        if self.run_dir is None:
            try:
                self._create_run_dir()
            except OSError as exc:  # a full disk, a read-only or vanished folder: one line, no traceback
                raise SessionError(f"cannot set up the run folder: {_os_error_line(exc)}") from None
        return self.run_dir

    def _create_run_dir(self) -> None:
        if self.run_dir is None:
            from fsdp_bench.launch.rendezvous import start_rendezvous_store

            if self.launch.multi_node and self.launch.owns_results:
                # first, so that faster nodes find the rendezvous store as early as possible
                self.store = start_rendezvous_store(self.launch)
            if self.sweep.resume is not None:
                self.run_dir = self.sweep.resume
            elif self.sweep.run_id is not None:
                self.run_dir = _named_run_dir(
                    self, self.sweep.results_dir / self.sweep.run_id, self.launch.owns_results
                )
                self._write_environment(RunLayout(self.run_dir).node_root(self.launch.node_rank))
            else:
                self.run_dir = self._new_run_dir()
            if self.sweep.resume is None and self.launch.owns_results:
                write_json_atomic(
                    RunLayout(self.run_dir).sweep_file,
                    {"schema_version": SWEEP_SCHEMA_VERSION, "settings": self.sweep.fingerprint()},
                    shape=SweepFile,
                    overwrite=True,
                )

    def _new_run_dir(self) -> Path:
        """A new run folder, locked, with its env.json. Known to the session (`run_dir`) only once
        set up: a folder that could not be locked (a full disk) is no run, so nothing at the end
        names it or offers to resume it (#37); it is removed again while it holds nothing."""
        run_dir = create_run_dir(self.sweep.results_dir)
        try:
            self.lock_run_dir(run_dir)
            self._write_environment(run_dir)
        except (SessionError, OSError):
            self.unlock_run_dir()
            _remove_if_empty(RunLayout(run_dir))
            raise
        return run_dir

    def close(self) -> None:
        if self._torch_env is not None:
            self._torch_env.cancel()  # no-op once its result was read
        if self.store is not None:
            from fsdp_bench.launch.rendezvous import stop_rendezvous_store

            stop_rendezvous_store(self.store)
            self.store = None
        self.unlock_run_dir()

    def run(self, case: Case) -> CaseResult:
        """Run (or keep, on resume) one case. A run folder that went away or cannot be written
        any more stops the sweep (RunFolderGone, one line) instead of failing every case left."""
        self.check_run_dir()
        with self._stop_on_os_error():
            return self._run(self.layout, case)

    @contextlib.contextmanager
    def _stop_on_os_error(self):
        """An OSError writing into the run folder (read-only, full, gone) becomes RunFolderGone."""
        run = self.layout
        try:
            yield
        except OSError as exc:
            self.check_run_dir()  # the folder itself went away or was replaced: say that, no resume hint
            raise RunFolderGone(
                f"{run.root}: {_os_error_line(exc)}; stopping (resume later with --bench-resume {run.root})"
            ) from None

    def plan_rounds(self, cases: list[Case]) -> None:
        """With --bench-repeats N > 1: the sweep's repeats run round-robin over these cases (the
        collected ones, in order; launch.rounds says why). Cases a resume keeps are left out."""
        if self.sweep.repeats < 2:
            return
        ids = [case.id for case in cases]
        kept = self.kept_on_resume(ids)
        todo = [(case.id, case) for case in cases if case.id not in kept]
        done = set()
        if self.sweep.resume is not None and self.launch.owns_results:
            run = RunLayout(self.sweep.resume)
            done = {
                (cid, r)
                for cid, _ in todo
                for r in range(1, self.sweep.repeats + 1)
                if is_current_ok(load_or_none(run.result_file(cid, repeat=r)))
            }
        self._rounds = RepeatRounds(todo, self.sweep.repeats, kept=done)

    def launches_left(self) -> int | None:
        """Repeats the planned rounds will still launch; None without rounds (no repeats)."""
        return None if self._rounds is None else self._rounds.launches_left()

    def _run(self, run: RunLayout, case: Case) -> CaseResult:
        repeats = self.sweep.repeats
        previous = self._previous_result(run, case, repeats) if self.launch.owns_results else None
        if is_current_ok(previous):
            result = previous  # resumed: an ok case of this loop's version is never re-run
        elif repeats > 1:
            if previous is not None:  # the merged result only: its ok repeats are kept
                set_aside(run, case.id, with_dir=False)
            result = self._run_repeats(run, case)
        else:
            check_free_space(run.root)
            if previous is not None:
                set_aside(run, case.id)
            result = self._launch(run, case)
        self._note_kept(case.id)
        self.results.append(result)
        return result

    def _note_kept(self, case_id: str) -> None:
        """A case with a result and no launch in this session (an ok case, or every repeat of it,
        on disk from the resumed run) is kept; one launched here is not, even if part was kept."""
        if case_id in self._launched:
            self.kept.discard(case_id)
        else:
            self.kept.add(case_id)

    def run_round(self, batch: Sequence[tuple[Case, int]]) -> Iterator[tuple[Case, CaseResult]]:
        """The tuner's round: each (case, repeats) of `batch` with at least that many repeats,
        yielded in batch order as each case is merged. A merged result that already has them is
        yielded as is; one with fewer is set aside under .attempts/ (its ok repeats stay and are
        kept) and the missing repeats run round-robin over the batch's cases (launch.rounds: the
        first case's turn runs every case's earlier rounds, not its own repeats back to back).
        Always the repeat layout, so a case measured once and later again is one ordinary case."""
        if len({case.id for case, _ in batch}) < len(batch):
            raise ValueError("run_round: a case named twice in one batch")
        run = self.layout
        merged = {case.id: load_or_none(run.result_file(case.id)) for case, _ in batch}
        todo = [(case, n) for case, n in batch if not has_repeats(merged[case.id], n)]
        kept = [(case.id, 1) for case, _ in todo if promote_plain_result(run, case.id, merged[case.id])]
        rounds = RepeatRounds([(case.id, case) for case, _ in todo], {case.id: n for case, n in todo}, kept=kept)
        for case, _ in batch:
            result = merged[case.id]
            if rounds.holds(case.id):
                self.check_run_dir()
                with self._stop_on_os_error():
                    if run.result_file(case.id).exists():
                        set_aside(run, case.id, with_dir=False)
                    result = self._run_repeats(run, case, rounds)
            self._note_kept(case.id)
            self.results = [r for r in self.results if r.get("case_id") != case.id] + [result]
            yield case, result

    def _run_repeats(self, run: RunLayout, case: Case, rounds: RepeatRounds | None = None) -> CaseResult:
        """The case's repeats, merged into its result: from `rounds` (the tuner's) or the sweep's
        round-robin rounds when they hold the case (the other cases' pending repeats in between
        run first), otherwise back to back (a case outside the plan)."""
        from fsdp_bench.analysis.repeats import merge_repeats

        rounds = rounds if rounds is not None else self._rounds
        if rounds is None or not rounds.holds(case.id):
            rounds = RepeatRounds([(case.id, case)], self.sweep.repeats)
        results = rounds.run_through(case.id, lambda c, r: self._repeat_result(run, c, r))
        merged = merge_repeats(results, planned=rounds.planned(case.id))
        write_json_atomic(run.result_file(case.id, self.launch.node_rank), merged, shape=CaseResult, make_parents=False)
        return merged

    def _repeat_result(self, run: RunLayout, case: Case, repeat: int) -> CaseResult:
        """One repeat: kept when an earlier attempt left it ok, else (the earlier attempt set
        aside) launched in its own fresh torchrun and folder."""
        done = load_or_none(run.result_file(case.id, repeat=repeat)) if self.launch.owns_results else None
        if is_current_ok(done):
            return done
        self.check_run_dir()
        check_free_space(run.root)
        # Only node 0 resumes; another node must never move node 0's (live) folder.
        if self.launch.owns_results and (run.case_dir(case.id, repeat=repeat).path.exists() or done is not None):
            set_aside(run, case.id, repeat=repeat)
        return self._launch(run, case, repeat)

    def _launch(self, run: RunLayout, case: Case, repeat: int | None = None) -> CaseResult:
        """The case (or one repeat of it) in its own torchrun (free space checked, any earlier
        attempt set aside by the caller), or a `skipped` result when the host-memory guard finds
        it would need more than is available now; `on_launch` hears of each."""
        from fsdp_bench.launch.memory_guard import memory_skip_reason
        from fsdp_bench.launch.runner import run_case, skip_case
        from fsdp_bench.plan.devices import available_host_bytes

        over = None
        if not self.sweep.allow_memory_overcommit:
            over = memory_skip_reason(
                case, available_host_bytes(), nnodes=self.launch.nnodes, import_bytes=self.torch_import_bytes()
            )
        if over is not None:
            result = skip_case(case, run.root, over, launch=self.launch, repeat=repeat)
        else:
            result = run_case(
                case,
                run.root,
                timeout_s=self.sweep.timeout_s,
                grace_s=self.sweep.kill_grace_s,
                launch=self.launch,
                repeat=repeat,
            )
        self._launched.add(case.id)
        if self.on_launch is not None:
            self.on_launch(case, repeat, result)
        return result

    @staticmethod
    def _previous_result(run: RunLayout, case: Case, repeats: int = 1) -> CaseResult | None:
        """Node R > 0 keeps no merged results and never resumes, so only node 0 asks this.
        With repeats, a case folder without a merged result holds the repeats done so far: kept."""
        path = run.result_file(case.id)
        if not path.exists() and run.case_dir(case.id).path.exists() and repeats == 1:
            set_aside(run, case.id)  # an interrupted attempt without a result
        return load_or_none(path)


def _os_error_line(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _open_lock_file(run_dir: Path, lock_file: Path) -> int:
    """An fd on RUN/.lock that is certainly a plain file of this folder (see lock_run_dir)."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        try:
            fd = os.open(lock_file, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            fd = os.open(lock_file, flags)  # O_NONBLOCK: a FIFO must not block the open
    except OSError as exc:
        raise SessionError(f"cannot lock {run_dir}: {lock_file} is a symlink or unusable ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"hard-linked ({st.st_nlink} links)"
        raise SessionError(f"cannot lock {run_dir}: {lock_file} is {what}; remove it if no sweep uses the folder")
    return fd


def _named_run_dir(session: SweepSession, path: Path, owner: bool) -> Path:
    """The run folder every node names alike (--bench-run-id). Node 0 takes it only when it is
    new or empty (never a folder with files of the user's or an earlier run: those would be
    overwritten), locks it, then makes cases/; other nodes only make their node folder."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SessionError(f"--bench-run-id: cannot create {path} ({exc.strerror})") from None
    if not owner:
        return path
    taken = foreign_entries(path)
    if taken:
        raise SessionError(
            f"--bench-run-id: {path} already exists and holds {', '.join(taken[:3])}; "
            f"choose a new run id, or continue a run with --bench-resume {path}"
        )
    session.lock_run_dir(path)  # exclusive: of two sweeps started at once, one gets RunBusy here
    try:
        RunLayout(path).cases_dir.mkdir()
    except FileExistsError:
        session.unlock_run_dir()
        raise SessionError(
            f"--bench-run-id: {path} already holds results; choose a new run id "
            f"or continue it with --bench-resume {path}"
        ) from None
    return path


def _remove_if_empty(run: RunLayout) -> None:
    """Undo a run folder this session just created and could not set up: its empty lock file,
    cases/ and the folder itself, each only while it is empty (never anything a sweep wrote)."""
    with contextlib.suppress(OSError):
        if run.lock_file.is_file() and not run.lock_file.is_symlink() and run.lock_file.stat().st_size == 0:
            run.lock_file.unlink()
    for folder in (run.cases_dir, run.root):
        with contextlib.suppress(OSError):
            folder.rmdir()
