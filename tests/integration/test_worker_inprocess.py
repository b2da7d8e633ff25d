"""The worker runs in-process at world size 1 (gloo, in-memory store): no torchrun needed."""

import pytest

torch = pytest.importorskip("torch")

from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.results.schema import STAGES  # noqa: E402
from fsdp_bench.worker.loop import run

pytestmark = pytest.mark.versions  # DDP, FSDP1 and FSDP2 in-process, and FSDP2's parameter swap


@pytest.mark.parametrize("strategy", ["ddp", "fsdp1_full_shard", "fsdp2"])
def test_run_in_process_trains_and_measures(strategy):
    case = Case(strategy=strategy, nproc=1, steps=3, warmup=1, seq_len=32)
    record = run(case)
    assert record["status"] == "ok"
    assert len(record["step_times_s"]) == 3 and len(record["warmup_step_times_s"]) == 1
    assert all(t > 0 for t in record["step_times_s"])
    assert len(record["losses"]) == 4 and record["losses"][-1] < record["losses"][0]
    assert record["params_changed"] is True
    assert record["memory"]["peak_rss_bytes"] > 0
    stages = [s["stage"] for s in record["stages"]]
    assert stages == sorted(stages, key=STAGES.index)
    assert not torch.distributed.is_initialized()  # cleaned up after itself


def test_linear_model_runs():
    record = run(Case(strategy="fsdp2", model="linear_tiny", nproc=1, steps=2, warmup=0, seq_len=4))
    assert record["status"] == "ok" and record["params_changed"]


def test_repointing_fixes_an_optimizer_built_before_fully_shard():
    stale = run(Case(strategy="fsdp2", nproc=1, steps=2, warmup=0, seq_len=16, optimizer_timing="before_shard"))
    fixed = run(Case(strategy="fsdp2", nproc=1, steps=2, warmup=0, seq_len=16, optimizer_timing="before_shard_fixed"))
    assert stale["params_changed"] is False and stale["optimizer_params_match_model"] is False
    assert len(set(stale["losses"])) == 1  # the same batch every step and no update: flat
    assert fixed["params_changed"] is True and fixed["optimizer_params_match_model"] is True
    assert fixed["optimizer_params_repointed"] > 0
    stale_count = stale["optimizer_vs_model"]
    assert stale_count["not_model_parameters"] == stale_count["optimizer_tensors"] > 0  # observed, not named
    assert fixed["optimizer_vs_model"]["not_model_parameters"] == 0
    assert stale["construction"]["method"]


def test_models_are_initialized_once_by_their_init_weights(monkeypatch):
    """The build skips nn.Linear's and nn.Embedding's own random initialization, which
    init_weights overwrote (every GPT-2 parameter was drawn twice): the weights still follow
    the models' initialization, are a function of the seed, and torch's defaults come back."""
    import torch
    from torch import nn

    from fsdp_bench.plan.flavors import flavor_for
    from fsdp_bench.worker.models.build import build_model

    calls = []
    for cls in (nn.Linear, nn.Embedding):
        default = cls.reset_parameters
        monkeypatch.setattr(cls, "reset_parameters", lambda self, d=default: calls.append(self) or d(self))
    gpt = build_model(flavor_for("gpt_small"), seed=0)
    linear = build_model(flavor_for("linear_tiny"), seed=0)
    assert calls == []  # no default initialization ran
    assert build_model(flavor_for("gpt_small"), seed=0).state_dict().keys() == gpt.state_dict().keys()
    again, other = build_model(flavor_for("gpt_small"), seed=0), build_model(flavor_for("gpt_small"), seed=1)
    assert all(torch.equal(a, b) for a, b in zip(gpt.parameters(), again.parameters()))
    assert not torch.equal(gpt.wte.weight, other.wte.weight)
    assert gpt.lm_head.weight is gpt.wte.weight
    assert gpt.wte.weight.std().item() == pytest.approx(0.02, rel=0.02)  # GPT-2's N(0, 0.02)
    assert torch.equal(gpt.blocks[0].ln_1.weight, torch.ones(256))
    bound = 1 / 256**0.5  # nn.Linear's default: weights and biases within +-1/sqrt(fan_in)
    w, b = linear.blocks[0].linear.weight, linear.blocks[0].linear.bias
    assert bound * 0.99 < w.abs().max().item() <= bound and 0 < b.abs().max().item() <= bound
    nn.Linear(2, 2)  # outside a build: torch's default initialization again
    assert len(calls) == 1


def test_a_run_whose_loss_diverges_is_recorded_as_not_trained():
    """A real divergence (AdamW at lr 1e30: the loss is NaN from the second step on) changes the
    parameters all the same, so params_changed alone called it trained and the report ranked it."""
    import math

    from fsdp_bench.analysis.aggregate import case_metrics
    from fsdp_bench.results.trained import LOSS_NOT_FINITE, untrained_reason

    case = Case(strategy="ddp", nproc=1, steps=2, warmup=1, seq_len=16, lr=1e30)
    record = run(case)
    assert record["status"] == "ok" and record["params_changed"] is True
    assert math.isfinite(record["losses"][0]) and not math.isfinite(record["losses"][-1])
    metrics = case_metrics(case, [record])
    assert metrics["loss_finite"] is False and untrained_reason(metrics) == LOSS_NOT_FINITE
    healthy = case_metrics(case, [{**record, "losses": [6.0, 5.5, 5.2]}])
    assert healthy["loss_finite"] is True and untrained_reason(healthy) is None
