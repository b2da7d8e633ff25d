"""--bench-no-probes: the untimed probe steps are skipped, and what they would have measured is
null with the reason, while the timed steps and the formula-based numbers stay."""

import pytest

torch = pytest.importorskip("torch")

from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.plan.options import parse_sweep  # noqa: E402
from fsdp_bench.worker.loop import run  # noqa: E402
from fsdp_bench.worker.probes import PROBES_OFF  # noqa: E402


def _probe_seconds(record):
    started = record["stage_started_unix"]
    return started["end"] - started["memory_probe"]


def test_no_probes_skips_the_probe_steps_and_says_so():
    with_probes = run(Case(strategy="fsdp2", nproc=1, steps=2, warmup=1, seq_len=32))
    without = run(Case(strategy="fsdp2", nproc=1, steps=2, warmup=1, seq_len=32, probes=False))
    assert without["status"] == "ok" and len(without["step_times_s"]) == 2
    assert without["memory_breakdown_bytes"] is None and without["memory_breakdown_null_reason"] == PROBES_OFF
    assert without["measured_model_state_bytes"] is None
    assert without["measured_model_state_null_reason"] == PROBES_OFF
    assert without["flops"]["per_token_counter"] is None and without["flops"]["per_token_formula"] > 0
    assert without["prediction"]["peak_bytes"] > 0  # the prediction needs no step
    assert with_probes["memory_breakdown_bytes"] and with_probes["flops"]["per_token_counter"] > 0
    # two steps under FlopCounterMode and MemTracker against none
    assert _probe_seconds(without) < _probe_seconds(with_probes)


def test_the_switch_reaches_every_case_and_keeps_the_ids():
    default = parse_sweep({"device": "cpu", "strategies": "ddp,fsdp2"}).cases()
    off = parse_sweep({"device": "cpu", "strategies": "ddp,fsdp2", "no-probes": "on"}).cases()
    assert [c.id for c in off] == [c.id for c in default]
    assert all(c.probes for c in default) and not any(c.probes for c in off)
    assert parse_sweep({"device": "cpu", "no-probes": "on"}).fingerprint()["skip_probes"] is True
    assert "skip_probes" not in parse_sweep({"device": "cpu"}).fingerprint()
