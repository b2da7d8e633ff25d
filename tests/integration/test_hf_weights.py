"""Issue 23 item 8, the worker's half: a Hugging Face folder whose weights are real safetensors
but not this config's (every tensor, or some, missing) must fail its case, never train `ok` on
the random init transformers silently puts in their place. The parse-time check
(plan.flavors._weights_problem) only sees whether the file is safetensors at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.plan.flavors import flavor_for, hf_path_problem  # noqa: E402
from fsdp_bench.results.layout import CaseDir  # noqa: E402
from fsdp_bench.worker.loop import run  # noqa: E402
from fsdp_bench.worker.models.hf import build_config, build_hf_model  # noqa: E402

pytestmark = pytest.mark.versions  # transformers' loading info (missing_keys) and its warnings

GPT2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 64, "n_positions": 64}


def _folder_with_weights(tmp_path, edit):
    """A gpt2 folder: config.json and model.safetensors from the real model's state, edited."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPT2))
    lm = AutoModelForCausalLM.from_config(build_config(flavor_for(f"hf:{folder}")))
    state = {k: v.contiguous() for k, v in lm.state_dict().items() if k != "lm_head.weight"}  # tied
    safetensors_torch.save_file(edit(state), str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def _renamed(state):
    return {f"not_this_model.{k}": v for k, v in state.items()}


def _one_short(state):
    return {k: v for k, v in state.items() if not k.endswith("h.0.mlp.c_fc.weight")}


@pytest.mark.parametrize(
    "edit, missing",
    [
        (_renamed, "17 of the model's tensors (first: lm_head.weight)"),
        (_one_short, "1 of the model's tensors (first: transformer.h.0.mlp.c_fc.weight)"),
    ],
    ids=["every-weight-missing", "one-weight-missing"],
)
def test_weights_that_are_not_the_configs_are_refused_by_the_worker(tmp_path, edit, missing):
    folder = _folder_with_weights(tmp_path, edit)
    assert hf_path_problem(f"hf:{folder}") is None  # real safetensors: the parse-time check lets it by
    with pytest.raises(ValueError) as refused:
        build_hf_model(flavor_for(f"hf:{folder}"), meta=False)
    assert f"the weights lack {missing}; not this config's weights" in str(refused.value)


def test_a_rank_with_every_weight_missing_records_failed_instead_of_ok(tmp_path):
    """The real entry point (what torchrun starts), at world size 1: the rank's record says why."""
    folder = _folder_with_weights(tmp_path, _renamed)
    case = Case(strategy="ddp", model=f"hf:{folder}", nproc=1, steps=1, warmup=0, seq_len=16)
    work = CaseDir(tmp_path / "work")
    work.path.mkdir()
    work.case_file.write_text(json.dumps(case.to_dict()))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(
        [sys.executable, "-m", "fsdp_bench.worker", "--case", str(work.case_file), "--out", str(work.path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode != 0, proc.stderr[-2000:]
    record = json.loads(work.rank_file(0).read_text())
    assert record["status"] == "failed", record["status"]
    assert "lack 17 of the model's tensors" in record["error"]["message"]
    assert "not this config's weights" in record["error"]["message"]


def test_the_configs_own_weights_load_and_train(tmp_path):
    folder = _folder_with_weights(tmp_path, lambda state: state)
    model = build_hf_model(flavor_for(f"hf:{folder}"), meta=False)
    saved = safetensors_torch.load_file(str(folder / "model.safetensors"))
    loaded = model.lm.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in saved.items())  # the file's values, not a random init
    record = run(Case(strategy="ddp", model=f"hf:{folder}", nproc=1, steps=1, warmup=0, seq_len=16))
    assert record["status"] == "ok", record.get("error") or record
