"""Finding and stopping the processes of one case, so none outlives it (no torch).

A case's torchrun and every rank carry the case file on their command line
(`--case DIR/case.json`), and each rank records its pid in `DIR/rank-N.pid`. Both are
used: the pid files find ranks fast, a /proc scan finds anything that never wrote one (a rank
killed while importing torch, a torchrun whose parent died). A process is only ever signalled
after its command line was read back and found to name the case folder, so a recycled pid is
never hit. The marker is `DIR/case.json`, not `DIR`: one case id can be a prefix of another's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import fsdp_bench
from fsdp_bench.results.layout import CaseDir

TORCHRUN_GRACE_S = 30.0  # how long torchrun gets to stop its workers after SIGTERM
PROJECT_ROOT = Path(fsdp_bench.__file__).resolve().parent.parent


def omp_threads(device: str, ranks_per_node: int, cpu_count: int | None) -> int:
    """OpenMP threads per rank: one for CPU (gloo) ranks, which share the cores as ranks; a CUDA
    rank's share of the node's cores, since offloaded strategies run AdamW on the host and one
    thread would starve it."""
    if device != "cuda":
        return 1
    return max(1, (cpu_count or 1) // max(1, ranks_per_node))


def build_env(base: dict[str, str] | None = None, *, grace_s: float = TORCHRUN_GRACE_S,
              device: str = "cpu", ranks_per_node: int = 1) -> dict[str, str]:
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
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def find_case_processes(marker: str | Path) -> list[int]:
    """Live (non-zombie) processes whose command line contains `marker`, this process excluded."""
    marker = str(marker)
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid != me and marker in cmdline(pid) and not _is_zombie(pid):
            found.append(pid)
    return sorted(found)


def _recorded_pids(work_dir: Path) -> list[int]:
    pids = []
    for pid_path in CaseDir(Path(work_dir)).pid_files():
        try:
            pids.append(int(pid_path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return pids


def case_marker(work_dir: Path) -> str:
    """The text every process of the case has on its command line."""
    return str(CaseDir(Path(work_dir)).case_file)


def kill_case_processes(work_dir: Path, sig: int = signal.SIGKILL) -> list[int]:
    """Signal every process of the case still alive (recorded rank pids first, then a /proc
    scan for the case file). Returns the pids signalled."""
    marker = case_marker(work_dir)
    candidates = dict.fromkeys(_recorded_pids(work_dir) + find_case_processes(marker))
    signalled = []
    for pid in candidates:
        if marker in cmdline(pid) and not _is_zombie(pid):
            try:
                os.kill(pid, sig)
                signalled.append(pid)
            except ProcessLookupError:
                pass
    return signalled


def wait_until_gone(work_dir: Path, *, timeout_s: float = 15.0) -> list[int]:
    """SIGKILL the case's processes until none is left (bounded); the survivors, normally []."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = kill_case_processes(work_dir)
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
        left = wait_until_gone(work_dir)
    return left
