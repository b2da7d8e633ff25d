"""Gradient accumulation in the tuner's step model (fsdp_bench.analysis.step_model): under
grad_sync "last" (no_sync, FSDP2's set_requires_gradient_sync) a step reduces its gradients once,
whatever the accumulation, while forward and backward still gather every micro-step."""

from __future__ import annotations

import pytest

from fsdp_bench.analysis.comm_model import comm_volume, model_units
from fsdp_bench.analysis.step_model import predict_case
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.flavors import flavor_for


def _case(strategy: str, accum: int, **kw) -> Case:
    return Case(strategy=strategy, model="gpt_tiny", batch_size=2, grad_accum=accum, seq_len=32, **kw)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp1_full_shard", "fsdp2"])
def test_grad_sync_last_reduces_once_per_step_and_gathers_every_micro_step(strategy):
    units = model_units(flavor_for("gpt_tiny"))
    one = comm_volume(strategy, units, world_size=2, grad_accum=1)
    every = comm_volume(strategy, units, world_size=2, grad_accum=2)
    last = comm_volume(strategy, units, world_size=2, grad_accum=2, grad_sync="last")
    assert last.all_gather_bytes == every.all_gather_bytes == 2 * one.all_gather_bytes
    assert last.reduce_scatter_bytes == one.reduce_scatter_bytes
    assert last.all_reduce_bytes == one.all_reduce_bytes
    reduced = one.reduce_scatter_bytes + one.all_reduce_bytes
    assert every.reduce_scatter_bytes + every.all_reduce_bytes == 2 * reduced > 0


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_the_tuners_prediction_moves_fewer_bytes_under_grad_sync_last(strategy):
    every = predict_case(_case(strategy, 2))
    last = predict_case(_case(strategy, 2, grad_sync="last"))
    assert last.flops == every.flops and last.micro_steps == every.micro_steps
    assert 0 < last.wire_bytes < every.wire_bytes
    assert predict_case(_case(strategy, 1, grad_sync="last")).wire_bytes == predict_case(_case(strategy, 1)).wire_bytes
