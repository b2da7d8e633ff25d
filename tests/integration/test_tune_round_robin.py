"""Issue #25, the tuner's side, on real cases (gpt_tiny, 2 gloo ranks, seq len 32, 2 steps): a
measuring round (`SweepSession.run_round`, what `--bench-tune` runs per round) runs its missing
repeats round-robin over the round's cases, read from the launch and finish times of the repeats'
result files; a case with some ok repeats keeps them, one with enough is not run again, and each
stays one ordinary merged result. No speed is asserted: timings on this shared machine are noise."""

from __future__ import annotations

import json

import pytest

from fsdp_bench.launch.session import SweepSession
from fsdp_bench.plan.options import parse_sweep
from tests.sweep_helpers import case_results

pytestmark = pytest.mark.slow

DDP = "ddp-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"
FSDP2 = "fsdp2-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"
OPTIONS = {
    "device": "cpu",
    "model": "gpt_tiny",
    "strategies": "ddp,fsdp2",
    "batch-sizes": "2",
    "grad-accum": "1",
    "steps": "2",
    "warmup": "1",
    "seq-len": "32",
    "nproc": "2",
    "target-ci-pct": "0",
    "no-probes": "on",  # nothing here reads a probe's figure
}


def _repeat_times(run) -> dict[tuple[str, int], tuple[float, float]]:
    """(case id, repeat) -> (launched_unix, finished_unix) of every repeat with a result file."""
    times = {}
    for case_id in (DDP, FSDP2):
        for path in (run / "cases" / case_id).glob("repeat-*.json"):
            result = json.loads(path.read_text())
            times[(case_id, int(path.stem.split("-")[1]))] = (result["launched_unix"], result["finished_unix"])
    return times


def test_a_tuning_round_runs_its_repeats_round_robin(tmp_path):
    session = SweepSession(parse_sweep({**OPTIONS, "results-dir": str(tmp_path)}, no_report=True))
    ddp, fsdp2 = session.sweep.cases()
    assert (ddp.id, fsdp2.id) == (DDP, FSDP2)
    try:
        first = list(session.run_round([(ddp, 1)]))  # a probe: ddp once
        assert [(c.id, r["status"]) for c, r in first] == [(DDP, "ok")]
        run = session.layout.root
        probe = _repeat_times(run)
        # a race: ddp (one repeat on disk) to 2, fsdp2 (none) to 3
        raced = list(session.run_round([(ddp, 2), (fsdp2, 3)]))
        times = _repeat_times(run)
        again = list(session.run_round([(ddp, 2), (fsdp2, 1)]))  # enough on disk: nothing runs
    finally:
        session.close()
    assert [c.id for c, _ in raced] == [DDP, FSDP2]  # yielded in batch order, as each is merged
    assert [r["status"] for _, r in raced] == ["ok", "ok"]
    order = sorted(times, key=lambda key: times[key][0])
    # round 1: ddp's kept repeat 1, fsdp2's 1; round 2: both; round 3: fsdp2 alone
    # (back to back would have been ddp 2, fsdp2 1, fsdp2 2, fsdp2 3)
    assert order == [(DDP, 1), (FSDP2, 1), (DDP, 2), (FSDP2, 2), (FSDP2, 3)], times
    assert all(times[a][1] <= times[b][0] for a, b in zip(order, order[1:])), times  # one at a time
    assert times[(DDP, 1)] == probe[(DDP, 1)]  # kept, not run again
    assert _repeat_times(run) == times  # the third round launched nothing
    assert [r["metrics"]["repeats"] for _, r in again] == [2, 3]
    results = case_results(run)
    assert sorted(results) == [DDP, FSDP2]
    assert results[DDP]["metrics"]["repeats"] == 2 and results[FSDP2]["metrics"]["repeats"] == 3
    # ddp's one-repeat merged result was set aside, its repeat folders stayed
    assert [p.name for p in (run / "cases" / ".attempts").iterdir()] == [f"{DDP}.1"]


def test_a_plain_ok_result_the_tuner_repeats_is_its_repeat_one(tmp_path):
    """Issue 37: a plain run's ok case (no repeats list) that a tuning round wants twice keeps its
    measurement as repeat 1 (its work files and result moved into the repeat layout) and launches
    repeat 2 only, instead of measuring repeat 1 again."""
    session = SweepSession(parse_sweep({**OPTIONS, "strategies": "ddp", "results-dir": str(tmp_path)}, no_report=True))
    (ddp,) = session.sweep.cases()
    try:
        plain = session.run(ddp)
        assert plain["status"] == "ok" and not plain.get("repeats")
        run = session.layout.root
        ((_, merged),) = list(session.run_round([(ddp, 2)]))
    finally:
        session.close()
    times = _repeat_times(run)
    assert sorted(times) == [(DDP, 1), (DDP, 2)]
    assert times[(DDP, 1)] == (plain["launched_unix"], plain["finished_unix"])  # kept, not re-run
    assert times[(DDP, 2)][0] >= plain["finished_unix"]
    assert merged["status"] == "ok" and merged["metrics"]["repeats"] == 2
    assert (run / "cases" / DDP / "repeat-1" / "log.txt").is_file()  # its work files moved with it
    assert not (run / "cases" / DDP / "log.txt").exists()
