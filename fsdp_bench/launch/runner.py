"""The parent side of one case: launch torchrun in its own session, bound it in time, clean up,
merge the ranks' JSON into one result and classify the outcome (`launch.outcome`).

Talks to the worker only through argv and JSON files (never its stdout), and imports no torch.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fsdp_bench.analysis.aggregate import case_metrics
from fsdp_bench.launch.commands import build_command, ranks_per_node
from fsdp_bench.launch.outcome import Outcome, classify_outcome
from fsdp_bench.launch.processes import TORCHRUN_GRACE_S, build_env, stop_case, wait_until_gone
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.flavors import LAUNCH_CWD_ENV
from fsdp_bench.plan.nodes import CASE_DEADLINE_ENV, Launch
from fsdp_bench.results.io import read_json, utc_now, write_json_atomic
from fsdp_bench.results.layout import CaseDir, RunLayout
from fsdp_bench.results.records import CaseFields, CaseResult, RankRecord
from fsdp_bench.results.schema import SCHEMA_VERSION, ResultError
from fsdp_bench.results.work import work_of

LOG_TAIL_CHARS = 4000
CLASSIFY_TAIL_CHARS = 64000  # torchrun's failure summary lists every failed rank; read enough


def _read_ranks(work_dirs: Sequence[CaseDir], world_size: int) -> list[RankRecord]:
    """Rank records found in any of the folders, by rank (each rank writes in one of them)."""
    ranks = []
    for rank in range(world_size):
        for work_dir in work_dirs:
            path = work_dir.rank_file(rank)
            if path.exists():
                try:
                    ranks.append(read_json(path))
                except ResultError:
                    continue
                break
    return ranks


REMOTE_RANK_WAIT_S = 60.0  # other nodes' ranks write their files just after the final barrier


def _node_local_ranks(ranks: list[RankRecord], local: int) -> list[int]:
    """The global ranks one node ran. The c10d rendezvous, not --bench-node-rank, decides which
    they are, so they are the ones whose files are here; with none written, assume the first."""
    return sorted(r["rank"] for r in ranks) if ranks else list(range(local))


def _collect_ranks(
    case: Case, run: RunLayout, launch: Launch, repeat: int | None = None
) -> tuple[list[RankRecord], list[int], str]:
    """All rank records of a case this node can see, the ranks it expects, and a note.

    Node 0 of a multi-node case also reads the other nodes' folders; when those are not
    visible (no shared filesystem) it expects only its own ranks and says so.
    """
    own = run.case_dir(case.id, launch.node_rank, repeat)
    if case.simulate:
        return _read_ranks([own], 1), [0], ""
    if not launch.multi_node:
        return _read_ranks([own], case.nproc), list(range(case.nproc)), ""
    local = case.nproc // launch.nnodes
    if not launch.owns_results:
        ranks = _read_ranks([own], case.nproc)
        return ranks, _node_local_ranks(ranks, local), ""
    dirs = run.case_dirs(case.id, launch.nnodes, repeat)
    deadline = time.monotonic() + REMOTE_RANK_WAIT_S
    while True:
        ranks = _read_ranks(dirs, case.nproc)
        shared = all(d.path.parent.is_dir() for d in dirs[1:])
        if len(ranks) >= case.nproc or not shared or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if shared:
        return ranks, list(range(case.nproc)), ""
    return (
        ranks,
        _node_local_ranks(ranks, local),
        (
            f"other nodes' folders under {run.node_root(1).parent} are not visible here "
            f"(no shared filesystem?): the result holds node 0's {local} rank(s) only"
        ),
    )


def _tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - chars))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def run_case(
    case: Case,
    run_dir: Path,
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    grace_s: float = TORCHRUN_GRACE_S,
    launch: Launch = Launch(),
    repeat: int | None = None,
) -> CaseResult:
    """Run one case in a fresh torchrun and save its merged result; returns that result.
    With `repeat`, it is that repeat of the case, in the repeat's own folder and result file.

    On a node other than node 0 of a multi-node sweep, the node's own summary goes to its
    node folder instead (the merged result is node 0's to write, once).

    Whatever happens (timeout, Ctrl-C, SIGTERM turned into an exception by the caller), no
    process of the case is left when this returns or raises. An interrupted case writes no
    result: `--bench-resume` sets its folder aside and runs it again.
    """
    run = RunLayout(Path(run_dir).resolve())
    work = run.case_dir(case.id, launch.node_rank, repeat)
    work.path.mkdir(parents=True, exist_ok=False)
    write_json_atomic(work.case_file, case.to_dict(), shape=CaseFields, make_parents=False)
    started = {"monotonic": time.monotonic(), "utc": utc_now(), "unix": time.time()}
    returncode, timed_out, leftover = _launch_and_wait(
        case, work, timeout_s=timeout_s, env=env, grace_s=grace_s, launch=launch, repeat=repeat
    )
    ranks, expected, note = _collect_ranks(case, run, launch, repeat)
    log_tail = _tail(work.log_file, CLASSIFY_TAIL_CHARS)
    outcome = classify_outcome(
        returncode=returncode,
        timed_out=timed_out,
        ranks=ranks,
        world_size=len(expected),
        log_tail=log_tail,
        timeout_s=timeout_s,
        expected_ranks=expected,
    )
    result = _merged_result(
        case, outcome, ranks, returncode=returncode, started=started, log_tail=log_tail[-LOG_TAIL_CHARS:]
    )
    if leftover:  # never expected; said loudly rather than hidden
        result["leftover_pids"] = leftover
    if launch.multi_node:
        result["launch"] = {
            "nnodes": launch.nnodes,
            "node_rank": launch.node_rank,
            "rdzv_endpoint": launch.rdzv_endpoint,
            "run_id": launch.run_id,
            "note": note,
        }
    if repeat is not None:
        result["repeat"] = repeat
    # never make the run folder again: one deleted under the case stops the sweep (SweepSession)
    write_json_atomic(run.result_file(case.id, launch.node_rank, repeat), result, shape=CaseResult, make_parents=False)
    return result


def skip_case(
    case: Case, run_dir: Path, reason: str, *, launch: Launch = Launch(), repeat: int | None = None
) -> CaseResult:
    """A case not launched (the host-memory guard): a `skipped` result with its one-line reason,
    saved like any result (a failed case is data), no case folder and no process."""
    run = RunLayout(Path(run_dir).resolve())
    now = {"monotonic": time.monotonic(), "utc": utc_now(), "unix": time.time()}
    result = _merged_result(case, Outcome("skipped", reason), [], returncode=None, started=now, log_tail="")
    if repeat is not None:
        result["repeat"] = repeat
    # never make the run folder again: one deleted under the case stops the sweep (SweepSession)
    write_json_atomic(run.result_file(case.id, launch.node_rank, repeat), result, shape=CaseResult, make_parents=False)
    return result


def _case_env(
    case: Case, env: dict[str, str] | None, grace_s: float, launch: Launch, timeout_s: float
) -> dict[str, str]:
    out = build_env(env, grace_s=grace_s, device=case.device, ranks_per_node=ranks_per_node(case.nproc, launch.nnodes))
    out[CASE_DEADLINE_ENV] = str(timeout_s + grace_s)  # torchrun's own stop if this process is gone by then
    out.setdefault(LAUNCH_CWD_ENV, os.getcwd())  # a relative hf:PATH, from the worker's case folder
    return out


def _launch_and_wait(
    case: Case,
    work: CaseDir,
    *,
    timeout_s: float,
    env: dict[str, str] | None,
    grace_s: float,
    launch: Launch,
    repeat: int | None = None,
) -> tuple[int | None, bool, list[int]]:
    """Start the case's torchrun in its own session, wait at most `timeout_s`, and stop whatever
    is left (also on Ctrl-C or SIGTERM to the parent). (returncode, timed_out, leftover pids)."""
    timed_out = False
    with open(work.log_file, "wb") as log:
        try:
            proc = subprocess.Popen(
                build_command(case, work.case_file, work.path, launch=launch, join_timeout_s=timeout_s, repeat=repeat),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_case_env(case, env, grace_s, launch, timeout_s),
                cwd=work.path,
                start_new_session=True,
            )
        except BaseException:
            # Ctrl-C or SIGTERM while Popen was starting torchrun: the child may already run, in
            # its own session, with no Popen object to stop it by; find it by its case folder.
            wait_until_gone(work.path)
            raise
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also on Ctrl-C or SIGTERM to the parent: leave no process behind
            leftover = stop_case(proc, work.path, grace_s=grace_s)
    return proc.returncode, timed_out, leftover


def _merged_result(
    case: Case,
    outcome: Outcome,
    ranks: list[RankRecord],
    *,
    returncode: int | None,
    started: dict[str, Any],
    log_tail: str,
) -> CaseResult:
    """The case's result file: status and why, timings of the launch, headline metrics, every rank."""
    result = {
        "schema_version": SCHEMA_VERSION,
        "case_id": case.id,
        "case": case.to_dict(),
        "work": work_of(case.to_dict()),
        "status": outcome.status,
        "reason": outcome.reason,
        "failed_rank": outcome.rank,
        "failed_stage": outcome.stage,
        "returncode": returncode,
        "started_utc": started["utc"],
        "duration_s": time.monotonic() - started["monotonic"],
        "launched_unix": started["unix"],
        "finished_unix": time.time(),
        "log_tail": log_tail if outcome.status != "ok" else log_tail[-500:],
        "metrics": case_metrics(case, ranks, ranks[0].get("simulation") if case.simulate and ranks else None),
        "ranks": ranks,
    }
    if case.simulate and ranks and ranks[0].get("simulation"):
        result["simulation"] = ranks[0]["simulation"]
    return result
