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
from fsdp_bench.processes import TORCHRUN_GRACE_S, stop_case
from fsdp_bench.results import (
    SCHEMA_VERSION,
    ResultError,
    case_result_path,
    read_json,
    utc_now,
    write_json_atomic,
)

LOG_TAIL_CHARS = 4000
CLASSIFY_TAIL_CHARS = 64000  # torchrun's failure summary lists every failed rank; read enough
PROJECT_ROOT = Path(fsdp_bench.__file__).resolve().parent.parent


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
        "--monitor-interval", "0.1",
        "-m", "fsdp_bench.worker",
        "--case", str(case_file),
        "--out", str(out_dir),
    ]


def build_env(base: dict[str, str] | None = None, *, grace_s: float = TORCHRUN_GRACE_S) -> dict[str, str]:
    """The worker's environment: this checkout importable, one thread per CPU rank, and
    torchrun's own SIGTERM-to-SIGKILL wait shorter than the runner's, so torchrun gets to
    kill its workers itself before the runner has to."""
    env = dict(os.environ if base is None else base)
    env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(max(1, int(grace_s * 0.5)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


# torchrun's failure summary: "rank      : 1 (local_rank: 1)" then "exitcode  : -9 (pid: ...)".
_RANK_EXIT_RE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*exitcode\s*:\s*(-?\d+)")
_EXITCODE_RE = re.compile(r"exitcode\s*:\s*-(\d+)")
# A collective that gave up waiting: the process-group timeout fired because another rank hung.
_COLLECTIVE_TIMEOUT_RE = re.compile(
    r"Timed out waiting|Watchdog caught collective operation timeout|collective operation timeout"
    r"|Socket Timeout|wait timeout after|timed out after \d+", re.I)
# An error a rank raised only because a peer died first; never the root cause.
_PEER_LOST_RE = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker crash|Broken pipe"
    r"|Connection refused|communicator was aborted|ncclRemoteError", re.I)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def rank_signals(log_tail: str) -> dict[int, str]:
    """rank -> name of the signal that ended it, from torchrun's failure summary."""
    return {int(rank): signal_name(-int(code)) for rank, code in _RANK_EXIT_RE.findall(log_tail)
            if int(code) < 0}


def rank_failure_kind(record: dict[str, Any] | None) -> str:
    """What one rank's record says happened to it: ok, skipped, oom, error, died (no final
    record: killed by a signal), collective_timeout, peer_lost or terminated (stopped by SIGTERM)."""
    if record is None or record.get("status") in (None, "running"):
        return "died"
    status = record["status"]
    if status in ("ok", "skipped", "oom", "terminated"):
        return status
    message = (record.get("error") or {}).get("message", "")
    if _COLLECTIVE_TIMEOUT_RE.search(message):
        return "collective_timeout"
    if _PEER_LOST_RE.search(message):
        return "peer_lost"
    return "error"


@dataclass(frozen=True)
class Outcome:
    status: str
    reason: str
    rank: int | None = None  # the rank the status is about (first to fail), when there is one
    stage: str | None = None


def _first(records: list[dict[str, Any]]) -> dict[str, Any]:
    return min(records, key=lambda r: ((r.get("error") or {}).get("time_unix", float("inf")), r.get("rank", 0)))


def classify_outcome(*, returncode: int | None, timed_out: bool, ranks: Sequence[dict[str, Any]],
                     world_size: int, log_tail: str, timeout_s: float | None = None,
                     expected_ranks: Sequence[int] | None = None) -> Outcome:
    """ok|failed|oom|timeout|skipped from what the case left behind. Pure, so it is unit-tested.

    A rank's own record beats torchrun's exit code: torchrun exits 1 for every failure and its
    'root cause' may name a rank it killed itself. Causes beat consequences: an OOM, then an
    exception (the first raised), then a rank that died without a final record (killed by a
    signal), then a collective timeout (another rank hung: `timeout`); errors that only say a
    peer vanished, and ranks stopped by SIGTERM, are never the cause.
    """
    by_rank = {r.get("rank"): r for r in ranks}
    kinds: dict[str, list[dict[str, Any]]] = {}
    for rank in (range(world_size) if expected_ranks is None else expected_ranks):
        record = by_rank.get(rank)
        kinds.setdefault(rank_failure_kind(record), []).append(record or {"rank": rank, "stage": None})

    def about(kind: str) -> dict[str, Any]:
        return _first(kinds[kind])

    if timed_out:
        stages = sorted({r.get("stage") or "?" for r in ranks})
        where = f"; ranks had reached: {', '.join(stages)}" if stages else ""
        limit = f" of {timeout_s:g}s" if timeout_s is not None else ""
        hung = ""
        if "collective_timeout" in kinds:
            hung = f"; rank {about('collective_timeout')['rank']}'s collective had timed out (another rank hung)"
        return Outcome("timeout", f"case exceeded its timeout{limit} and was stopped{where}{hung}")
    for kind, status, verb in (("oom", "oom", "ran out of memory"), ("error", "failed", "raised")):
        if kind in kinds:
            first = about(kind)
            err = first.get("error") or {}
            what = f"{verb} {err.get('type')}" if kind == "error" else verb
            return Outcome(status, f"rank {first['rank']} {what} at stage {first.get('stage')}: "
                                   f"{err.get('message', '')[:300]}", first["rank"], first.get("stage"))
    if "died" in kinds:
        signals = rank_signals(log_tail)
        first = next((r for r in kinds["died"] if r["rank"] in signals), kinds["died"][0])
        rank = first["rank"]
        if rank in signals:
            how = f"was killed by {signals[rank]}"
        elif returncode is not None and returncode < 0:
            how = f"was lost: torchrun itself was killed by {signal_name(-returncode)}"
        else:
            match = _EXITCODE_RE.search(log_tail)
            how = (f"died without a result (a rank was killed by {signal_name(int(match.group(1)))})"
                   if match else f"died without a result (torchrun exited with {returncode})")
        stage = first.get("stage")
        at = f" at stage {stage}" if stage else " before it started"
        return Outcome("failed", f"rank {rank} {how}{at}", rank, stage)
    if "collective_timeout" in kinds:
        first = about("collective_timeout")
        err = first.get("error") or {}
        return Outcome("timeout", f"rank {first['rank']}'s collective timed out at stage {first.get('stage')} "
                                  f"(another rank hung): {err.get('message', '')[:300]}",
                       first["rank"], first.get("stage"))
    for kind in ("peer_lost", "terminated"):
        if kind in kinds:
            first = about(kind)
            err = first.get("error") or {}
            return Outcome("failed", f"rank {first['rank']} {kind.replace('_', ' ')} at stage "
                                     f"{first.get('stage')}: {err.get('message', '')[:300]}",
                           first["rank"], first.get("stage"))
    if "skipped" in kinds:
        first = kinds["skipped"][0]
        return Outcome("skipped", (first.get("error") or {}).get("message", "skipped"))
    if returncode != 0:
        return Outcome("failed", f"every rank finished but torchrun exited with {returncode}")
    return Outcome("ok", "")


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


def _node_local_ranks(ranks: list[dict[str, Any]], local: int) -> list[int]:
    """The global ranks one node ran. The c10d rendezvous, not --bench-node-rank, decides which
    they are, so they are the ones whose files are here; with none written, assume the first."""
    return sorted(r["rank"] for r in ranks) if ranks else list(range(local))


def _collect_ranks(case: Case, run_dir: Path, launch: Launch) -> tuple[list[dict[str, Any]], list[int], str]:
    """All rank records of a case this node can see, the ranks it expects, and a note.

    Node 0 of a multi-node case also reads the other nodes' folders; when those are not
    visible (no shared filesystem) it expects only its own ranks and says so.
    """
    if case.simulate:
        return _read_ranks([run_dir_work(run_dir, case, launch)], 1), [0], ""
    if not launch.multi_node:
        return _read_ranks([run_dir_work(run_dir, case, launch)], case.nproc), list(range(case.nproc)), ""
    own = run_dir_work(run_dir, case, launch)
    local = case.nproc // launch.nnodes
    if not launch.owns_results:
        ranks = _read_ranks([own], case.nproc)
        return ranks, _node_local_ranks(ranks, local), ""
    dirs = rank_file_dirs(run_dir, case.id, launch.nnodes)
    deadline = time.monotonic() + REMOTE_RANK_WAIT_S
    while True:
        ranks = _read_ranks(dirs, case.nproc)
        shared = all(d.parent.is_dir() for d in dirs[1:])
        if len(ranks) >= case.nproc or not shared or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if shared:
        return ranks, list(range(case.nproc)), ""
    return ranks, _node_local_ranks(ranks, local), (f"other nodes' folders under {Path(run_dir) / 'nodes'} are not visible here "
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

    Whatever happens (timeout, Ctrl-C, SIGTERM turned into an exception by the caller), no
    process of the case is left when this returns or raises. An interrupted case writes no
    result: `--bench-resume` sets its folder aside and runs it again.
    """
    work_dir = run_dir_work(run_dir, case, launch)
    work_dir.mkdir(parents=True, exist_ok=False)
    case_file = work_dir / "case.json"
    write_json_atomic(case_file, case.to_dict())
    log_path = work_dir / "log.txt"
    started, started_utc, launched_unix = time.monotonic(), utc_now(), time.time()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            build_command(case, case_file, work_dir, launch=launch, join_timeout_s=timeout_s), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=build_env(env, grace_s=grace_s), cwd=work_dir,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also on Ctrl-C or SIGTERM to the parent: leave no process behind
            leftover = stop_case(proc, work_dir, grace_s=grace_s)
    ranks, expected, note = _collect_ranks(case, run_dir, launch)
    log_tail = _tail(log_path, CLASSIFY_TAIL_CHARS)
    outcome = classify_outcome(returncode=proc.returncode, timed_out=timed_out, ranks=ranks,
                               world_size=len(expected), log_tail=log_tail, timeout_s=timeout_s,
                               expected_ranks=expected)
    log_tail = log_tail[-LOG_TAIL_CHARS:]
    result = {
        "schema_version": SCHEMA_VERSION,
        "case_id": case.id,
        "case": case.to_dict(),
        "status": outcome.status,
        "reason": outcome.reason,
        "failed_rank": outcome.rank,
        "failed_stage": outcome.stage,
        "returncode": proc.returncode,
        "started_utc": started_utc,
        "duration_s": time.monotonic() - started,
        "launched_unix": launched_unix,
        "finished_unix": time.time(),
        "log_tail": log_tail if outcome.status != "ok" else log_tail[-500:],
        "metrics": aggregate_rank_metrics(
            tokens_per_step=case.tokens_per_step, samples_per_step=case.global_batch_size,
            world_size=case.nproc, ranks=ranks,
        ) if ranks else {},
        "ranks": ranks,
    }
    if leftover:  # never expected; said loudly rather than hidden
        result["leftover_pids"] = leftover
    if launch.multi_node:
        result["launch"] = {"nnodes": launch.nnodes, "node_rank": launch.node_rank,
                            "rdzv_endpoint": launch.rdzv_endpoint, "run_id": launch.run_id, "note": note}
    if case.simulate and ranks and ranks[0].get("simulation"):
        result["simulation"] = ranks[0]["simulation"]
        result["metrics"].update(ranks[0]["simulation"].get("metrics", {}))
    write_json_atomic(case_result_path(node_dir(run_dir, launch.node_rank), case.id), result)
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


