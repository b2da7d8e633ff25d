"""The parent side of one case: launch torchrun in its own session, bound it in time, clean up,
merge the ranks' JSON into one result and classify the outcome.

Talks to the worker only through argv and JSON files (never its stdout), and imports no torch.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import fsdp_bench
from fsdp_bench.case import Case
from fsdp_bench.metrics import aggregate_rank_metrics
from fsdp_bench.multinode import Launch, node_dir, rank_file_dirs, torchrun_rendezvous_args
from fsdp_bench.results import (
    SCHEMA_VERSION,
    ResultError,
    case_result_path,
    load_case_result,
    read_json,
    utc_now,
    write_json_atomic,
)

LOG_TAIL_CHARS = 4000
TORCHRUN_GRACE_S = 30.0  # how long torchrun gets to stop its workers after SIGTERM
PROJECT_ROOT = Path(fsdp_bench.__file__).resolve().parent.parent


@dataclass(frozen=True)
class Outcome:
    status: str
    reason: str


def build_command(case: Case, case_file: Path, out_dir: Path, *, python: str = sys.executable,
                  launch: Launch = Launch(), join_timeout_s: float = 600.0) -> list[str]:
    """The command line for one case on this node.

    One node: `--standalone` lets the c10d rendezvous bind localhost:0 itself, so concurrent
    sweeps never race for a port. Several nodes: see `fsdp_bench.multinode`. A simulated case
    is one process, rank 0 of its world, without torchrun. `--max-restarts 0` because a
    benchmark must not silently retry.
    """
    if case.simulate:
        return [python, "-m", "fsdp_bench.simulate", "--case", str(case_file), "--out", str(out_dir)]
    return [
        python, "-m", "torch.distributed.run",
        *torchrun_rendezvous_args(launch, case_id=case.id, world_size=case.nproc, join_timeout_s=join_timeout_s),
        "--max-restarts", "0",
        "--monitor-interval", "0.5",
        "-m", "fsdp_bench.worker",
        "--case", str(case_file),
        "--out", str(out_dir),
    ]


def build_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: this checkout importable, one thread per CPU rank."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


_SIGNAL_RE = re.compile(r"exitcode\s*:\s*-(\d+)")


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def classify_outcome(*, returncode: int | None, timed_out: bool, ranks: Sequence[dict[str, Any]],
                     world_size: int, log_tail: str) -> Outcome:
    """ok|failed|oom|timeout|skipped from what the case left behind. Pure, so it is unit-tested.

    A rank's own record beats torchrun's exit code: torchrun exits 1 for every failure and its
    'root cause' may name a rank it killed itself. Among failed ranks the first to raise wins.
    """
    if timed_out:
        stages = sorted({r.get("stage", "?") for r in ranks})
        where = f" (ranks had reached: {', '.join(stages)})" if stages else ""
        return Outcome("timeout", f"case exceeded its timeout{where}")
    errored = sorted((r for r in ranks if r.get("status") in ("failed", "oom")),
                     key=lambda r: (r.get("error") or {}).get("time_unix", float("inf")))
    if any(r.get("status") == "oom" for r in errored):
        first = next(r for r in errored if r["status"] == "oom")
        return Outcome("oom", f"rank {first['rank']} out of memory at stage {first.get('stage')}: "
                              f"{(first.get('error') or {}).get('message', '')[:300]}")
    if errored:
        first = errored[0]
        err = first.get("error") or {}
        return Outcome("failed", f"rank {first['rank']} raised {err.get('type')} at stage "
                                 f"{first.get('stage')}: {err.get('message', '')[:300]}")
    skipped = [r for r in ranks if r.get("status") == "skipped"]
    if skipped:
        return Outcome("skipped", (skipped[0].get("error") or {}).get("message", "skipped"))
    if returncode is not None and returncode < 0:
        return Outcome("failed", f"torchrun killed by {signal_name(-returncode)}")
    match = _SIGNAL_RE.search(log_tail)
    missing = world_size - len(ranks)
    if returncode != 0 or missing:
        if match:
            return Outcome("failed", f"a rank was killed by {signal_name(int(match.group(1)))}"
                                     f" ({missing} of {world_size} ranks wrote no result)")
        return Outcome("failed", f"torchrun exited with {returncode}; {missing} of {world_size} ranks wrote no result")
    if any(r.get("status") != "ok" for r in ranks):
        return Outcome("failed", "a rank ended without a final status")
    return Outcome("ok", "")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_our_worker(pid: int, marker: str) -> bool:
    """Guards against pid reuse: only kill a process whose command line names our case folder."""
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False


def kill_ranks(work_dir: Path) -> list[int]:
    """SIGKILL every rank of a case still alive, by the pid each recorded. Returns those killed."""
    killed = []
    for pid_path in Path(work_dir).glob("rank-*.pid"):
        try:
            pid = int(pid_path.read_text().strip())
        except (OSError, ValueError):
            continue
        if _alive(pid) and _is_our_worker(pid, str(work_dir)):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def stop_case(proc: subprocess.Popen, work_dir: Path, *, grace_s: float = TORCHRUN_GRACE_S) -> None:
    """Stop torchrun the way it expects: SIGTERM (it forwards to its workers), SIGKILL after the
    grace period, then any rank left behind. Each rank runs in its own session since torch 2.2,
    so killing torchrun's process group alone would orphan them."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    kill_ranks(work_dir)
    # Ranks may still be unwinding when torchrun returns; wait (bounded) until none is left.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and kill_ranks(work_dir):
        time.sleep(0.1)


def _read_ranks(work_dirs: Sequence[Path], world_size: int) -> list[dict[str, Any]]:
    """Rank records found in any of the folders, by rank (each rank writes in one of them)."""
    ranks = []
    for rank in range(world_size):
        for work_dir in work_dirs:
            path = Path(work_dir) / f"rank-{rank}.json"
            if path.exists():
                try:
                    ranks.append(read_json(path))
                except ResultError:
                    continue
                break
    return ranks


REMOTE_RANK_WAIT_S = 60.0  # other nodes' ranks write their files just after the final barrier


def _collect_ranks(case: Case, run_dir: Path, launch: Launch) -> tuple[list[dict[str, Any]], int, str]:
    """All rank records of a case this node can see, how many it expects, and a note.

    Node 0 of a multi-node case also reads the other nodes' folders; when those are not
    visible (no shared filesystem) it expects only its own ranks and says so.
    """
    if case.simulate:
        return _read_ranks([run_dir_work(run_dir, case, launch)], 1), 1, ""
    if not launch.multi_node:
        return _read_ranks([run_dir_work(run_dir, case, launch)], case.nproc), case.nproc, ""
    own = run_dir_work(run_dir, case, launch)
    if not launch.owns_results:
        local = case.nproc // launch.nnodes
        return [r for r in _read_ranks([own], case.nproc)], local, ""
    dirs = rank_file_dirs(run_dir, case.id, launch.nnodes)
    deadline = time.monotonic() + REMOTE_RANK_WAIT_S
    while True:
        ranks = _read_ranks(dirs, case.nproc)
        shared = all(d.parent.is_dir() for d in dirs[1:])
        if len(ranks) >= case.nproc or not shared or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if shared:
        return ranks, case.nproc, ""
    local = case.nproc // launch.nnodes
    return ranks, local, (f"other nodes' folders under {Path(run_dir) / 'nodes'} are not visible here "
                          f"(no shared filesystem?): the result holds node 0's {local} rank(s) only")


def run_dir_work(run_dir: Path, case: Case, launch: Launch) -> Path:
    """This node's work folder for one case (see fsdp_bench.multinode for the layout)."""
    return node_dir(Path(run_dir).resolve(), launch.node_rank) / "cases" / case.id


def _tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - chars))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def run_case(case: Case, run_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None,
             grace_s: float = TORCHRUN_GRACE_S, launch: Launch = Launch()) -> dict[str, Any]:
    """Run one case in a fresh torchrun and save its merged result; returns that result.

    On a node other than node 0 of a multi-node sweep, the node's own summary goes to its
    node folder instead (the merged result is node 0's to write, once).
    """
    work_dir = run_dir_work(run_dir, case, launch)
    work_dir.mkdir(parents=True, exist_ok=False)
    case_file = work_dir / "case.json"
    write_json_atomic(case_file, case.to_dict())
    log_path = work_dir / "log.txt"
    started, started_utc = time.monotonic(), utc_now()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            build_command(case, case_file, work_dir, launch=launch, join_timeout_s=timeout_s), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=build_env(env), cwd=work_dir, start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:  # Ctrl-C or SIGTERM to the parent: leave no process behind
            stop_case(proc, work_dir, grace_s=grace_s)
            raise
        finally:
            if proc.poll() is None or timed_out:
                stop_case(proc, work_dir, grace_s=grace_s)
            else:
                kill_ranks(work_dir)
    ranks, expected, note = _collect_ranks(case, run_dir, launch)
    log_tail = _tail(log_path)
    outcome = classify_outcome(returncode=proc.returncode, timed_out=timed_out, ranks=ranks,
                               world_size=expected, log_tail=log_tail)
    result = {
        "schema_version": SCHEMA_VERSION,
        "case_id": case.id,
        "case": case.to_dict(),
        "status": outcome.status,
        "reason": outcome.reason,
        "returncode": proc.returncode,
        "started_utc": started_utc,
        "duration_s": time.monotonic() - started,
        "log_tail": log_tail if outcome.status != "ok" else log_tail[-500:],
        "metrics": aggregate_rank_metrics(
            tokens_per_step=case.tokens_per_step, samples_per_step=case.global_batch_size,
            world_size=case.nproc, ranks=ranks,
        ) if ranks else {},
        "ranks": ranks,
    }
    if launch.multi_node:
        result["launch"] = {"nnodes": launch.nnodes, "node_rank": launch.node_rank,
                            "rdzv_endpoint": launch.rdzv_endpoint, "run_id": launch.run_id, "note": note}
    if case.simulate and ranks and ranks[0].get("simulation"):
        result["simulation"] = ranks[0]["simulation"]
        result["metrics"].update(ranks[0]["simulation"].get("metrics", {}))
    out = case_result_path(node_dir(run_dir, launch.node_rank), case.id)
    write_json_atomic(out, result)
    return result


def start_rendezvous_store(launch: Launch, *, env: dict[str, str] | None = None,
                           timeout_s: float = 120.0) -> subprocess.Popen:
    """Node 0's sweep-long rendezvous store (see fsdp_bench.rendezvous). It exits when the
    returned process's stdin is closed; `stop_rendezvous_store` does that."""
    _host, port = launch.rdzv_host_port()
    proc = subprocess.Popen([sys.executable, "-m", "fsdp_bench.rendezvous", "--port", str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=build_env(env), start_new_session=True)
    deadline = time.monotonic() + timeout_s
    line = b""
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        if line.strip() == b"ready":
            return proc
    rest = proc.stdout.read() if proc.poll() is not None else b""
    stop_rendezvous_store(proc)
    raise RuntimeError(f"--bench-rdzv-endpoint: could not host the rendezvous store on port {port}: "
                       f"{(line + rest).decode(errors='replace').strip()[-500:]}")


def stop_rendezvous_store(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()


def load_finished(run_dir: Path, case_id: str) -> dict[str, Any] | None:
    path = case_result_path(run_dir, case_id)
    return load_case_result(path) if path.exists() else None
