"""Issue #25: with --bench-repeats N the sweep's repeats run round-robin over the cases
(A1 B1 C1 A2 B2 C2 ...), so a drift of the shared machine's load spreads over every case; the
order, what one pytest item runs, failures, resume and the ETA, without any process."""

from __future__ import annotations

import pytest

from fsdp_bench.launch.progress import Progress
from fsdp_bench.launch.rounds import RepeatRounds, interleaved_order


def test_the_order_is_round_robin_not_back_to_back():
    assert interleaved_order(["a", "b", "c"], 2) == [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2), ("c", 2)]
    assert interleaved_order(["a", "b", "a"], 2) == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]  # once per id
    assert interleaved_order(["a"], 3) == [("a", 1), ("a", 2), ("a", 3)]
    with pytest.raises(ValueError):
        interleaved_order(["a"], 0)


def test_cases_may_ask_for_different_repeat_counts():
    """The tuner's rounds: round r runs every case that wants an r-th repeat."""
    assert interleaved_order(["a", "b", "c"], {"a": 2, "b": 3, "c": 1}) == [
        ("a", 1),
        ("b", 1),
        ("c", 1),
        ("a", 2),
        ("b", 2),
        ("b", 3),
    ]
    with pytest.raises(ValueError, match="b"):
        interleaved_order(["a", "b"], {"a": 1, "b": 0})


class FakeRounds(RepeatRounds):
    """Rounds over cases named by one letter whose `run_one` records what it ran."""

    def __init__(self, ids: str, repeats: int | dict[str, int], fail=frozenset(), kept=()) -> None:
        super().__init__([(i, i) for i in ids], repeats, kept=kept)
        self.fail, self.ran = fail, []

    def run_one(self, case: str, repeat: int) -> dict:
        self.ran.append((case, repeat))
        return {"status": "failed" if (case, repeat) in self.fail else "ok", "repeat": repeat}


def _rounds(ids: str, repeats: int | dict[str, int], fail=frozenset(), kept=()) -> tuple[FakeRounds, list]:
    rounds = FakeRounds(ids, repeats, fail, kept)
    return rounds, rounds.ran


def test_each_item_runs_the_pending_repeats_up_to_its_own_last():
    rounds, ran = _rounds("abc", 3)
    assert rounds.launches_left() == 9
    first = rounds.run_through("a", rounds.run_one)
    assert ran == [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2), ("c", 2), ("a", 3)]
    assert [r["repeat"] for r in first] == [1, 2, 3]
    assert rounds.launches_left() == 2 and not rounds.holds("a") and rounds.holds("b")
    assert [r["repeat"] for r in rounds.run_through("b", rounds.run_one)] == [1, 2, 3]
    assert [r["repeat"] for r in rounds.run_through("c", rounds.run_one)] == [1, 2, 3]
    assert ran[7:] == [("b", 3), ("c", 3)] and rounds.launches_left() == 0


def test_a_batch_with_different_counts_runs_each_case_s_own_repeats_round_robin():
    rounds, ran = _rounds("ab", {"a": 2, "b": 4})
    assert rounds.planned("a") == 2 and rounds.planned("b") == 4
    assert [r["repeat"] for r in rounds.run_through("a", rounds.run_one)] == [1, 2]
    assert ran == [("a", 1), ("b", 1), ("a", 2)]
    assert [r["repeat"] for r in rounds.run_through("b", rounds.run_one)] == [1, 2, 3, 4]
    assert ran[3:] == [("b", 2), ("b", 3), ("b", 4)] and rounds.launches_left() == 0


def test_items_in_another_order_keep_the_round_robin():
    rounds, ran = _rounds("ab", 2)
    rounds.run_through("b", rounds.run_one)
    rounds.run_through("a", rounds.run_one)
    assert ran == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]


def test_a_repeat_that_is_not_ok_ends_its_case_and_only_its_case():
    rounds, ran = _rounds("ab", 3, fail={("b", 1)})
    assert [r["status"] for r in rounds.run_through("a", rounds.run_one)] == ["ok"] * 3
    assert ran == [("a", 1), ("b", 1), ("a", 2), ("a", 3)]  # b's later repeats dropped
    assert rounds.launches_left() == 0
    assert [r["status"] for r in rounds.run_through("b", rounds.run_one)] == ["failed"]
    assert not rounds.holds("b")


def test_a_failed_first_repeat_returns_at_once():
    rounds, ran = _rounds("ab", 2, fail={("a", 1)})
    assert [r["status"] for r in rounds.run_through("a", rounds.run_one)] == ["failed"]
    assert ran == [("a", 1)]
    assert rounds.launches_left() == 2


def test_repeats_kept_on_resume_are_not_counted_as_launches():
    rounds, _ = _rounds("ab", 2, kept={("a", 1), ("b", 1)})
    assert rounds.launches_left() == 2


def test_the_eta_counts_the_launches_left_not_the_cases_left():
    """Interleaved, the first case finishes after most of the sweep's repeats: an ETA of
    (elapsed per case) x (cases left) would be far too long."""
    left = [9]
    progress = Progress(total=3, launches_left=lambda: left[0])
    progress.start()
    progress.started -= 70.0  # 70 s into the sweep
    for n in range(7):  # a1 b1 c1 a2 b2 c2 a3
        left[0] -= 1
        line = progress.finish_repeat("case-x", n // 3 + 1, 3, {"status": "ok"})
    assert line.startswith("[repeat 3/3] case-x  ok  elapsed 1m1")
    assert "ETA 0m2" in line  # 2 launches left at ~10 s each
    case_line = progress.finish_case("node-a", "case-a", {"status": "ok"})
    assert case_line.startswith("[1/3] case-a  ok") and "ETA 0m2" in case_line
    left[0] = 0
    progress.finish_case("node-b", "case-b", {"status": "ok"})
    assert "ETA" not in progress.finish_case("node-c", "case-c", {"status": "ok"})
