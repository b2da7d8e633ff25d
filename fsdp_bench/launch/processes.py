"""Finding and stopping the processes of one case, so none outlives it (no torch).

A case's torchrun and every rank carry the case file on their command line
(`--case DIR/case.json`), and each rank records its pid in `DIR/rank-N.pid`. Both are
used: the pid files find ranks fast, a /proc scan finds anything that never wrote one (a rank
killed while importing torch, a torchrun whose parent died). A process is only ever signalled
after its command line was read back and found to name the case folder, so a recycled pid is
never hit. The marker is `DIR/case.json`, not `DIR`: one case id can be a prefix of another's;
and it must be one whole argument, byte for byte, never a substring (`/home/u/R/...` is inside
`/scratch/home/u/R/...`; a non-UTF-8 byte must not be lost to decoding). torchrun writes
`DIR/torchrun.pid` before it imports anything, so a later sweep finds an orphaned attempt's
torchrun and its session even when no rank wrote a pid file yet.

Naming the case file is not enough to be signalled: a `tail -f DIR/case.json` of the user's
names it too. A process is the case's only if it runs a worker entry point of this project
(`fsdp_bench.worker...` on its command line: torchrun's and every rank's) or, when the runner's
torchrun pid is known, it is that torchrun, lives in its session, or descends from it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import fsdp_bench
from fsdp_bench.plan.sweep import KILL_GRACE_S
from fsdp_bench.results.layout import CaseDir

TORCHRUN_GRACE_S = KILL_GRACE_S  # how long torchrun gets to stop its workers after SIGTERM (--bench-kill-grace)
PROJECT_ROOT = Path(fsdp_bench.__file__).resolve().parent.parent


def omp_threads(device: str, ranks_per_node: int, cpu_count: int | None) -> int:
    """OpenMP threads per rank: one for CPU (gloo) ranks, which share the cores as ranks; a CUDA
    rank's share of the node's cores, since offloaded strategies run AdamW on the host and one
    thread would starve it."""
    if device != "cuda":
        return 1
    return max(1, (cpu_count or 1) // max(1, ranks_per_node))


def build_env(
    base: dict[str, str] | None = None,
    *,
    grace_s: float = TORCHRUN_GRACE_S,
    device: str = "cpu",
    ranks_per_node: int = 1,
) -> dict[str, str]:
    """The worker's environment: this checkout importable, OpenMP threads per rank (see
    omp_threads; an OMP_NUM_THREADS already set wins), and torchrun's own SIGTERM-to-SIGKILL
    wait shorter than the runner's, so torchrun gets to kill its workers itself before the
    runner has to."""
    env = dict(os.environ if base is None else base)
    env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(max(1, int(grace_s * 0.5)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", str(omp_threads(device, ranks_per_node, os.cpu_count())))
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cmdline(pid: int) -> str:
    """The command line of `pid` with spaces for NULs; "" when gone, a zombie, or unreadable."""
    return " ".join(arg.decode(errors="replace") for arg in _argv(pid))


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def _argv(pid: int) -> list[bytes]:
    """The NUL-separated fields of /proc/PID/cmdline as bytes ([] when gone or unreadable):
    bytes, because a path may hold bytes that are not UTF-8 and must still match exactly."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.split(b"\0")


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 else 0


def _descends_from(pid: int, root: int) -> bool:
    seen = 0
    while pid > 1 and seen < 64:
        if pid == root:
            return True
        pid, seen = _parent(pid), seen + 1
    return False


def _runs_worker(argv: list[bytes]) -> bool:
    return any(arg == b"fsdp_bench.worker" or arg.startswith(b"fsdp_bench.worker.") for arg in argv)


def _started_by_us(pid: int, root: int | None) -> bool:
    """Whether `pid` (already known to name the case file) is the sweep's: a worker entry point,
    or the runner's torchrun `root`, a process in its session or below it."""
    if _runs_worker(_argv(pid)):
        return True
    if root is None:
        return False
    try:
        same_session = os.getsid(pid) == root
    except OSError:
        return False
    return same_session or _descends_from(pid, root)


def names_file(pid: int, path: str | Path) -> bool:
    """Whether one argument of `pid`'s command line IS `path` (byte for byte): never a substring,
    so a case path that ends another sweep's (/home/u/R in /scratch/home/u/R) is not matched."""
    return os.fsencode(str(path)) in _argv(pid)


def is_case_process(pid: int, marker: str | Path, root: int | None = None) -> bool:
    """A live process of the case: names the case file, not a zombie, started by the sweep."""
    return pid != os.getpid() and names_file(pid, marker) and not _is_zombie(pid) and _started_by_us(pid, root)


def processes_under(folder: str | Path) -> list[int]:
    """Live worker-side processes (fsdp_bench.worker entry points) with an argument inside
    `folder`: every process any case of a run folder may have left."""
    prefix = os.fsencode(str(Path(folder).resolve())) + b"/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        argv = _argv(int(entry.name))
        if _runs_worker(argv) and any(a.startswith(prefix) for a in argv) and not _is_zombie(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def find_case_processes(marker: str | Path, root: int | None = None) -> list[int]:
    """Live (non-zombie) processes of the case (see `is_case_process`), this process excluded."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and is_case_process(int(entry.name), marker, root):
            found.append(int(entry.name))
    return sorted(found)


def _recorded_pids(work_dir: Path) -> list[int]:
    pids = []
    for pid_path in CaseDir(Path(work_dir)).pid_files():
        try:
            pids.append(int(pid_path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return pids


def recorded_launcher(work_dir: Path) -> int | None:
    """The case's torchrun, from the pid file it writes before anything else, when it still runs
    for this case (its own command line names the case file): the root of the case's session."""
    try:
        pid = int(CaseDir(Path(work_dir)).launcher_pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if is_case_process(pid, case_marker(work_dir)) else None


def live_ranks(work_dir: Path) -> list[int]:
    """Every live process of the case (an earlier attempt's torchrun and ranks): recorded pids,
    then the /proc scan, with the recorded torchrun's session and tree counted as the case's."""
    marker = case_marker(work_dir)
    root = recorded_launcher(work_dir)
    candidates = dict.fromkeys(_recorded_pids(work_dir) + find_case_processes(marker, root))
    return sorted(pid for pid in candidates if is_case_process(pid, marker, root))


def case_marker(work_dir: Path) -> str:
    """The argument every process of the case has on its command line (resolved, as the runner
    writes it)."""
    return str(CaseDir(Path(work_dir).resolve()).case_file)


def kill_case_processes(work_dir: Path, sig: int = signal.SIGKILL, *, root: int | None = None) -> list[int]:
    """Signal every process of the case still alive (recorded rank pids first, then a /proc
    scan for the case file); `root` is the runner's torchrun pid (default: the recorded one).
    Returns the pids signalled."""
    marker = case_marker(work_dir)
    root = root if root is not None else recorded_launcher(work_dir)
    candidates = dict.fromkeys(_recorded_pids(work_dir) + find_case_processes(marker, root))
    signalled = []
    for pid in candidates:
        if is_case_process(pid, marker, root):
            try:
                os.kill(pid, sig)
                signalled.append(pid)
            except ProcessLookupError:
                pass
    return signalled


def wait_until_gone(work_dir: Path, *, timeout_s: float = 15.0, root: int | None = None) -> list[int]:
    """SIGKILL the case's processes until none is left (bounded); the survivors, normally []."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = kill_case_processes(work_dir, root=root)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def stop_case(proc: subprocess.Popen, work_dir: Path, *, grace_s: float = TORCHRUN_GRACE_S) -> list[int]:
    """Stop torchrun the way it expects, then make sure nothing of the case is left.

    SIGTERM first: torchrun forwards it to its workers, which write their records. SIGKILL to
    torchrun's group only after the grace period, because each rank runs in its own session
    (torch >= 2.2): killing the group first would orphan them. Then every rank left, by pid.
    A second Ctrl-C during the grace period skips straight to SIGKILL. Returns survivors ([]).
    """
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        left = wait_until_gone(work_dir, root=proc.pid)
    return left
