"""plan.generated_configs: the seeded out-of-sample configs (issue 35) are valid for every
supported architecture, the same on every call, and spread over what the peak model must handle."""

from __future__ import annotations

import json

from fsdp_bench.analysis.comm_model import model_units
from fsdp_bench.analysis.hf_units import tied_embeddings
from fsdp_bench.plan.architectures import HF_MODEL_TYPES
from fsdp_bench.plan.flavors import flavor_for, hf_path_problem
from fsdp_bench.plan.generated_configs import (
    DEV_SEEDS,
    FRESH_HOLDOUT_SEEDS,
    HOLDOUT_SEEDS,
    _prime_at_least,
    generated_config,
    write_generated_config,
)

FIRST_30 = list(HOLDOUT_SEEDS)[:30]


def test_dev_and_holdout_seed_ranges_do_not_overlap():
    assert set(DEV_SEEDS).isdisjoint(HOLDOUT_SEEDS)
    assert set(FRESH_HOLDOUT_SEEDS).isdisjoint([*DEV_SEEDS, *HOLDOUT_SEEDS])
    assert len(HOLDOUT_SEEDS) >= 30


def test_a_seed_gives_the_same_config_every_time():
    assert generated_config(100_007) == generated_config(100_007)
    assert generated_config(100_007) != generated_config(100_008)


def test_every_generated_config_is_accepted_and_modelled(tmp_path):
    """Written as config.json, each of the first held-out seeds passes the sweep's check and its
    parameter shapes are computable (what the peak model reads)."""
    for seed in [*FIRST_30, *list(DEV_SEEDS)[:30]]:
        model = write_generated_config(seed, tmp_path)
        assert hf_path_problem(model) is None, (seed, hf_path_problem(model))
        assert json.loads((tmp_path / model.split("/")[-1] / "config.json").read_text())["model_type"] in HF_MODEL_TYPES
        assert sum(u.numel for u in model_units(flavor_for(model))) < 4_000_000  # a CPU case, seconds


def test_the_held_out_configs_cover_what_the_issue_names():
    """Each architecture, tied and untied heads, grouped-query ratios, prime vocabularies, odd
    widths, one to eight layers: the first 30 held-out seeds hold them all."""
    configs = [generated_config(s) for s in FIRST_30]
    assert {c["model_type"] for c in configs} == set(HF_MODEL_TYPES)
    assert {tied_embeddings(c) for c in configs} == {True, False}
    assert any(c.get("num_key_value_heads", 1) < c.get("num_attention_heads", 1) for c in configs)
    assert any(c["vocab_size"] == _prime_at_least(c["vocab_size"]) for c in configs)
    widths = [c.get("hidden_size") or c["n_embd"] for c in configs]
    assert any(w % 2 for w in widths) or any(w % 8 for w in widths)
    layers = {c.get("num_hidden_layers") or c["n_layer"] for c in configs}
    assert min(layers) <= 2 and max(layers) >= 7


def test_the_tied_gradient_copy_is_ddp_with_accumulation_and_a_tied_head_only(tmp_path):
    """fit.tied_gradient_copy_bytes: vocab x hidden x 4 bytes beside DDP's buckets once gradients
    accumulate (issue 35), nothing for an untied head, without accumulation or without buckets."""
    from fsdp_bench.analysis.fit import predict_peak_bytes

    tied, untied = (flavor_for(write_generated_config(s, tmp_path)) for s in (100000, 100019))
    config = generated_config(100000)
    expected = config["vocab_size"] * config["hidden_size"] * 4

    def part(flavor, strategy, accum):
        p = predict_peak_bytes(strategy, flavor, 2, 2, seq_len=32, grad_accum=accum)
        return p["parts_bytes"]["tied_grad_copy"]

    assert part(tied, "ddp", 2) == expected
    assert part(tied, "ddp", 1) == part(tied, "fsdp2", 2) == part(untied, "ddp", 2) == 0
