"""Named model sizes as plain data (no torch), so collection and validation stay import-light."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class ModelFlavor:
    """A named model size. `family` picks the builder; `config` is passed to it."""

    name: str
    family: str  # "linear" or "gpt"
    config: Mapping[str, Any]
    max_seq_len: int | None  # longest sequence the model accepts (None: any)
    description: str


def _linear(name: str, dim: int, n_layers: int, description: str) -> ModelFlavor:
    return ModelFlavor(name, "linear", {"dim": dim, "n_layers": n_layers}, None, description)


def _gpt(name: str, n_layer: int, n_head: int, n_embd: int, vocab: int, block: int, description: str) -> ModelFlavor:
    config = {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "vocab_size": vocab, "block_size": block}
    return ModelFlavor(name, "gpt", config, block, description)


MODEL_FLAVORS: dict[str, ModelFlavor] = {
    f.name: f
    for f in (
        _linear("linear_tiny", 256, 4, "4 x Linear(256, 256): CPU tests"),
        _linear("linear_small", 2048, 8, "8 x Linear(2048, 2048), 34M params"),
        _linear("linear_odsc", 16384, 9, "9 x Linear(16384, 16384), 2.4B params, the ODSC tutorial's 9 GiB model"),
        _gpt("gpt_tiny", 2, 2, 64, 512, 256, "nanoGPT-style, 2 layers, d=64: CPU tests"),
        _gpt("gpt_small", 4, 4, 256, 4096, 512, "nanoGPT-style, 4 layers, d=256, 4.2M params: CPU sweeps"),
        _gpt("gpt_124m", 12, 12, 768, 50304, 1024, "GPT-2 124M shape (nanoGPT)"),
        _gpt("gpt_350m", 24, 16, 1024, 50304, 1024, "GPT-2 350M (medium) shape"),
    )
}

HF_PREFIX = "hf:"


def is_hf_path(model: str) -> bool:
    """`hf:PATH` names a local Hugging Face model folder."""
    return model.startswith(HF_PREFIX) and len(model) > len(HF_PREFIX)
