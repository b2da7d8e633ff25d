"""The order in which a sweep runs its repeats (`--bench-repeats N`), pure (no processes, no
files): round-robin over the cases, A1 B1 C1 A2 B2 C2 ..., never A1 A2 A3 B1 ....

Why: a shared machine's load drifts over minutes. Run back to back, a case's repeats share the
load of their minute, so the spread between them misses the drift and one case can look faster
than another (or than itself in another run) by chance. Interleaved, every case's repeats sample
the whole sweep's span, and the drift lands in each case's run-to-run noise instead.

pytest still runs one item per case, in collection order: when the item of case X runs, the
rounds run every pending repeat in order up to X's last one (the first item runs rounds 1..N-1 of
all cases, then its own last repeat; each later item usually only its own last repeat), then hand
back X's repeats for merging. A repeat that is not ok ends its case: its later repeats are dropped.

The tuner's measuring rounds (launch.tune) use the same rounds over one round's batch, whose cases
may ask for different numbers of repeats: round r runs every case that wants an r-th repeat.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Generic, TypeVar

from fsdp_bench.results.records import CaseResult

K = TypeVar("K")  # what a case is to the rounds (the session uses `Case`)


Repeats = int | Mapping[str, int]  # one count for every case, or each case id's own


def interleaved_order(case_ids: Sequence[str], repeats: Repeats) -> list[tuple[str, int]]:
    """(case id, repeat) in the order they run: repeat 1 of every case, then repeat 2 of every
    case that wants a second, ...; a case id named twice runs once, at its first place.
    `repeats`: one count for all, or a count per case id (every id named)."""
    unique = list(dict.fromkeys(case_ids))
    counts = {cid: _count(repeats, cid) for cid in unique}
    rounds = max(counts.values(), default=0)
    return [(cid, repeat) for repeat in range(1, rounds + 1) for cid in unique if counts[cid] >= repeat]


def _count(repeats: Repeats, case_id: str) -> int:
    count = repeats if isinstance(repeats, int) else repeats[case_id]
    if count < 1:
        raise ValueError(f"repeats must be >= 1, not {count} ({case_id})")
    return count


class RepeatRounds(Generic[K]):
    """The sweep's pending repeats, in `interleaved_order`, and the results of those already run.

    `run_one(case, repeat)` runs (or, on resume, loads) one repeat and returns its result dict;
    `repeats` is one count for every case or each case id's own; `kept` names the (case id,
    repeat) pairs already ok on disk, which load instead of launching (they only make
    `launches_left` exact)."""

    def __init__(
        self, cases: Sequence[tuple[str, K]], repeats: Repeats, kept: Collection[tuple[str, int]] = ()
    ) -> None:
        self._cases = dict(cases)
        self._planned = {cid: _count(repeats, cid) for cid in self._cases}
        self._queue = deque(interleaved_order(list(self._planned), self._planned))
        self._kept = frozenset(kept)
        self._results: dict[str, list[CaseResult]] = {}
        self._ended: set[str] = set()

    def planned(self, case_id: str) -> int:
        """How many repeats `case_id` was planned with (a repeat that is not ok ends it sooner)."""
        return self._planned[case_id]

    def holds(self, case_id: str) -> bool:
        """True while the rounds still owe `case_id` its results (a later `run_through` gives them)."""
        return case_id in self._results or any(cid == case_id for cid, _ in self._queue)

    def launches_left(self) -> int:
        """How many repeats the rounds will still launch (dropped and kept ones not counted)."""
        return sum(cid not in self._ended and (cid, r) not in self._kept for cid, r in self._queue)

    def run_through(self, case_id: str, run_one: Callable[[K, int], CaseResult]) -> list[CaseResult]:
        """Run the pending repeats in order until `case_id` has all of its own (or one that is
        not ok ended it); return its repeats' results, in repeat order, and forget them."""
        while case_id not in self._ended and any(cid == case_id for cid, _ in self._queue):
            cid, repeat = self._queue.popleft()
            if cid in self._ended:
                continue
            result = run_one(self._cases[cid], repeat)
            self._results.setdefault(cid, []).append(result)
            if result.get("status") != "ok":
                self._ended.add(cid)
        self._queue = deque(entry for entry in self._queue if entry[0] != case_id)
        return self._results.pop(case_id, [])
