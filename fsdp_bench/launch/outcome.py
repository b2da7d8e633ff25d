"""What happened to a case: ok|failed|oom|timeout|skipped from the records its ranks left and
torchrun's exit, with the rank and stage the status is about. Pure, so every rule is unit-tested."""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from fsdp_bench.results.records import RankRecord

# torchrun's failure summary: "rank      : 1 (local_rank: 1)" then "exitcode  : -9 (pid: ...)".
_RANK_EXIT_RE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*exitcode\s*:\s*(-?\d+)")
_EXITCODE_RE = re.compile(r"exitcode\s*:\s*-(\d+)")
# A collective that gave up waiting: the process-group timeout fired because another rank hung.
_COLLECTIVE_TIMEOUT_RE = re.compile(
    r"Timed out waiting|Watchdog caught collective operation timeout|collective operation timeout"
    r"|Socket Timeout|wait timeout after|timed out after \d+",
    re.I,
)
# An error a rank raised only because a peer died first; never the root cause.
_PEER_LOST_RE = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker crash|Broken pipe"
    r"|Connection refused|communicator was aborted|ncclRemoteError",
    re.I,
)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def rank_signals(log_tail: str) -> dict[int, str]:
    """rank -> name of the signal that ended it, from torchrun's failure summary."""
    return {int(rank): signal_name(-int(code)) for rank, code in _RANK_EXIT_RE.findall(log_tail) if int(code) < 0}


def rank_failure_kind(record: RankRecord | None) -> str:
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


def _first(records: list[RankRecord]) -> RankRecord:
    return min(records, key=lambda r: ((r.get("error") or {}).get("time_unix", float("inf")), r.get("rank", 0)))


def _timed_out(ranks: Sequence[RankRecord], kinds: dict[str, list[RankRecord]], timeout_s: float | None) -> Outcome:
    stages = sorted({r.get("stage") or "?" for r in ranks})
    where = f"; ranks had reached: {', '.join(stages)}" if stages else ""
    limit = f" of {timeout_s:g}s" if timeout_s is not None else ""
    hung = ""
    if "collective_timeout" in kinds:
        hung = f"; rank {_first(kinds['collective_timeout'])['rank']}'s collective had timed out (another rank hung)"
    return Outcome("timeout", f"case exceeded its timeout{limit} and was stopped{where}{hung}")


def _died(died: list[RankRecord], returncode: int | None, log_tail: str) -> Outcome:
    """A rank left no final record: name the signal that ended it, as torchrun's summary says."""
    signals = rank_signals(log_tail)
    first = next((r for r in died if r["rank"] in signals), died[0])
    rank = first["rank"]
    if rank in signals:
        how = f"was killed by {signals[rank]}"
    elif returncode is not None and returncode < 0:
        how = f"was lost: torchrun itself was killed by {signal_name(-returncode)}"
    else:
        match = _EXITCODE_RE.search(log_tail)
        how = (
            f"died without a result (a rank was killed by {signal_name(int(match.group(1)))})"
            if match
            else f"died without a result (torchrun exited with {returncode})"
        )
    stage = first.get("stage")
    at = f" at stage {stage}" if stage else " before it started"
    return Outcome("failed", f"rank {rank} {how}{at}", rank, stage)


def _rank_outcome(status: str, first: RankRecord, what: str, why: str = "") -> Outcome:
    """ "rank R <what> at stage S[ why]: <its error message>" for the rank that decides the case."""
    message = (first.get("error") or {}).get("message", "")[:300]
    joiner = "" if what.startswith("'") else " "
    where = f"rank {first['rank']}{joiner}{what} at stage {first.get('stage')}" + (f" {why}" if why else "")
    return Outcome(status, f"{where}: {message}", first["rank"], first.get("stage"))


def classify_outcome(
    *,
    returncode: int | None,
    timed_out: bool,
    ranks: Sequence[RankRecord],
    world_size: int,
    log_tail: str,
    timeout_s: float | None = None,
    expected_ranks: Sequence[int] | None = None,
) -> Outcome:
    """ok|failed|oom|timeout|skipped from what the case left behind. Pure, so it is unit-tested.

    A rank's own record beats torchrun's exit code: torchrun exits 1 for every failure and its
    'root cause' may name a rank it killed itself. Causes beat consequences: an OOM, then an
    exception (the first raised), then a rank that died without a final record (killed by a
    signal), then a collective timeout (another rank hung: `timeout`); errors that only say a
    peer vanished, and ranks stopped by SIGTERM, are never the cause.
    """
    by_rank = {r.get("rank"): r for r in ranks}
    kinds: dict[str, list[RankRecord]] = {}
    for rank in range(world_size) if expected_ranks is None else expected_ranks:
        record = by_rank.get(rank)
        kinds.setdefault(rank_failure_kind(record), []).append(record or {"rank": rank, "stage": None})

    def about(kind: str) -> RankRecord:
        return _first(kinds[kind])

    if timed_out:
        return _timed_out(ranks, kinds, timeout_s)
    for kind, status, verb in (("oom", "oom", "ran out of memory"), ("error", "failed", "raised")):
        if kind in kinds:
            first = about(kind)
            what = f"{verb} {(first.get('error') or {}).get('type')}" if kind == "error" else verb
            return _rank_outcome(status, first, what)
    if "died" in kinds:
        return _died(kinds["died"], returncode, log_tail)
    if "collective_timeout" in kinds:
        return _rank_outcome("timeout", about("collective_timeout"), "'s collective timed out", "(another rank hung)")
    consequences = [k for k in ("peer_lost", "terminated") if k in kinds]
    if consequences and returncode is not None and returncode < 0:  # the cause: torchrun's own death
        first = about(consequences[0])
        return Outcome(
            "failed",
            f"torchrun itself was killed by {signal_name(-returncode)}; rank {first['rank']} was then "
            f"{consequences[0].replace('_', ' ')} at stage {first.get('stage')}",
            first["rank"],
            first.get("stage"),
        )
    if consequences:
        return _rank_outcome("failed", about(consequences[0]), consequences[0].replace("_", " "))
    if "skipped" in kinds:
        first = kinds["skipped"][0]
        return Outcome("skipped", (first.get("error") or {}).get("message", "skipped"))
    if returncode != 0:
        return Outcome("failed", f"every rank finished but torchrun exited with {returncode}")
    return Outcome("ok", "")
