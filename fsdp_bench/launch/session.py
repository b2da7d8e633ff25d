"""The sweep as the parent runs it: one run folder per pytest session, locked while in use, each
case run once in its own torchrun, earlier attempts set aside on resume (no torch, no pytest).

The plugin owns one `SweepSession`; pytest calls `run(case)` per collected case.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Any

from fsdp_bench.plan.case import Case
from fsdp_bench.plan.options import Sweep, fingerprint_differences
from fsdp_bench.results.io import read_json, write_json_atomic
from fsdp_bench.results.layout import RunLayout, create_run_dir
from fsdp_bench.results.load import load_case_result
from fsdp_bench.results.metrics import M
from fsdp_bench.results.schema import ResultError


class SessionError(RuntimeError):
    """The sweep cannot use its run folder; the message is one line for the user."""


class RunBusy(SessionError):
    """Another live sweep holds the run folder."""


class DiskFull(SessionError):
    """Too little free space left in the run folder to launch another case."""


MIN_FREE_MIB_DEFAULT = 200  # below this much free space a case is not launched (FSDP_BENCH_MIN_FREE_MIB)


def check_free_space(run_dir: Path) -> None:
    """Stop before a case rather than let it die half-written on a full disk."""
    try:
        need_mib = float(os.environ.get("FSDP_BENCH_MIN_FREE_MIB", MIN_FREE_MIB_DEFAULT))
    except ValueError:
        need_mib = MIN_FREE_MIB_DEFAULT
    free_mib = shutil.disk_usage(run_dir).free / 2**20
    if free_mib < need_mib:
        raise DiskFull(f"only {free_mib:.0f} MiB free under {run_dir} (need {need_mib:.0f} MiB); "
                       f"free some space, then: pytest benchmarks --bench-resume {run_dir} [same --bench-* options]")


class SweepSession:
    """The run folder of this pytest session, created when the first case runs, and locked
    (flock on RUN/.lock) while this session lives, so a second `--bench-resume` of a run still
    in progress is refused instead of racing it."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self.run_dir: Path | None = None
        self.results: list[dict[str, Any]] = []
        self.launch = sweep.launch()
        self.store = None  # node 0's rendezvous store process in a multi-node sweep
        self._lock_fd: int | None = None
        self._torch_env = None  # the env.json torch half, read while pytest collects

    def start_environment(self) -> None:
        """Start reading the torch half of env.json now, so it is ready by the first case."""
        from fsdp_bench.launch.environment import TorchEnvironment
        from fsdp_bench.launch.processes import build_env

        if self._torch_env is None:
            self._torch_env = TorchEnvironment(env=build_env())

    def _write_environment(self, folder: Path) -> None:
        from fsdp_bench.launch.environment import write_environment
        from fsdp_bench.launch.processes import PROJECT_ROOT

        self.start_environment()
        write_environment(folder, PROJECT_ROOT, self._torch_env)

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.ensure_run_dir())

    def lock_run_dir(self, run_dir: Path) -> None:
        lock_file = RunLayout(Path(run_dir)).lock_file
        try:  # O_NOFOLLOW: a symlinked .lock must not make us truncate and write another file
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise SessionError(f"cannot lock {run_dir}: {lock_file} is a symlink or unusable "
                               f"({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunBusy(f"{run_dir} is in use by another running sweep (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def check_no_live_ranks(self, run_dir: Path) -> None:
        """Refuse to resume a run whose earlier attempt still has ranks alive (an orphaned
        torchrun's workers): they would write into the folders a new attempt sets aside."""
        from fsdp_bench.launch.processes import live_ranks

        for work in RunLayout(Path(run_dir)).unfinished_case_dirs():
            pids = live_ranks(work.path)
            if pids:
                raise SessionError(f"{work.path.name} still has ranks running from an earlier attempt "
                                   f"(pid {', '.join(map(str, pids))}); stop them first")

    def check_same_settings(self, run_dir: Path) -> None:
        """Refuse to resume a run with settings that change what its cases measure."""
        stored_file = RunLayout(Path(run_dir)).sweep_file
        if not stored_file.exists():
            return  # a run from before sweep.json was kept: nothing to compare with
        try:
            stored = read_json(stored_file)
        except (OSError, ValueError, ResultError):
            raise SessionError(f"{stored_file} is unreadable; cannot tell the run's settings") from None
        if not isinstance(stored, dict):
            raise SessionError(f"{stored_file} is not a JSON object; cannot tell the run's settings")
        diffs = fingerprint_differences(stored, self.sweep.fingerprint())
        if diffs:
            raise SessionError(f"{run_dir} was run with other settings ({'; '.join(diffs)}); "
                               "resume with the same options or start a new run")

    def unlock_run_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def ensure_run_dir(self) -> Path:
        if self.run_dir is None:
            from fsdp_bench.launch.rendezvous import start_rendezvous_store

            if self.launch.multi_node and self.launch.owns_results:
                # first, so that faster nodes find the rendezvous store as early as possible
                self.store = start_rendezvous_store(self.launch)
            if self.sweep.resume is not None:
                self.run_dir = self.sweep.resume
            elif self.sweep.run_id is not None:
                self.run_dir = _named_run_dir(self.sweep.results_dir / self.sweep.run_id, self.launch.owns_results)
                if self.launch.owns_results:
                    self.lock_run_dir(self.run_dir)  # a --bench-resume of it meanwhile is refused
                self._write_environment(RunLayout(self.run_dir).node_root(self.launch.node_rank))
            else:
                self.run_dir = create_run_dir(self.sweep.results_dir)
                self.lock_run_dir(self.run_dir)
                self._write_environment(self.run_dir)
            if self.sweep.resume is None and self.launch.owns_results:
                write_json_atomic(RunLayout(self.run_dir).sweep_file, self.sweep.fingerprint(), overwrite=True)
        return self.run_dir

    def close(self) -> None:
        if self._torch_env is not None:
            self._torch_env.cancel()  # no-op once its result was read
        if self.store is not None:
            from fsdp_bench.launch.rendezvous import stop_rendezvous_store

            stop_rendezvous_store(self.store)
            self.store = None
        self.unlock_run_dir()

    def run(self, case: Case) -> dict[str, Any]:
        from fsdp_bench.launch.runner import run_case

        run = self.layout
        repeats = self.sweep.repeats
        previous = self._previous_result(run, case, repeats) if self.launch.owns_results else None
        if previous is not None and previous["status"] == "ok":
            result = previous  # resumed: an ok case is never re-run
        elif repeats > 1:
            if previous is not None:  # the merged result only: its ok repeats are kept
                _set_aside(run, case.id, with_dir=False)
            result = self._run_repeats(run, case)
        else:
            check_free_space(run.root)
            if previous is not None:
                _set_aside(run, case.id)
            result = run_case(case, run.root, timeout_s=self.sweep.timeout_s, grace_s=self.sweep.kill_grace_s,
                              launch=self.launch)
        self.results.append(result)
        return result

    def run_with_repeats(self, case: Case, repeats: int) -> dict[str, Any]:
        """The case with at least `repeats` repeats (the tuner's rounds): a merged result that
        already has them is returned as is; one with fewer is set aside under .attempts/ (its ok
        repeats stay and are kept) and the missing repeats run. Always the repeat layout, so a
        case measured once and later again is one ordinary case with its repeats."""
        run = self.layout
        merged = _load_or_none(run.result_file(case.id))
        if merged is not None and merged["status"] == "ok" and len(merged.get(M.repeats) or []) >= repeats:
            result = merged
        else:
            if merged is not None:
                _set_aside(run, case.id, with_dir=False)
            result = self._run_repeats(run, case, repeats)
        self.results = [r for r in self.results if r.get("case_id") != case.id] + [result]
        return result

    def _run_repeats(self, run: RunLayout, case: Case, repeats: int | None = None) -> dict[str, Any]:
        """Each repeat in its own fresh torchrun and folder; an ok repeat from an earlier attempt
        is kept, others are set aside and run again; the first repeat that is not ok ends the case."""
        from fsdp_bench.analysis.repeats import merge_repeats
        from fsdp_bench.launch.runner import run_case

        planned = repeats or self.sweep.repeats
        results = []
        for repeat in range(1, planned + 1):
            done = _load_or_none(run.result_file(case.id, repeat=repeat)) if self.launch.owns_results else None
            if done is None or done["status"] != "ok":
                check_free_space(run.root)
                # Only node 0 resumes; another node must never move node 0's (live) folder.
                if self.launch.owns_results and (run.case_dir(case.id, repeat=repeat).path.exists() or done is not None):
                    _set_aside(run, case.id, repeat=repeat)
                done = run_case(case, run.root, timeout_s=self.sweep.timeout_s, grace_s=self.sweep.kill_grace_s,
                                launch=self.launch, repeat=repeat)
            results.append(done)
            if done["status"] != "ok":
                break
        merged = merge_repeats(results, planned=planned)
        write_json_atomic(run.result_file(case.id, self.launch.node_rank), merged)
        return merged

    @staticmethod
    def _previous_result(run: RunLayout, case: Case, repeats: int = 1) -> dict[str, Any] | None:
        """Node R > 0 keeps no merged results and never resumes, so only node 0 asks this.
        With repeats, a case folder without a merged result holds the repeats done so far: kept."""
        path = run.result_file(case.id)
        if not path.exists() and run.case_dir(case.id).path.exists() and repeats == 1:
            _set_aside(run, case.id)  # an interrupted attempt without a result
        return _load_or_none(path)


def _named_run_dir(path: Path, owner: bool) -> Path:
    """The run folder every node names alike (--bench-run-id). Node 0 makes its cases/ and
    refuses one that already holds results; other nodes only make their node folder."""
    path.mkdir(parents=True, exist_ok=True)
    if owner:
        try:
            RunLayout(path).cases_dir.mkdir()
        except FileExistsError:
            raise SessionError(f"--bench-run-id: {path} already holds results; choose a new run id "
                               f"or continue it with --bench-resume {path}") from None
    return path


def _load_or_none(path: Path) -> dict[str, Any] | None:
    """A result file (of a case or one repeat), None when absent, a failed stand-in when unreadable."""
    if not path.exists():
        return None
    try:
        return load_case_result(path)
    except ResultError:
        return {"status": "failed"}


def _set_aside(run: RunLayout, case_id: str, *, repeat: int | None = None, with_dir: bool = True) -> None:
    """Keep an earlier non-ok attempt (of the case, or of one repeat) under cases/.attempts/
    instead of overwriting it. `with_dir=False`: the merged result only, the repeats stay."""
    run.attempts_dir.mkdir(exist_ok=True)
    name = case_id if repeat is None else run.repeat_attempt_name(case_id, repeat)
    n = 1
    while run.attempt_dir(name, n).exists():
        n += 1
    dest = run.attempt_dir(name, n)
    dest.mkdir()
    sources = [run.case_dir(case_id, repeat=repeat).path] if with_dir else []
    for src in (*sources, run.result_file(case_id, repeat=repeat)):
        if src.exists():
            shutil.move(str(src), str(dest / src.name))
