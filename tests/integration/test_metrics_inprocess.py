"""The worker's measurements in-process (world size 1, gloo): grad accumulation and the FLOP count."""

from __future__ import annotations

import pytest

from fsdp_bench.analysis.aggregate import case_metrics
from fsdp_bench.plan.case import Case
from fsdp_bench.worker.loop import run

pytestmark = pytest.mark.versions  # FlopCounterMode and MemTracker, both torch internals


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_breakdown_and_model_state_with_grad_accumulation(strategy):
    # MemTracker refuses a module's second forward in one session unless its module stats are
    # cleared between micro-batches; the probe must survive grad accumulation.
    case = Case(strategy=strategy, model="gpt_tiny", seq_len=32, steps=2, warmup=1, nproc=1, grad_accum=2)
    record = run(case)
    parts = record["memory_breakdown_bytes"]
    assert parts is not None, record.get("memory_breakdown_null_reason")
    assert sum(parts.values()) == record["memory"]["peak_allocated_bytes"]
    assert parts["grads"] > 0  # the second micro-batch runs with the first one's gradients alive
    assert record["measured_model_state_bytes"]["total"] == pytest.approx(16 * record["n_params"], rel=0.01)
    assert len(record["update_norms"]) == 1 and min(record["update_norms"]) > 0
    assert record["update_norm_steps"] == [0]  # the warmup step, never a measured one
    assert record["flops"]["formula_over_counter"] == pytest.approx(1.0, abs=0.15)
    assert "memory_timeline" not in record  # no allocator to read on CPU
    assert record["allocator"] is None
    assert record["gpu_util"]["pct_mean"] is None and "cpu" in record["gpu_util"]["null_reason"]


def test_linear_model_flops_have_no_attention_term():
    record = run(Case(strategy="ddp", model="linear_tiny", seq_len=4, steps=1, warmup=0, nproc=1))
    flops = record["flops"]
    assert flops["formula_inputs"]["n_layers"] == 0
    assert flops["per_token_formula"] == 6 * record["n_params"]
    # the counter sees the matmuls only (biases are adds): 6 per weight of 4 Linear(256, 256),
    # less the first layer's input gradient (2 per weight), which autograd skips for data input
    assert flops["per_token_counter"] == (6 * 4 - 2) * 256 * 256


def test_update_norms_only_on_warmup_steps():
    """Each norm copies the parameters to the host between steps: only warmup steps get one, so
    nothing but the steps' own bookkeeping runs between two measured steps."""
    fixed = run(Case(strategy="ddp", model="gpt_tiny", seq_len=16, steps=5, warmup=2, nproc=1))
    assert fixed["update_norm_steps"] == [0, 1]
    assert len(fixed["update_norms"]) == 2 and min(fixed["update_norms"]) > 0
    assert 0 < case_metrics(Case(strategy="ddp", nproc=1), [fixed])["measure_timed_share_pct"] <= 100
    adaptive = run(Case(strategy="ddp", model="gpt_tiny", seq_len=16, steps=6, warmup=1, nproc=1, target_ci_pct=50))
    assert adaptive["update_norm_steps"] == [0]
    # no warmup: no norm (step 0 is measured), and the record says why
    bare = run(Case(strategy="ddp", model="gpt_tiny", seq_len=16, steps=2, warmup=0, nproc=1))
    assert bare["update_norms"] == [] and "warmup" in bare["update_norms_null_reason"]
    assert bare["params_changed"] is True  # the fingerprint still shows that the steps trained


def test_update_norm_is_exact_over_many_elements_and_zero_without_a_step():
    """Squares are summed in float64 a chunk at a time: a float32 norm was 1% off over 117M
    elements (a 3M-element model shows the same drift at a smaller scale)."""
    import torch

    from fsdp_bench.worker.update_norms import UpdateNorms

    model = torch.nn.Linear(1733, 1733)
    norms = UpdateNorms(model)
    norms.before_step()
    norms.after_step()  # nothing moved
    norms.before_step()
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1e-3)
    norms.after_step()
    exact = sum(float(((p.detach().double() - b.double()) ** 2).sum()) for p, b in zip(model.parameters(), before))
    assert norms.norms[0] == 0.0
    assert abs(norms.norms[1] - exact**0.5) <= 1e-9 * exact**0.5


def test_the_breakdown_is_of_the_ranks_device_when_the_step_holds_tensors_on_another():
    """MemTracker keeps a peak per device, in the order it first saw each. A CUDA rank with CPU
    offload has its host-side shards tracked before anything on the GPU, and the breakdown read the
    host's (fsdp2_offload on the H100: 0 activations beside a 29.7 GB allocator peak). Here the
    other device is `meta`: a parameter there, tracked first, must not stand in for the rank's."""
    import torch

    from fsdp_bench.worker.memory import track_step_memory

    elsewhere = torch.nn.Module()
    elsewhere.weight = torch.nn.Parameter(torch.empty(1024, 1024, device="meta"))  # 4 MiB, seen first
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())

    def step(on_phase):
        model(torch.randn(32, 64)).square().sum().backward()
        on_phase("after_backward")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    tracked = track_step_memory(step, [elsewhere, model], optimizer, device=torch.device("cpu"))
    categories = tracked["by_category_bytes"]
    assert categories["param"] == (64 * 64 + 64) * 4  # the Linear's, not the meta parameter's
    assert categories["grad"] == categories["param"] and categories["opt"] >= 2 * categories["param"]
    assert tracked["peak_bytes"] == sum(categories.values()) < 2**20
