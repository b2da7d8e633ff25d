"""Run a command under a memory watchdog: the resident memory of its whole process tree (torchrun
and its ranks, each of which runs in a session of its own, so the tree is followed by parent pid,
not by session) is read every 20 ms, and the tree is SIGKILLed the moment the sum passes a limit.

Memory tests launch cases the guard might let through; on a machine without swap a case that
grows unchecked takes the machine down, other users' work with it. The watchdog keeps any such
case to about its limit (a tensor is touched page by page, at most a few hundred MB in 20 ms).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.02


@dataclass
class Watched:
    returncode: int
    peak_tree_rss_bytes: int  # the largest sum over the tree seen at one poll
    peak_process_rss_bytes: int  # the largest single process seen at one poll
    peak_below_rss_bytes: int  # the largest sum over the tree less its root (a sweep's case, not its pytest)
    killed: bool  # the watchdog stopped it
    output: str


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0
    return 0


def tree_pids(root: int) -> list[int]:
    kids, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def _kill_tree(root: int) -> None:
    for pid in tree_pids(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_watched(
    argv: Sequence[str], *, limit_bytes: int, timeout_s: float, cwd: str | Path | None = None, env=None
) -> Watched:
    """Run argv; SIGKILL its tree when its summed RSS passes limit_bytes or it runs past timeout_s."""
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"watched-{os.getpid()}-{time.monotonic_ns()}.log"
    with open(out_path, "w+b") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        peak_tree = peak_one = peak_below = 0
        killed = False
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            sizes = [_rss(pid) for pid in tree_pids(proc.pid)]  # the root first
            peak_tree, peak_one = max(peak_tree, sum(sizes)), max(peak_one, max(sizes, default=0))
            peak_below = max(peak_below, sum(sizes[1:]))
            if sum(sizes) > limit_bytes or time.monotonic() > deadline:
                killed = True
                _kill_tree(proc.pid)
                break
            time.sleep(POLL_S)
        code = proc.wait()
        out.seek(0)
        text = out.read().decode(errors="replace")
    out_path.unlink(missing_ok=True)
    return Watched(code, peak_tree, peak_one, peak_below, killed, text)
