"""The chunked loss (`--bench-loss chunked`, worker.models.loss) on real tensors: the same loss and
gradients as the full cross-entropy (with a head bias and Gemma 2's soft-capping), a lower measured
peak than the full loss where the vocabulary dominates, and the peak model's count of it within 5%
of the measured peak (rank 0 of the fake process group, as test_peak_model measures)."""

from __future__ import annotations

import pytest

from fsdp_bench.plan.case import Case
from tests.integration.test_peak_model import CONFIGS, SMALL
from tests.sweep_helpers import simulated_rank0

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.versions  # autograd Functions and MemTracker move with torch versions


@pytest.mark.parametrize("softcap", [None, 3.0])
def test_same_loss_and_gradients_as_the_full_cross_entropy(softcap):
    from fsdp_bench.worker.models.loss import chunked_cross_entropy

    torch.manual_seed(0)
    hidden = torch.randn(2, 21, 16, requires_grad=True)  # 42 tokens: slices of 6 and 5
    head = torch.nn.Linear(16, 97)
    targets = torch.randint(0, 97, (2, 21))
    logits = head(hidden)
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    full = torch.nn.functional.cross_entropy(logits.reshape(-1, 97), targets.reshape(-1))
    chunked = chunked_cross_entropy(hidden, head, targets, chunks=8, softcap=softcap)
    assert chunked.item() == pytest.approx(full.item(), rel=1e-6)
    inputs = [hidden, head.weight, head.bias]
    for a, b in zip(torch.autograd.grad(full, inputs), torch.autograd.grad(chunked * 2.0, inputs)):
        torch.testing.assert_close(b, 2.0 * a, rtol=1e-5, atol=1e-7)  # backward scales by its gradient


@pytest.mark.parametrize(
    "name,strategy,n,grad_accum",
    [
        ("llama_odd_vocab", "fsdp2", 2, 1),
        ("llama_odd_vocab", "ddp", 2, 2),
        ("mistral_gqa_tied", "fsdp2_no_reshard", 64, 1),
    ],
)
def test_the_peak_model_counts_the_chunked_loss_within_5_percent(name, strategy, n, grad_accum):
    from fsdp_bench.analysis.fit import predict_case_peak

    case = Case(
        strategy=strategy, nproc=n, simulate=True, model=CONFIGS[name], grad_accum=grad_accum, loss="chunked", **SMALL
    )
    record = simulated_rank0(case)
    assert record["status"] == "ok"
    measured = record["memory"]["peak_allocated_bytes"]
    predicted = predict_case_peak(case)["peak_bytes"]
    assert abs(predicted - measured) / measured <= 0.05, (predicted, measured)


def test_the_chunked_loss_lowers_the_measured_peak_where_the_vocabulary_dominates():
    """llama_odd_vocab (vocabulary 1,009, hidden 48): fsdp2 on 2 ranks measured 3,212,624 B with
    the full loss and 2,903,892 B chunked (-9.6%) when this test was written."""
    case = Case(strategy="fsdp2", nproc=2, simulate=True, model=CONFIGS["llama_odd_vocab"], **SMALL)
    full = simulated_rank0(case)["memory"]["peak_allocated_bytes"]
    chunked = simulated_rank0(case.replace(loss="chunked"))["memory"]["peak_allocated_bytes"]
    assert chunked < 0.95 * full, (chunked, full)


def test_the_flop_counter_counts_the_chunked_loss_as_the_full_one():
    """Same matmuls, the head's backward ones run in forward: the counter (HFU, formula/counter)
    must read the same FLOPs. The head-weight gradient is added slice by slice with `addmm_`,
    which torch's counter table lacks: it read 4 T V H instead of 6 T V H."""
    from fsdp_bench.worker.models.loss import chunked_cross_entropy
    from fsdp_bench.worker.probes import count_step_flops

    tokens, hidden_size, vocab = 64, 32, 100
    hidden = torch.randn(1, tokens, hidden_size, requires_grad=True)
    head = torch.nn.Linear(hidden_size, vocab, bias=False)
    targets = torch.randint(0, vocab, (1, tokens))

    def full():
        logits = head(hidden)
        torch.nn.functional.cross_entropy(logits.view(-1, vocab), targets.view(-1)).backward()

    def chunked():
        chunked_cross_entropy(hidden, head, targets, chunks=4).backward()

    assert count_step_flops(full) == count_step_flops(chunked) == 6 * tokens * vocab * hidden_size
