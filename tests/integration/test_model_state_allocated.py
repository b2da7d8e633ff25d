"""Model state as the strategy allocates it (padding, alignment, hybrid shard group) beside the
ZeRO textbook figure, checked against the simulated rank 0's measured storage."""

from __future__ import annotations

import pytest

from fsdp_bench.analysis.comm_model import Unit, model_units
from fsdp_bench.analysis.model_state import (
    ADAM_STEP_BYTES,
    allocated_model_state_bytes,
    expected_model_state_bytes,
    fsdp1_real_numel_in_shard,
    fsdp2_local_numel,
    padded_model_state_bytes,
)
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.flavors import MODEL_FLAVORS
from tests.sweep_helpers import simulated_rank0

TINY = dict(model="gpt_tiny", batch_size=2, seq_len=32, steps=2, warmup=1)
ALLOCATED_TOLERANCE = 0.001  # 0.1%: the expectation counts every padded element


def test_textbook_total_sits_beside_the_allocated_figure():
    units = model_units(MODEL_FLAVORS["gpt_tiny"])
    n = sum(u.numel for u in units)
    e = expected_model_state_bytes("fsdp2", n_params=n, world_size=3, units=units)
    assert e["textbook_total"] == pytest.approx(16 * n / 3)
    assert e["total"] == padded_model_state_bytes("fsdp2", units, 3)["total"] > e["textbook_total"]
    assert "textbook_total" not in expected_model_state_bytes("fsdp2", n_params=n, world_size=3)


@pytest.mark.parametrize("ws", [1, 2, 3, 4, 7, 8, 64, 512])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2", "fsdp1_full_shard", "fsdp1_no_shard", "fsdp2_hsdp"])
def test_allocated_expectation_equals_the_padded_formula(strategy, ws):
    units = model_units(MODEL_FLAVORS["qwen2_tiny"])
    e = expected_model_state_bytes(strategy, n_params=sum(u.numel for u in units), world_size=ws, units=units)
    padded = padded_model_state_bytes(strategy, units, ws)
    assert e["params"] == padded["params"] and e["grads"] == padded["grads"]
    if "fsdp1" in strategy:  # AdamW state follows the original parameters: no alignment in it
        assert e["optimizer"] <= padded["optimizer"]
    else:
        assert e["optimizer"] == padded["optimizer"]
    assert e["total"] >= e["textbook_total"] * (1 - 1e-9) or "fsdp1" in strategy


def test_fsdp1_real_elements_per_rank_add_up():
    unit = Unit("u", ((5, 3), (5,), (7,)))
    for shard in (1, 2, 3, 4, 16):
        assert sum(fsdp1_real_numel_in_shard(unit, shard, r) for r in range(shard)) == unit.numel
    hybrid = allocated_model_state_bytes("fsdp1_hybrid_shard", [unit], 4, mesh=(2, 2), rank=3)
    assert hybrid["params"] == 4 * 16  # 15 + 1 alignment + 5 + 3 alignment + 7 = 31, padded to 32, over 2 ranks


def test_fsdp2_ranks_cut_like_torch_chunk_and_optimizer_state_follows_them():
    unit = Unit("u", ((10, 3), (9,), (1,)))
    for shard in (1, 2, 3, 4, 7, 16):
        assert sum(fsdp2_local_numel(unit, shard, r) for r in range(shard)) == unit.numel
    assert [fsdp2_local_numel(unit, 4, r) for r in range(4)] == [9 + 3 + 1, 9 + 3, 9 + 3, 3]  # chunks of 3 rows
    first, last = (allocated_model_state_bytes("fsdp2", [unit], 4, rank=r) for r in (0, 3))
    assert first["params"] == last["params"] == 4 * (9 + 3 + 1)  # storage: every rank holds a padded chunk
    assert first["optimizer"] == 2 * 4 * 13 + 3 * ADAM_STEP_BYTES  # AdamW's step counter for every parameter
    assert last["optimizer"] == 2 * 4 * 3 + 3 * ADAM_STEP_BYTES


def test_fsdp1_parameters_outside_the_chunk_get_no_step_counter():
    unit = Unit("u", ((8,), (8,)))
    assert (
        allocated_model_state_bytes("fsdp1_full_shard", [unit], 2, rank=0)["optimizer"] == 2 * 4 * 8 + ADAM_STEP_BYTES
    )
    assert allocated_model_state_bytes("ddp", [unit], 2)["optimizer"] == 2 * 4 * 16 + 2 * ADAM_STEP_BYTES


@pytest.fixture(scope="module")
def simulated():
    """Rank 0's record of each case, in this process (the runner's simulate subprocess is tested in
    test_simulation.py and test_hf_simulated_world_sizes.py)."""
    return {
        (s, n): simulated_rank0(Case(strategy=s, nproc=n, simulate=True, **TINY))
        for s in ("fsdp2", "fsdp1_full_shard")
        for n in (2, 3, 4)
    }


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp1_full_shard"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_allocated_expectation_matches_measured(simulated, strategy, n):
    rank = simulated[strategy, n]
    assert rank["status"] == "ok"
    expected, measured = rank["expected_model_state_bytes"], rank["measured_model_state_bytes"]
    for part in ("params", "grads", "optimizer", "total"):
        assert measured[part] == pytest.approx(expected[part], rel=ALLOCATED_TOLERANCE), (part, expected, measured)
    assert "textbook_total" in expected
