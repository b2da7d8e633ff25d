"""The `slow` fault (FSDP_BENCH_FAULTS=slow@measure:RANK[:FRACTION]) makes a case really slower:
inside every measured step the rank sleeps FRACTION (default 30%) of its fastest measured step so
far, so each recorded step time is at least (1 + FRACTION)x that. Warmup steps stay untouched.

Whether `visualize.py --compare` then claims the slowed run as a regression depends on the
machine's run-to-run noise; that is measured by scripts/measure_verdict_noise.py (numbers in
docs/verdicts.md), not asserted here, and the verdict rule itself is unit-tested with known
noise in tests/integration/test_compare_noise.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.plan.faults import SLOW_FRACTION  # noqa: E402
from fsdp_bench.worker import loop  # noqa: E402


@pytest.mark.parametrize("spec, fraction", [("slow@measure:0", SLOW_FRACTION), ("slow@measure:0:1.5", 1.5)])
def test_each_measured_step_sleeps_its_share_inside_the_timed_region(monkeypatch, spec, fraction):
    real_sleep = loop.time.sleep
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setenv("FSDP_BENCH_FAULTS", spec)
    monkeypatch.setattr(loop.time, "sleep", sleep)
    record = loop.run(Case(strategy="ddp", nproc=1, steps=3, warmup=2, seq_len=16, probes=False))
    assert record["status"] == "ok"
    steps = record["step_times_s"]
    assert len(slept) == len(steps) == 3  # one sleep per measured step, none in warmup
    for step, pause in zip(steps, slept):
        compute = pause / fraction
        assert step >= compute + pause  # the sleep is inside the timed step
    assert SLOW_FRACTION == 0.3


def test_without_the_fault_nothing_sleeps(monkeypatch):
    slept: list[float] = []
    monkeypatch.delenv("FSDP_BENCH_FAULTS", raising=False)
    monkeypatch.setattr(loop.time, "sleep", slept.append)
    record = loop.run(Case(strategy="ddp", nproc=1, steps=2, warmup=1, seq_len=16, probes=False))
    assert record["status"] == "ok" and slept == []


def test_the_sleep_does_not_feed_on_waiting(monkeypatch):
    """A step that waited long for a slowed peer does not make the next sleep longer: the sleep is a
    share of the fastest step so far (with two slowed ranks at 4, a share of the current step grew
    the steps 0.2 s, 6 s, 93 s)."""
    from fsdp_bench.worker.faults import SlowSteps

    slept: list[float] = []
    monkeypatch.setattr(loop.time, "sleep", slept.append)
    slow = SlowSteps(4.0)
    for busy in (0.2, 0.1, 6.0, 93.0, 0.15):
        slow.sleep(busy)
    assert slept == pytest.approx([0.8, 0.4, 0.4, 0.4, 0.4])
