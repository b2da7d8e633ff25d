"""Hugging Face `transformers` causal LMs built from a config (shipped or in a local folder).

Nothing is downloaded: configs come from `fsdp_bench/plan/configs/` or `hf:PATH`. Parameters
are created on the meta device (buffers such as rotary frequencies stay real) and materialized
after sharding, so a rank never holds the whole 7B model; a local folder's weights, when present,
are loaded instead (that needs the full model on the host once).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fsdp_bench.plan.flavors import ModelFlavor, load_config_dict
from fsdp_bench.worker.models.loss import chunked_cross_entropy

_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


class CausalLM(nn.Module):
    """A transformers causal LM with the project's calling convention: `model(x, y) -> loss`."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm
        self.loss_chunks = 1  # >1: the chunked loss (worker.setup sets it from the case)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.loss_chunks > 1:  # the decoder's hidden states; the head runs slice by slice
            hidden = self.lm.base_model(input_ids=idx, use_cache=False).last_hidden_state
            softcap = getattr(self.lm.config, "final_logit_softcapping", None)
            head = self.lm.get_output_embeddings()
            return chunked_cross_entropy(hidden, head, targets, chunks=self.loss_chunks, softcap=softcap)
        logits = self.lm(input_ids=idx, use_cache=False).logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


def build_config(flavor: ModelFlavor):
    from transformers import AutoConfig

    data = load_config_dict(flavor)
    model_type = data.pop("model_type")
    config = AutoConfig.for_model(model_type, **data)
    config.use_cache = False
    return config


def weights_folder(flavor: ModelFlavor) -> Path | None:
    """The local folder's weights, if it has any (shipped flavors never do)."""
    folder = flavor.config.get("path")
    if folder and any((Path(folder) / f).exists() for f in _WEIGHT_FILES):
        return Path(folder)
    return None


@contextlib.contextmanager
def params_on_meta() -> Iterator[None]:
    """Create every nn.Parameter on the meta device while leaving buffers real.

    Rotary `inv_freq` and similar buffers are computed in `__init__` and cannot be recomputed
    generically, so only parameters go to meta (each is created once and dropped at once).
    """
    original = nn.Module.register_parameter

    def register(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if param is not None and not param.is_meta:
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def build_hf_model(flavor: ModelFlavor, *, meta: bool) -> CausalLM:
    from transformers import AutoModelForCausalLM

    folder = weights_folder(flavor)
    if folder is not None:
        lm, info = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="sdpa", output_loading_info=True
        )
        missing = info.get("missing_keys") or []
        if missing:  # transformers only warns and initialises them at random: not the user's model
            raise ValueError(
                f"{folder}: the weights lack {len(missing)} of the model's tensors "
                f"(first: {sorted(missing)[0]}); not this config's weights"
            )
    else:
        config = build_config(flavor)
        with params_on_meta() if meta else contextlib.nullcontext():
            lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    return CausalLM(lm)


def local_tokenizer(flavor: ModelFlavor):
    """The tokenizer in a local model folder, or None (shipped flavors have none)."""
    folder = flavor.config.get("path")
    if not folder or not any(
        (Path(folder) / f).exists()
        for f in ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
    ):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def vocab_size(flavor: ModelFlavor) -> int:
    return int(load_config_dict(flavor)["vocab_size"])


def tie_weights(model: nn.Module) -> None:
    """Re-tie input and output embeddings after materialization replaced parameter objects."""
    for module in model.modules():
        if hasattr(module, "tie_weights") and hasattr(module, "config"):
            module.tie_weights()
