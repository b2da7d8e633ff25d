"""What a training step's forward pass keeps for backward, per layer, counted from the model's
config (pure, no torch): the activation part of the peak-memory model (analysis.fit).

Counted tensor by tensor from what autograd saves (distinct storages), per token, for fp32
eager training with SDPA attention (torch's CPU flash kernel: output plus a log-sum-exp per
head; `transpose(1, 2).contiguous()` of its output is a view, so the output projection's input
costs nothing more). Checked against `torch.autograd.graph.saved_tensors_hooks` on the real
modules (tests/integration/test_peak_model.py):
- llama-style layer (llama, qwen2, mistral): 6 x hidden (layer input, two RMSNorms' normalized
  value and output, the attention residual), 2 x q width (rotated q, attention output),
  2 x kv width (rotated k, v), 4 x intermediate (gate, SiLU, up, their product), 2 RMSNorm
  rsqrt values and one log-sum-exp per query head; cos/sin of the rotary embedding once.
- gpt2 (transformers): 8 x hidden + 4 (two LayerNorms' mean/rstd) + 5 x intermediate for
  gelu_new (transformers evaluates the tanh formula in Python: input, tanh, 0.5x, 1 + tanh, product),
  2 x intermediate for exact gelu; with dropout (GPT2Config's default 0.1) the attention takes
  the math path on CPU (the scores, softmax and dropout noise: 3 x heads x seq per token, plus
  2 x hidden) and each dropout keeps its noise in fp32 (CPU's dropout is input * noise).
- the project's GPT: 16 x hidden + 2 + heads (Korthikanti et al. 2022 count 17 d; the
  contiguous copy after attention is a view here).
- linear stack: the input, each ReLU output and the target.
Head: the final norm (3 x hidden), log_softmax's output (vocab, fp32), the token ids and targets
(int64). The loss's backward then holds two vocab-wide fp32 tensors (the gradient of the
log-probabilities and of the logits): `loss_temp`.
Activation checkpointing keeps each block's input only and recomputes one block at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsdp_bench.analysis.hf_units import LLAMA_STYLE
from fsdp_bench.plan.flavors import ModelFlavor, load_config_dict

INT64 = 8


@dataclass(frozen=True)
class Activations:
    """Bytes the forward pass keeps, for one micro-batch of one rank."""

    per_layer: tuple[int, ...]  # each block's saved tensors, forward order
    outside: int  # embeddings, final norm, log-probabilities, ids and targets
    loss_temp: int  # the loss's backward: two vocab-wide gradients
    recompute: int = 0  # activation checkpointing: one block's activations rebuilt in backward
    logprobs: int = 0  # log_softmax's output (part of `outside`), freed when the loss's backward ends

    @property
    def total(self) -> int:
        return sum(self.per_layer) + self.outside


def _llama_layer(c: Mapping[str, Any], seq_len: int) -> tuple[int, int]:
    """(per token per layer, per-sequence extras): fp32 elements."""
    h, inter, heads = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]
    head_dim = c.get("head_dim") or h // heads
    kv = (c.get("num_key_value_heads") or heads) * head_dim
    per_token = 6 * h + 2 * heads * head_dim + 2 * kv + 4 * inter + 2 + heads
    return per_token, 2 * seq_len * head_dim  # cos and sin, shared by the layers


def _gpt2_layer(c: Mapping[str, Any], seq_len: int) -> tuple[int, int]:
    h, heads = c["n_embd"], c["n_head"]
    inter = c.get("n_inner") or 4 * h
    gelu = 5 if c.get("activation_function", "gelu_new") == "gelu_new" else 2
    per_token = 8 * h + 4 + gelu * inter
    if c.get("attn_pdrop", 0.1) > 0:  # math attention: scores, softmax, dropout noise
        per_token += 3 * heads * seq_len + 2 * h
    else:
        per_token += heads
    return per_token, 0


def _dims(flavor: ModelFlavor) -> dict[str, Any]:
    """hidden, vocab, layers, embedding dropout and the per-layer counts of the flavor."""
    c = flavor.config
    if not flavor.takes_tokens:
        return {
            "h": c["dim"],
            "vocab": 0,
            "layers": c["n_layers"],
            "embd_drop": 0,
            "layer": (c["dim"], 0),
            "norm": (0, 0),
            "positions": False,
        }
    if not flavor.from_hf_config:  # the project's nanoGPT-style model
        return {
            "h": c["n_embd"],
            "vocab": c["vocab_size"],
            "layers": c["n_layer"],
            "embd_drop": 0,
            "layer": (16 * c["n_embd"] + 2 + c["n_head"], 0),
            "norm": (2, 2),
            "positions": True,
        }
    cfg = load_config_dict(flavor)
    if cfg["model_type"] == "gpt2":
        return {
            "h": cfg["n_embd"],
            "vocab": cfg["vocab_size"],
            "layers": cfg["n_layer"],
            "cfg": cfg,
            "embd_drop": cfg["n_embd"] if cfg.get("embd_pdrop", 0.1) > 0 else 0,
            "norm": (2, 2),
            "positions": True,
            "gpt2": True,
        }
    if cfg["model_type"] in LLAMA_STYLE:
        return {
            "h": cfg["hidden_size"],
            "vocab": cfg["vocab_size"],
            "layers": cfg["num_hidden_layers"],
            "cfg": cfg,
            "embd_drop": 0,
            "norm": (3, 1),
            "positions": False,
        }
    raise ValueError(f"no activation model for Hugging Face model_type {cfg['model_type']!r}")


def estimate_activations(
    flavor: ModelFlavor, batch_size: int, seq_len: int, *, act_ckpt: bool = False, dtype_bytes: int = 4
) -> Activations:
    """The saved activations of one micro-batch (batch_size x seq_len tokens) on one rank.

    `dtype_bytes` scales what the blocks keep (2 under bf16/fp16 compute); the log-probabilities
    and the loss's gradients stay fp32 (the loss upcasts the logits)."""
    d = _dims(flavor)
    tokens = batch_size * seq_len
    if "cfg" in d:
        d["layer"] = (_gpt2_layer if d.get("gpt2") else _llama_layer)(d["cfg"], seq_len)
    per_token, per_seq = d["layer"]
    layer = per_token * tokens * dtype_bytes
    if not flavor.takes_tokens:  # the linear stack: input and target; each block keeps its ReLU output
        return Activations(tuple([layer] * d["layers"]), 2 * layer, 0)
    h, vocab = d["h"], d["vocab"]
    widths, extras = d["norm"]  # final norm: hidden-wide tensors kept, per-token statistics
    outside = (
        (per_seq + (d["embd_drop"] + widths * h + extras) * tokens) * dtype_bytes
        + vocab * tokens * 4  # log_softmax's output, fp32
        + 2 * tokens * INT64
        + (seq_len * INT64 if d["positions"] else 0)
    )  # ids, targets, positions
    loss_temp = 2 * vocab * tokens * 4
    if act_ckpt:  # each block keeps its input; backward rebuilds one block at a time
        return Activations(
            tuple([h * tokens * dtype_bytes] * d["layers"]),
            outside,
            loss_temp,
            recompute=layer,
            logprobs=vocab * tokens * 4,
        )
    return Activations(tuple([layer] * d["layers"]), outside, loss_temp, logprobs=vocab * tokens * 4)
