"""Parameter shapes of Hugging Face causal LMs from their config dict alone (pure, no torch).

Two architecture shapes are known (the catalog's `shape`, plan.architectures), parameters listed
in the order transformers registers them (checked against the real modules in
tests/integration/test_hf_units.py):
- llama_style (`llama`, `qwen2`, `mistral`, `gemma`): per decoder layer q/k/v/o projections (q:
  heads x head_dim, k/v: num_key_value_heads x head_dim; a row with `qkv_bias` (qwen2) adds q/k/v
  biases, `attention_bias` adds biases to all four), gate/up/down MLP (`mlp_bias` adds biases),
  two RMSNorm weights; root: embed_tokens, final norm, lm_head unless the embeddings are tied
  (`tie_word_embeddings`, absent: the row's `tied_by_default`, as in transformers).
- gpt2: per block ln_1 (w, b), attn.c_attn (Conv1D: weight is (in, out)) and bias, attn.c_proj,
  ln_2, mlp.c_fc, mlp.c_proj, each with a bias; root: wte, wpe, ln_f; the head is tied to wte.

`hf_layer_ready_order` gives the order backward makes a layer's gradients ready, which DDP
rebuilds its buckets in (read with post-accumulate-grad hooks on real DDP, tests/integration/
test_ddp_ready_order.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsdp_bench.plan.architectures import HF_MODEL_TYPES, hf_architecture

Shape = tuple[int, ...]


def tied_embeddings(config: Mapping[str, Any]) -> bool:
    """Whether the output head shares the token embedding, with transformers' per-type default."""
    return bool(config.get("tie_word_embeddings", hf_architecture(config).tied_by_default))


def unsupported_reason(config: Mapping[str, Any]) -> str | None:
    """Why the shapes of this config cannot be computed (None: they can)."""
    model_type = config.get("model_type")
    if model_type not in HF_MODEL_TYPES:
        return (
            f"no parameter-shape model for Hugging Face model_type {model_type!r} (known: {', '.join(HF_MODEL_TYPES)})"
        )
    return None


def _llama_layer(c: Mapping[str, Any]) -> tuple[Shape, ...]:
    d, inter = c["hidden_size"], c["intermediate_size"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    hd = c.get("head_dim") or d // heads
    qkv_bias = hf_architecture(c).qkv_bias or bool(c.get("attention_bias"))
    o_bias = bool(c.get("attention_bias"))
    mlp_bias = bool(c.get("mlp_bias"))
    shapes: list[Shape] = []
    for out in (heads * hd, kv * hd, kv * hd):
        shapes += [(out, d)] + ([(out,)] if qkv_bias else [])
    shapes += [(d, heads * hd)] + ([(d,)] if o_bias else [])
    for out, inp in ((inter, d), (inter, d), (d, inter)):
        shapes += [(out, inp)] + ([(out,)] if mlp_bias else [])
    return tuple(shapes) + ((d,), (d,))


def _llama_layer_ready(c: Mapping[str, Any]) -> tuple[int, ...]:
    """Indices into `_llama_layer`'s shapes in the order backward makes their gradients ready: the
    reverse of forward's use (input norm, q, k, v, o, post-attention norm, gate, up, down), a
    linear's bias before its weight. Reverse registration order puts the input norm before the
    projections, the post-attention norm before the MLP (read on dev seeds 59, 60, 65 and 66: every
    llama-style type, tied and untied, qkv biases or none)."""
    qkv_bias = hf_architecture(c).qkv_bias or bool(c.get("attention_bias"))
    biased = (qkv_bias,) * 3 + (bool(c.get("attention_bias")),) + (bool(c.get("mlp_bias")),) * 3
    linears, index = [], 0
    for bias in biased:
        linears.append(tuple(range(index, index + 1 + bias)))  # weight (, bias)
        index += 1 + bias
    q, k, v, o, gate, up, down = linears
    use = [(index,), q, k, v, o, (index + 1,), gate, up, down]  # the norms follow the linears
    return tuple(i for group in use for i in group)[::-1]


# gpt2's block in ready order (`_gpt2_layer`'s indices): mlp.c_proj, mlp.c_fc (bias, weight), ln_2
# (weight, bias), attn.c_proj, attn.c_attn, ln_1: its registration order reversed except each layer
# norm's weight before its bias (read on dev seed 62)
_GPT2_LAYER_READY = (11, 10, 9, 8, 6, 7, 5, 4, 3, 2, 0, 1)


def hf_layer_ready_order(config: Mapping[str, Any]) -> tuple[int, ...]:
    """Indices into a decoder layer's shapes (`hf_shapes`) in the order backward makes their
    gradients ready. ValueError for an unsupported model_type."""
    reason = unsupported_reason(config)
    if reason:
        raise ValueError(reason)
    return _GPT2_LAYER_READY if hf_architecture(config).shape == "gpt2" else _llama_layer_ready(config)


def _llama_root(c: Mapping[str, Any]) -> tuple[Shape, ...]:
    d, v = c["hidden_size"], c["vocab_size"]
    head = () if tied_embeddings(c) else ((v, d),)
    return ((v, d), (d,)) + head


def _gpt2_layer(c: Mapping[str, Any]) -> tuple[Shape, ...]:
    d = c["n_embd"]
    inner = c.get("n_inner") or 4 * d
    return ((d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,), (d, inner), (inner,), (inner, d), (d,))


def _gpt2_root(c: Mapping[str, Any]) -> tuple[Shape, ...]:
    d = c["n_embd"]
    head = () if tied_embeddings(c) else ((c["vocab_size"], d),)
    return ((c["vocab_size"], d), (c["n_positions"], d), (d,), (d,)) + head


def hf_shapes(config: Mapping[str, Any]) -> tuple[tuple[Shape, ...], list[tuple[Shape, ...]]]:
    """(root parameter shapes, one tuple of shapes per decoder layer). ValueError when the
    model_type is not one of KNOWN_MODEL_TYPES."""
    reason = unsupported_reason(config)
    if reason:
        raise ValueError(reason)
    if hf_architecture(config).shape == "gpt2":
        return _gpt2_root(config), [_gpt2_layer(config)] * config["n_layer"]
    return _llama_root(config), [_llama_layer(config)] * config["num_hidden_layers"]


def hf_dims(config: Mapping[str, Any]) -> dict[str, int]:
    """hidden, intermediate, layers, vocab of a supported config (for the activation estimate)."""
    reason = unsupported_reason(config)
    if reason:
        raise ValueError(reason)
    if hf_architecture(config).shape == "gpt2":
        d = config["n_embd"]
        return {
            "hidden": d,
            "intermediate": config.get("n_inner") or 4 * d,
            "layers": config["n_layer"],
            "vocab": config["vocab_size"],
        }
    return {
        "hidden": config["hidden_size"],
        "intermediate": config["intermediate_size"],
        "layers": config["num_hidden_layers"],
        "vocab": config["vocab_size"],
    }


def attention_layers_and_width(flavor) -> tuple[int, int]:
    """(attention layers, model width) of a flavor; (0, 0) for the attention-free linear stack."""
    from fsdp_bench.plan.flavors import load_config_dict

    shape = flavor.architecture.shape
    if shape == "linear":
        return 0, 0
    if shape == "nanogpt":
        return flavor.config["n_layer"], flavor.config["n_embd"]
    dims = hf_dims(load_config_dict(flavor))
    return dims["layers"], dims["hidden"]
