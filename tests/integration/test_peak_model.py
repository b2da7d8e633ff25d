"""The peak model from its parts (analysis.activations, analysis.fit): the counted activations
equal what autograd really saves, the predicted peak of real (simulated-rank) cases is within 5%
of MemTracker's measured peak, and a "fits" answer measures within the budget.

A fast subset of scripts/measure_peak_prediction.py: rank 0 on the fake process group, in-process
(the way fsdp_bench.worker.simulate runs it), batch 2, seq 32.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_bench.analysis.fit import predict_case_peak
from fsdp_bench.plan.case import Case
from fsdp_bench.worker.simulate import simulated_peak
from tests.sweep_helpers import simulated_rank0

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

CONFIGS = {
    p.parent.name: f"hf:{p.parent}"
    for folder in ("hf_configs", "hf_architectures")
    for p in (Path(__file__).resolve().parents[1] / "data" / folder).glob("*/config.json")
}
SMALL = dict(batch_size=2, seq_len=32, steps=1, warmup=0)


def _saved_bytes(model, x, y) -> int:
    """Distinct storages autograd saves for backward in one forward (parameters left out)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x, y)
    return sum(seen.values())


@pytest.mark.parametrize("mode", ["fp32", "bf16", "autocast"])
@pytest.mark.parametrize(
    "model", ["llama_odd_vocab", "mistral_gqa_tied", "gpt2_tiny", "gpt_tiny", "linear_tiny", "gemma_tiny"]
)
def test_counted_activations_equal_what_autograd_saves(model, mode):
    """fp32; bf16 parameters (what FSDP's mixed precision computes with); autocast over fp32
    parameters (DDP's bf16), where norms keep fp32 inputs and matmuls keep bf16 weight copies."""
    from fsdp_bench.analysis.activations import estimate_activations
    from fsdp_bench.plan.flavors import flavor_for
    from fsdp_bench.worker.models.build import build_model

    flavor = flavor_for(CONFIGS.get(model, model))
    net = build_model(flavor, seed=0)
    b, t = 3, 17
    if flavor.family == "linear":
        x, y = torch.randn(b, t, flavor.config["dim"]), torch.randn(b, t, flavor.config["dim"])
    else:
        x = torch.randint(0, 500, (b, t))
        y = x.clone()
    if mode == "bf16":
        net = net.to(torch.bfloat16)
        x, y = (x.bfloat16(), y.bfloat16()) if flavor.family == "linear" else (x, y)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "autocast"):
        saved = _saved_bytes(net, x, y)
    counted = estimate_activations(flavor, b, t, dtype_bytes=4 if mode == "fp32" else 2, autocast=mode == "autocast")
    # gemma_tiny: 0.17-0.36% of what autograd saves is not attributed yet (every other model: exact
    # to 0.3%); its norms' fp32 output is counted (the catalog's rmsnorm_fp32)
    assert counted.total == pytest.approx(saved, rel=0.005 if model == "gemma_tiny" else 0.003)


# The misses: FSDP2 at 512 ranks under-predicted by a third (dim-0 padding of every gathered and
# reduce-scattered buffer), the no-reshard and reshard FSDP2 cases in between; then no-reshard
# at 512 ranks (-12.8%: the later block's reduce-scatter input still alive) and FSDP2 with
# gradient accumulation (-10.6%: the earlier micro-batch's gradients inside a block's backward).
# DDP is held to an H100's allocator instead (tests/unit/test_reference_peaks.py): its reducer
# allocates the gradient buckets in C++ when it wraps the model, before MemTracker starts, so the
# CPU tracker cannot see them; max_memory_allocated did, at the top of backward.
@pytest.mark.parametrize(
    "name,strategy,n,extra",
    [
        ("llama_odd_vocab", "fsdp2", 2, {}),
        ("mistral_gqa_tied", "fsdp2", 512, {}),
        ("gpt2_small_odd", "fsdp2_no_reshard", 8, {}),
        ("llama_odd_vocab", "fsdp2_no_reshard", 512, {}),
        ("gpt_tiny", "fsdp2", 2, {"batch_size": 1, "grad_accum": 2}),
    ],
)
def test_predicted_peak_within_5_percent_of_measured(name, strategy, n, extra):
    model = CONFIGS.get(name, name)
    record = simulated_rank0(Case(strategy=strategy, nproc=n, simulate=True, model=model, **{**SMALL, **extra}))
    assert record["status"] == "ok"
    measured = record["memory"]["peak_allocated_bytes"]
    predicted = record["prediction"]["peak_bytes"]
    print(name, strategy, n, predicted, measured, record["prediction"]["phase"])
    assert abs(predicted - measured) / measured <= 0.05, (predicted, measured, record["prediction"])
    assert record["prediction"]["phase"] in ("forward", "backward", "optimizer step")
    assert set(record["prediction"]["parts_bytes"]) >= {
        "params",
        "grads",
        "optimizer",
        "activations",
        "gathered",
        "optimizer_temp",
        "loss_temp",
    }


def test_largest_batch_that_fits_measures_within_the_budget():
    """The fit answer at the predicted largest batch, run: its measured peak is within the budget."""
    from fsdp_bench.analysis.fit import FIT_MARGIN, largest_batch, predict_peak_bytes
    from fsdp_bench.plan.flavors import flavor_for

    flavor = flavor_for(CONFIGS["llama_odd_vocab"])
    budget = 6_000_000  # bytes: a few batches' worth above the model state
    batch = largest_batch("fsdp2_no_reshard", flavor, 2, budget, seq_len=32)
    assert batch >= 2
    predicted = predict_peak_bytes("fsdp2_no_reshard", flavor, 2, batch, seq_len=32)["peak_bytes"]
    assert predicted * (1 + FIT_MARGIN) <= budget
    record = simulated_rank0(
        Case(
            strategy="fsdp2_no_reshard",
            nproc=2,
            simulate=True,
            model=CONFIGS["llama_odd_vocab"],
            batch_size=batch,
            seq_len=32,
            steps=1,
            warmup=0,
        )
    )
    assert record["memory"]["peak_allocated_bytes"] <= budget


def test_a_peak_just_over_the_budget_never_prints_as_the_budget():
    from fsdp_bench.analysis.fit import gib_text
    from fsdp_bench.results.schema import GIB

    assert gib_text(0.30237 * GIB, 0.3 * GIB) == "0.302 GiB"
    assert gib_text(0.3 * GIB, 0.3 * GIB) == "0.30 GiB"
    assert gib_text(1.5 * GIB) == "1.50 GiB"


# Issue 35, out of sample: DDP with accumulation and a tied embedding keeps a second copy of the tied
# weight's gradient through the optimizer step (fit.tied_gradient_copy_bytes, found on dev seed 19).
# Held-out seed 100000 (tied, 1.57 M parameters) was -5.12 % without it, -0.00 % with it; 100019 is
# untied (+2.85 %, its peak in backward).
@pytest.mark.parametrize("seed", [100000, 100019])
def test_ddp_accumulation_peak_on_held_out_generated_configs(seed, tmp_path):
    from fsdp_bench.plan.generated_configs import HOLDOUT_SEEDS, write_generated_config

    assert seed in HOLDOUT_SEEDS
    model = write_generated_config(seed, tmp_path)
    case = Case(strategy="ddp", nproc=2, simulate=True, model=model, grad_accum=2, grad_sync="last", **SMALL)
    record = simulated_rank0(case)
    measured, predicted = record["memory"]["peak_allocated_bytes"], record["prediction"]["peak_bytes"]
    assert abs(predicted - measured) / measured <= 0.05, (predicted, measured, record["prediction"]["phase"])
    tied = record["prediction"]["parts_bytes"]["tied_grad_copy"]
    assert tied > 0 if seed == 100000 else tied == 0


def test_fsdp2_deferred_reduction_peak_on_a_held_out_generated_config(tmp_path):
    """Issue 35: FSDP2 with the reduction deferred to the last micro-step; in the last micro-step
    the blocks above were reduced and their accumulated unsharded gradients freed (found on dev
    seed 0: +8.21 % -> +4.97 %). Held-out seed 100000 at 512 simulated ranks was +10.09 %."""
    from fsdp_bench.plan.generated_configs import HOLDOUT_SEEDS, write_generated_config

    assert 100_000 in HOLDOUT_SEEDS
    model = write_generated_config(100_000, tmp_path)
    case = Case(strategy="fsdp2", nproc=512, simulate=True, model=model, grad_accum=2, grad_sync="last", **SMALL)
    record = simulated_rank0(case)
    measured, predicted = record["memory"]["peak_allocated_bytes"], record["prediction"]["peak_bytes"]
    assert abs(predicted - measured) / measured <= 0.05, (predicted, measured, record["prediction"]["phase"])


# Issue 35, out of sample: fsdp2_no_reshard at 512 ranks on one-layer configs peaks at the loss in
# forward, with the last block's all-gather output still alive (peak_moments._loss_forward_bytes,
# found on dev seed 83: -16.90 % -> -0.01 %). Dev seeds 123 (Llama, untied) and 235 (Mistral, tied),
# one layer each, were not used to find it: -8.19 % and -8.95 % without it.
@pytest.mark.parametrize("seed", [123, 235])
def test_no_reshard_one_layer_peak_at_the_loss_on_generated_dev_configs(seed, tmp_path):
    from fsdp_bench.plan.generated_configs import DEV_SEEDS, generated_config, write_generated_config

    assert seed in DEV_SEEDS and generated_config(seed)["num_hidden_layers"] == 1
    model = write_generated_config(seed, tmp_path)
    case = Case(strategy="fsdp2_no_reshard", nproc=512, simulate=True, model=model, **SMALL)
    record = simulated_rank0(case)
    measured, predicted = record["memory"]["peak_allocated_bytes"], record["prediction"]["peak_bytes"]
    assert abs(predicted - measured) / measured <= 0.01, (predicted, measured, record["prediction"]["phase"])
    assert record["prediction"]["phase"] == "forward"


# Issue 35, out of sample: FSDP2's block backward counted the block's saved activations and all its
# new gradients at once (and, without resharding, the block above's reduce-scatter input); found on
# dev seed 19 (fsdp2_no_reshard, 64 ranks: +8.27 % -> +0.34 %). Dev seeds 21 and 54 (Qwen2, 4 layers,
# tied and untied) were not used to find it: +5.85 % and +4.08 % before.
@pytest.mark.parametrize("seed", [21, 54])
def test_no_reshard_block_backward_on_generated_dev_configs(seed, tmp_path):
    from fsdp_bench.plan.generated_configs import DEV_SEEDS, write_generated_config

    assert seed in DEV_SEEDS
    model = write_generated_config(seed, tmp_path)
    case = Case(strategy="fsdp2_no_reshard", nproc=64, simulate=True, model=model, **SMALL)
    record = simulated_rank0(case)
    measured, predicted = record["memory"]["peak_allocated_bytes"], record["prediction"]["peak_bytes"]
    assert abs(predicted - measured) / measured <= 0.02, (predicted, measured, record["prediction"]["phase"])


# Issue 35, the grad-sync-last class: FSDP2 with accumulation 2 reduced at the last micro-step, 64
# simulated ranks. In the last micro-step a block's new gradients are added in place into the
# accumulated unsharded ones (one parameter's at a time), a tied head's new gradient waits for the
# embedding's, and the root, resharded after forward, is gathered again at backward's start
# (peak_moments._root_pre_backward_bytes); found on dev seeds 14, 19 and 16 (+7.52 %, -6.72 %
# (tied, with the in-place part alone) and -2.85 % -> within 0.5 %). Dev seeds 21 (Qwen2, tied: the
# in-place and tied parts) and 38 (Gemma, untied: the root's pre-backward) were not used to find
# them: +4.31 % and -2.39 % before, -0.61 % and -0.06 % after.
@pytest.mark.parametrize("seed", [21, 38])
def test_fsdp2_reduced_last_peak_on_generated_dev_configs(seed, tmp_path):
    from fsdp_bench.plan.generated_configs import DEV_SEEDS, write_generated_config

    assert seed in DEV_SEEDS
    model = write_generated_config(seed, tmp_path)
    case = Case(strategy="fsdp2", nproc=64, simulate=True, model=model, grad_accum=2, grad_sync="last", **SMALL)
    measured, prediction = simulated_peak(case), predict_case_peak(case)
    assert abs(prediction["peak_bytes"] - measured) / measured <= 0.01, (prediction, measured)


# DDP with accumulation reduced in the last micro-step only: on CPU MemTracker sees each of DDP's
# buckets from its first write, in the layout its reducer rebuilds to (first bucket past 1 MiB,
# the rest), so the peak falls in the head's backward (the first bucket, the head's new gradient)
# or where a block's gradients open the next bucket. Counting every bucket from the last block on
# read +7.31 % on dev seed 43 (the second bucket is written only at a lower block) and counting the
# first bucket at its 1 MiB cap, without the head's new gradient, -3.82 % on dev seed 57.
@pytest.mark.parametrize("seed", [43, 57])
def test_ddp_deferred_reduction_peak_counts_buckets_from_their_first_write(seed, tmp_path):
    from fsdp_bench.plan.generated_configs import write_generated_config

    model = write_generated_config(seed, tmp_path)
    case = Case(strategy="ddp", nproc=2, simulate=True, model=model, grad_accum=2, grad_sync="last", **SMALL)
    measured = simulated_peak(case)
    predicted = predict_case_peak(case)["peak_bytes"]
    assert abs(predicted - measured) <= 0.01 * measured, (predicted, measured)


# DDP rebuilds its buckets in the order gradients become ready (analysis.peak_moments.
# ddp_ready_numels; checked against DDP's own record in test_ddp_ready_order.py): a gpt2 root's
# position embedding is ready before its token embedding, so a first bucket the blocks leave under
# 1 MiB closes with the position embedding, not with the vocab-wide one. Taking the reverse
# registration order read +4.73 % (dev seed 508, a tied 4-layer gpt2, accumulation 1) and +2.90 %
# (dev seed 191, a tied 6-layer gpt2, accumulation 2 reduced last); neither seed was looked at
# before the change. 2 simulated ranks.
@pytest.mark.parametrize("seed,grad_accum,grad_sync", [(508, 1, "every"), (191, 2, "last")])
def test_ddp_peak_follows_the_order_gradients_become_ready(seed, grad_accum, grad_sync, tmp_path):
    from fsdp_bench.plan.generated_configs import write_generated_config

    model = write_generated_config(seed, tmp_path)
    case = Case(
        strategy="ddp", nproc=2, simulate=True, model=model, grad_accum=grad_accum, grad_sync=grad_sync, **SMALL
    )
    measured = simulated_peak(case)
    predicted = predict_case_peak(case)["peak_bytes"]
    assert abs(predicted - measured) <= 0.02 * measured, (predicted, measured)


# Issue 35, out of sample: a Llama-style block's MLP backward, in its gate-times-up product's
# backward, holds three tokens x intermediate temporaries and the down projection's gradient
# (peak_moments._mlp_backward_bytes); it makes FSDP2's peak where the intermediate size is many
# times the hidden size (the generator's Gemma rows). Found on dev seed 265 (-4.87 % -> -0.01 %);
# dev seeds 205 and 291 (Gemma, intermediate 609 over hidden 28, 742 over 42) were measured beside it
# but not used to find it: -4.47 % and -3.46 % before, within 0.01 % after. With the reduction in the
# last micro-step the down projection's new gradient is already added in place (found on dev seed
# 205): dev seed 92 (intermediate 692 over hidden 28) +0.42 % counting it, -0.01 % not.
@pytest.mark.parametrize("seed,grad_accum,grad_sync", [(205, 1, "every"), (291, 1, "every"), (92, 2, "last")])
def test_fsdp2_peak_inside_the_mlp_backward_on_generated_dev_configs(seed, grad_accum, grad_sync, tmp_path):
    from fsdp_bench.plan.generated_configs import DEV_SEEDS, generated_config, write_generated_config

    config = generated_config(seed)
    assert seed in DEV_SEEDS and config["intermediate_size"] > 10 * config["hidden_size"]
    model = write_generated_config(seed, tmp_path)
    case = Case(
        strategy="fsdp2", nproc=512, simulate=True, model=model, grad_accum=grad_accum, grad_sync=grad_sync, **SMALL
    )
    measured, prediction = simulated_peak(case), predict_case_peak(case)
    assert abs(prediction["peak_bytes"] - measured) / measured <= 0.002, (prediction, measured)
    assert prediction["phase"] == "backward"
