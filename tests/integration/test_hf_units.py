"""Hugging Face flavors' parameter shapes from the config alone (analysis.hf_units), checked
against the real transformers modules, and the predictions they unlock (fit, simulation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_bench.analysis.comm_model import model_units
from fsdp_bench.analysis.fit import activation_bytes_per_sample
from fsdp_bench.analysis.hf_units import hf_shapes
from fsdp_bench.plan.flavors import MODEL_FLAVORS, flavor_for

HF_TINY = ["qwen2_tiny", "codellama_tiny", "llama3_tiny", "gpt2_tiny"]
# Configs the project does not ship: a llama with a prime vocab and no tie_word_embeddings key
# (transformers unties it), a mistral GQA 4:1 with tied embeddings, a GPT-2 with n_inner.
HF_TEST_CONFIGS = sorted(
    p.parent for p in (Path(__file__).resolve().parents[1] / "data" / "hf_configs").glob("*/config.json")
)
# Architectures added as one catalog row (plan/architectures.py) and one config file.
HF_TEST_CONFIGS += sorted(
    p.parent for p in (Path(__file__).resolve().parents[1] / "data" / "hf_architectures").glob("*/config.json")
)
HF_TEST_MODELS = [f"hf:{p}" for p in HF_TEST_CONFIGS]


@pytest.mark.versions  # transformers' module layout
@pytest.mark.parametrize("model", HF_TINY + HF_TEST_MODELS, ids=HF_TINY + [p.name for p in HF_TEST_CONFIGS])
def test_hf_units_match_the_real_modules(model):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fsdp_bench.worker.models.build import block_modules, build_model

    real = build_model(flavor_for(model), seed=0)
    units = model_units(flavor_for(model))
    blocks = block_modules(real)
    assert [u.shapes for u in units[1:]] == [tuple(tuple(p.shape) for p in b.parameters()) for b in blocks]
    block_ids = {id(p) for b in blocks for p in b.parameters()}
    root = [tuple(p.shape) for p in real.parameters() if id(p) not in block_ids]  # tied weights once
    assert list(units[0].shapes) == root
    assert sum(u.numel for u in units) == sum(p.numel() for p in real.parameters())


@pytest.mark.parametrize(
    "model,billions",
    [("qwen2_1_5b", 1.54), ("codellama_7b", 6.74), ("llama3_8b", 8.03), ("llama3_1b", 1.24), ("gpt2_124m", 0.124)],
)
def test_hf_parameter_counts_of_the_full_sizes(model, billions):
    total = sum(u.numel for u in model_units(MODEL_FLAVORS[model]))
    assert total / 1e9 == pytest.approx(billions, rel=0.01)


def test_an_absent_tie_key_takes_transformers_default():
    llama = {
        "model_type": "llama",
        "hidden_size": 8,
        "intermediate_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "vocab_size": 11,
    }
    assert hf_shapes(llama)[0] == ((11, 8), (8,), (11, 8))  # LlamaConfig: tie_word_embeddings=False
    assert hf_shapes({**llama, "tie_word_embeddings": True})[0] == ((11, 8), (8,))
    gpt2 = {"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "vocab_size": 11, "n_positions": 4}
    assert hf_shapes(gpt2)[0] == ((11, 8), (4, 8), (8,), (8,))  # GPT2Config: tied


def test_unknown_model_type_is_a_clear_value_error(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "mamba", "hidden_size": 8}')
    with pytest.raises(ValueError, match=r"model_type 'mamba' is not supported \(supported: llama, qwen2, "):
        model_units(flavor_for(f"hf:{tmp_path}"))
    with pytest.raises(ValueError):
        hf_shapes({"model_type": "t5"})


def test_hf_local_folder_and_activation_estimate(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,'
        ' "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 64,'
        ' "tie_word_embeddings": false}'
    )
    units = model_units(flavor_for(f"hf:{tmp_path}"))
    assert units[0].shapes == ((100, 64), (64,), (100, 64)) and len(units) == 3
    act = activation_bytes_per_sample(flavor_for(f"hf:{tmp_path}"), 16)
    # counted per tensor (analysis.activations): per layer 6h + 2q + 2kv + 4I + 2 + heads, rotary
    # cos/sin 2 x seq x head_dim, final norm 3h + 1, log-probabilities (vocab), int64 ids and targets
    per_layer = 6 * 64 + 2 * 64 + 2 * 32 + 4 * 128 + 2 + 4
    assert act == (2 * per_layer * 16 + 2 * 16 * 16 + (3 * 64 + 1) * 16) * 4 + 100 * 16 * 4 + 2 * 16 * 8


def test_fit_cli_accepts_hf_flavors_and_paths(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from fsdp_bench.report.fit_chart import main

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(
        '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 64}'
    )
    assert (
        main(
            [
                "--models",
                f"qwen2_tiny,hf:{tmp_path / 'm'}",
                "--strategies",
                "ddp,fsdp2",
                "--world-sizes",
                "1,8",
                "--out",
                str(tmp_path / "fit"),
            ]
        )
        == 0
    )
    assert (tmp_path / "fit" / "fit.csv").read_text().count("qwen2_tiny") == 4
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text('{"model_type": "mamba"}')
    for models in ("nope", f"hf:{tmp_path / 'bad'}"):
        with pytest.raises(SystemExit):
            main(["--models", models, "--out", str(tmp_path / "fit2")])
        err = capsys.readouterr().err.strip().splitlines()
        assert "Traceback" not in err[-1] and "error:" in err[-1]


def test_simulation_summary_for_hf_flavor():
    from fsdp_bench.analysis.simulation import simulation_summary
    from fsdp_bench.plan.case import Case

    case = Case(strategy="fsdp2", nproc=64, model="qwen2_tiny", batch_size=2, seq_len=32, steps=2, warmup=1)
    summary = simulation_summary(case, {"step_times_s": [0.1, 0.2]})
    assert "comm_null_reason" not in summary and summary["volume"]["all_gather_bytes"] > 0
