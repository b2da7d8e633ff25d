"""worker.profiled_peak.profiled_step_peak, FSDP1's CPU peak reader, in one process on real steps: it
reads what MemTracker reads where both can, and refuses a loop whose two steps do not end alike
(a free it did not see would make its running sum wrong)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fsdp_bench.worker.memory import track_step_memory  # noqa: E402
from fsdp_bench.worker.probes import fold_breakdown, resident_state_by_category  # noqa: E402
from fsdp_bench.worker.profiled_peak import PROFILED_DRIFT_TOLERANCE_BYTES, profiled_step_peak  # noqa: E402


def _trainer(foreach: bool, rows: int = 64, recompute: bool = False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
    if recompute:  # activation checkpointing as the suite applies it (worker.strategies)
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

        model = checkpoint_wrapper(model, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=foreach)
    data = torch.randn(rows, 256)

    def step(on_phase=None):
        model(data).square().mean().backward()
        if on_phase is not None:
            on_phase("after_backward")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # AdamW's state exists from here on, as after a case's measured steps
    return model, optimizer, step


# 64 rows: the peak is in AdamW's step; 4,096: in the backward, among activations and temporaries,
# the model's forward recomputed there (its peak then: activations to MemTracker) or not
@pytest.mark.parametrize(
    ("foreach", "rows", "recompute"), [(True, 64, False), (False, 64, False), (True, 4096, False), (True, 4096, True)]
)
def test_the_profiled_peak_is_memtrackers(foreach, rows, recompute):
    model, optimizer, step = _trainer(foreach, rows, recompute)
    tracked = track_step_memory(step, [model], optimizer, device=torch.device("cpu"))
    profiled = profiled_step_peak(step, model=model, resident=resident_state_by_category(model, optimizer))
    assert profiled["drift_bytes"] == 0, profiled
    # parameters + AdamW's two moments, then the activations, gradients and foreach temporaries
    assert profiled["peak_bytes"] > profiled["resident_bytes"] > 0
    # checkpointing keeps the CPU generator's state (5,056 B) for its recomputation, made outside
    # torch's dispatch where MemTracker does not see it; the allocator does
    unseen = {"activations": 5056 if recompute else 0}
    assert profiled["peak_bytes"] - sum(unseen.values()) == pytest.approx(tracked["peak_bytes"], abs=64)
    # the same peak taken apart the same way: by where each block was made, gradients by address
    expected = fold_breakdown(tracked["by_category_bytes"])
    assert sum(profiled["breakdown_bytes"].values()) == profiled["peak_bytes"]
    parts = {k: v - unseen.get(k, 0) for k, v in profiled["breakdown_bytes"].items()}
    if recompute:  # W2's gradient, made just before the peak: a temporary to MemTracker until accumulated
        parts["other"] += parts.pop("grads")
        expected["other"] += expected.pop("grads")
    for category, value in parts.items():
        assert value == pytest.approx(expected[category], abs=64), (category, profiled, expected)
    parts = profiled["breakdown_bytes"]
    if recompute:  # its activations made again in the backward, beside W2's gradient
        assert parts["activations"] > parts["other"] > parts["grads"] > 0
    elif rows == 64:  # AdamW's step: every gradient held, foreach's temporaries counted as optimizer's
        assert parts["grads"] == parts["params"] > 0 == parts["activations"]
    else:  # early in the backward: activations and their gradients live, no parameter's yet
        assert min(parts["activations"], parts["other"]) > parts["optimizer"] > parts["grads"] == 0


def test_a_step_that_keeps_what_it_allocates_is_refused():
    model, optimizer, step = _trainer(True)
    kept = []

    def leaky(on_phase=None):
        step(on_phase)
        kept.append(torch.ones(PROFILED_DRIFT_TOLERANCE_BYTES))  # 4 B each: 4x the tolerance a step

    profiled = profiled_step_peak(leaky, model=model, resident=resident_state_by_category(model, optimizer))
    assert "peak_bytes" not in profiled
    assert profiled["drift_bytes"] == 4 * PROFILED_DRIFT_TOLERANCE_BYTES
    assert profiled["null_reason"].startswith("the profiler missed a free: two equal steps ended +16,384 B apart")


def test_the_replay_takes_the_peak_apart_by_what_each_block_became():
    """worker.profiled_peak's replay on a hand-made timeline: a block of the first step does not
    count, the peak is the second step's most live bytes, and a block found holding a gradient
    after the peak is a gradient in the peak's breakdown (by identity: its address is used again)."""
    from fsdp_bench.worker.profiled_peak import _ALLOC, _MARK_GRADS, _MARK_SECOND, _peak_of_second_step

    events = [
        (1, _ALLOC, 0xA, 100, "activations"),  # the first step's, freed before the second
        (2, _ALLOC, 0xA, -100, None),
        (3, _MARK_SECOND, None, 0, None),
        (4, _ALLOC, 0xB, 50, "activations"),
        (5, _ALLOC, 0xC, 30, "other"),  # the peak: B and C, 80 B
        (6, _MARK_GRADS, {0xC, 0xF}, 0, None),  # C holds a gradient when the backward ends
        (7, _ALLOC, 0xB, -50, None),
        (8, _ALLOC, 0xB, 20, "other"),  # B's address again, another block
        (9, _ALLOC, 0xC, -30, None),
        (10, _ALLOC, 0xB, -20, None),
    ]
    resident = {"params": 1000, "grads": 0, "optimizer": 2000}
    read = _peak_of_second_step(events, resident)
    assert read["drift_bytes"] == read["missed_frees"] == 0
    assert read["peak_bytes"] == 3080
    assert read["breakdown_bytes"] == {"params": 1000, "grads": 30, "optimizer": 2000, "activations": 50, "other": 0}
    leaked = [*events[:-1], (10, _ALLOC, 0xB, 20, "other")]  # B's address allocated again, never freed
    assert _peak_of_second_step(leaked, resident)["null_reason"].startswith("the profiler missed 1 free(s)")
