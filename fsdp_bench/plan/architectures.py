"""The model catalog: one row per architecture the suite can build and model (plain data, no torch).

A model flavor (plan/flavors.py) is a size of one of these rows. The row says how the worker
builds it (`builder`), what it eats (`takes_tokens`), whether it is built on the meta device,
and which shape model analysis/ applies to it (`shape`): the parameter shapes (analysis.hf_units),
the activations (analysis.activations) and so the peak-memory and communication models. Code asks
the row, never a model name or model_type string; adding a Hugging Face architecture whose layers
have an existing shape is one row here plus one config file in plan/configs/ (docs/models.md,
"Adding a model").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BUILDERS = ("linear", "gpt", "hf")  # worker.models: the linear stack, the project's GPT, transformers
SHAPES = ("linear", "nanogpt", "llama_style", "gpt2")  # the shape models analysis/ knows
# How a block's norms keep their tensors, which decides the fp32 bytes they add at low precision
# (analysis.activations): LayerNorm; Hugging Face's RMSNorm (an fp32 copy of its input); an
# RMSNorm computed in fp32 through its weight (Gemma's `x * (1 + weight)`: its output is fp32 too).
NORMS = ("none", "layernorm", "rmsnorm", "rmsnorm_fp32")
# Whether transformers gives the architecture's layers sliding-window attention, which under SDPA
# materialises a seq x seq mask (analysis.activations.sliding_mask_layers): "" never; "window" when
# the config's `sliding_window` is set (Mistral); "switched" when `use_sliding_window` is also true,
# for the layers from `max_window_layers` on (Qwen2). Both configs default the window to 4096.
SLIDING = ("", "window", "switched")
SLIDING_WINDOW_DEFAULT = 4096

# The size fields of each Hugging Face shape: every one must be a positive integer in a config.
_LLAMA_SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
_GPT2_SIZES = ("n_embd", "n_layer", "n_head", "vocab_size")


@dataclass(frozen=True)
class Architecture:
    """One architecture: the project's own (`linear`, `gpt`) or a Hugging Face `model_type`."""

    name: str  # the key: a Hugging Face config's model_type, or the builder's name for the own ones
    builder: str  # one of BUILDERS
    shape: str  # one of SHAPES: the parameter and activation model analysis/ uses
    takes_tokens: bool  # a language model (token ids in, next-token loss); False: feature vectors
    built_on_meta: bool  # built on the meta device and materialized after sharding
    tied_by_default: bool  # the head shares the token embedding when a config says nothing
    norm: str  # one of NORMS
    size_fields: tuple[str, ...] = ()  # Hugging Face: the config fields that must be positive integers
    qkv_bias: bool = False  # q/k/v projections carry biases whatever `attention_bias` says (Qwen2)
    sliding: str = ""  # one of SLIDING


def _hf(
    name: str, shape: str, tied: bool, norm: str = "rmsnorm", *, qkv_bias: bool = False, sliding: str = ""
) -> Architecture:
    sizes = _GPT2_SIZES if shape == "gpt2" else _LLAMA_SIZES
    return Architecture(name, "hf", shape, True, True, tied, norm, sizes, qkv_bias, sliding)


ARCHITECTURES: dict[str, Architecture] = {
    row.name: row
    for row in (
        Architecture("linear", "linear", "linear", False, False, tied_by_default=False, norm="none"),
        Architecture("gpt", "gpt", "nanogpt", True, False, tied_by_default=True, norm="layernorm"),
        # transformers' own defaults for tie_word_embeddings: Llama, Qwen2 and Mistral untie the
        # head, GPT-2 and Gemma tie it.
        _hf("llama", "llama_style", False),
        _hf("qwen2", "llama_style", False, qkv_bias=True, sliding="switched"),
        _hf("mistral", "llama_style", False, sliding="window"),
        _hf("gemma", "llama_style", True, "rmsnorm_fp32"),
        _hf("gpt2", "gpt2", True, "layernorm"),
    )
}

HF_MODEL_TYPES = tuple(name for name, row in ARCHITECTURES.items() if row.builder == "hf")


def hf_architecture(config: Mapping[str, Any]) -> Architecture:
    """The row of a Hugging Face config (by its model_type). KeyError names the known types."""
    model_type = config.get("model_type")
    if model_type not in HF_MODEL_TYPES:
        raise KeyError(
            f"Hugging Face model_type {str(model_type)[:40]!r} is not supported (supported: {', '.join(HF_MODEL_TYPES)})"
        )
    return ARCHITECTURES[model_type]
