"""What a training step's forward pass keeps for backward, per layer, counted from the model's
config (pure, no torch): the activation part of the peak-memory model (analysis.fit).

Counted tensor by tensor from what autograd saves (distinct storages), per token, for fp32
eager training with SDPA attention (torch's CPU flash kernel: output plus a log-sum-exp per
head; `transpose(1, 2).contiguous()` of its output is a view, so the output projection's input
costs nothing more). Checked against `torch.autograd.graph.saved_tensors_hooks` on the real
modules (tests/integration/test_peak_model.py):
- llama_style layer (the catalog's shape: llama, qwen2, mistral, gemma): 6 x hidden (layer input, two RMSNorms' normalized
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

Sliding-window attention (Mistral; Qwen2 with `use_sliding_window`), once the sequence reaches the
window: transformers builds a boolean (batch, 1, seq, seq) mask for SDPA instead of `is_causal`, and
torch's CPU kernel converts it to an additive mask in the query's dtype, which each sliding layer's
SDPA keeps for backward: 1 byte per (sample, query, key) for the mask, plus the compute dtype's
bytes per sliding layer (`sliding_mask_layers`). Measured (ru_maxrss, transformers 5.23, torch 2.13,
a 64-wide Mistral, window 128, seq 4096, batch 1) above the same config without a window: 84 MiB at
1 layer, 224 MiB at 3 (counted: 80 and 208 MiB); no mask at a window above the sequence.

Under bf16/fp16 (`dtype_bytes` 2) the same tensors are kept at 2 bytes, except what stays fp32
(checked the same way on CPU, and against an H100's allocator in results/reference):
- SDPA's log-sum-exp, one per head and token, is fp32 whatever the inputs;
- Hugging Face's RMSNorm upcasts its input to fp32 and keeps that copy (+2 bytes x hidden per norm);
- under autocast (DDP: parameters stay fp32, so the residual stream is fp32) every norm keeps its
  fp32 input (+2 bytes x hidden per LayerNorm, +4 per RMSNorm, whose normalized value is fp32
  too), and autocast keeps a 2-byte copy of every weight a matmul reads (the head once);
- the linear stack keeps its input's low-precision copy; its data stays fp32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsdp_bench.plan.architectures import SLIDING_WINDOW_DEFAULT
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
    final_norm: int = 0  # the final norm's saved tensors (part of `outside`), freed before the blocks' backward
    stream_grad: int = 0  # backward's running gradient of the residual stream (one hidden-wide tensor)
    # of each block's saved tensors, the MLP's inter-wide ones, which the block's backward frees
    # before it makes the attention's weight gradients (0 where not counted: not Llama-style)
    mlp_per_layer: int = 0

    @property
    def total(self) -> int:
        return sum(self.per_layer) + self.outside

    @property
    def under_blocks(self) -> int:
        """What of `outside` is alive through the blocks' backward (and before the first block's
        forward): embeddings, ids and targets; the log-probabilities and the final norm's tensors
        are gone by then."""
        return self.outside - self.logprobs - self.final_norm


@dataclass(frozen=True)
class _Layer:
    """One block's saved tensors per token, as counted for fp32, and what of them stays fp32."""

    per_token: int  # elements per token
    per_seq: int = 0  # elements per sequence, shared by the layers (rotary cos and sin)
    lse: int = 0  # of per_token: SDPA's log-sum-exp, fp32 at any precision
    norms: int = 0  # norms per block (their inputs stay fp32 under autocast)
    separate_inputs: int = 0  # projections reading one input separately: autocast keeps a copy each
    mlp: int = 0  # of per_token: the MLP's inter-wide tensors (gate, up, activation, product)


def _llama_layer(c: Mapping[str, Any], seq_len: int) -> _Layer:
    h, inter, heads = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]
    head_dim = c.get("head_dim") or h // heads
    kv = (c.get("num_key_value_heads") or heads) * head_dim
    per_token = 6 * h + 2 * heads * head_dim + 2 * kv + 4 * inter + 2 + heads
    if c.get("attention_dropout") or 0:  # math attention on CPU (flash has no dropout), as gpt2's below:
        # scaled q and k, scores' softmax, dropout noise and the dropped scores; no log-sum-exp
        math_path = per_token - heads + heads * head_dim + kv + 3 * heads * seq_len
        return _Layer(math_path, 2 * seq_len * head_dim, norms=2, separate_inputs=3, mlp=4 * inter)
    return _Layer(per_token, 2 * seq_len * head_dim, lse=heads, norms=2, separate_inputs=3, mlp=4 * inter)


def _gpt2_layer(c: Mapping[str, Any], seq_len: int) -> _Layer:
    h, heads = c["n_embd"], c["n_head"]
    inter = c.get("n_inner") or 4 * h
    gelu = 5 if c.get("activation_function", "gelu_new") == "gelu_new" else 2
    per_token = 8 * h + 4 + gelu * inter
    if c.get("attn_pdrop", 0.1) > 0:  # math attention: scores, softmax, dropout noise
        return _Layer(per_token + 3 * heads * seq_len + 2 * h, norms=2)
    return _Layer(per_token + heads, lse=heads, norms=2)


# Bytes per hidden element each norm keeps beyond its low-precision count, by the catalog's `norm`
# (plan.architectures) and whether autocast runs: Hugging Face's RMSNorm keeps an fp32 copy of its
# input; Gemma's computes through its weight in fp32, so its output is fp32 as well (measured on
# gemma_tiny in bf16: +2 bytes x hidden per norm beyond Llama's); under autocast every norm's input
# is fp32 (and an RMSNorm's normalized value too).
_NORM_FP32_EXTRA = {
    ("none", False): 0,
    ("none", True): 0,
    ("layernorm", False): 0,
    ("layernorm", True): 2,
    ("rmsnorm", False): 2,
    ("rmsnorm", True): 4,
    ("rmsnorm_fp32", False): 4,
    ("rmsnorm_fp32", True): 4,
}


def _loss_bytes(vocab: int, hidden: int, tokens: int, loss: str, grad_bytes: int) -> tuple[int, int]:
    """(what the loss keeps from forward to its backward, its backward's temporaries)."""
    if loss != "chunked":  # log_softmax's fp32 output; the fp32 gradients of it and of the logits
        return vocab * tokens * 4, 2 * vocab * tokens * 4
    # the gradients made in forward (worker.models.loss), then their copies scaled by backward
    grads = (tokens + vocab) * hidden * grad_bytes
    return grads, grads


def _dims(flavor: ModelFlavor, seq_len: int) -> dict[str, Any]:
    """hidden, vocab, layers, embedding dropout, norm kind and the per-layer counts of the flavor,
    by its architecture's shape model (plan.architectures)."""
    c, shape = flavor.config, flavor.architecture.shape
    if shape == "linear":
        return {"h": c["dim"], "vocab": 0, "layers": c["n_layers"], "embd_drop": 0, "layer": _Layer(c["dim"])}
    common = {"embd_drop": 0, "norm": (2, 2), "positions": True}
    if shape == "nanogpt":  # the project's GPT
        layer = _Layer(16 * c["n_embd"] + 2 + c["n_head"], lse=c["n_head"], norms=2)
        return {**common, "h": c["n_embd"], "vocab": c["vocab_size"], "layers": c["n_layer"], "layer": layer}
    cfg = load_config_dict(flavor)
    if shape == "gpt2":
        return {
            **common,
            "h": cfg["n_embd"],
            "vocab": cfg["vocab_size"],
            "layers": cfg["n_layer"],
            "embd_drop": cfg["n_embd"] if cfg.get("embd_pdrop", 0.1) > 0 else 0,
            "layer": _gpt2_layer(cfg, seq_len),
        }
    if shape == "llama_style":
        return {
            **common,
            "h": cfg["hidden_size"],
            "vocab": cfg["vocab_size"],
            "layers": cfg["num_hidden_layers"],
            "norm": (3, 1),
            "positions": False,
            "layer": _llama_layer(cfg, seq_len),
        }
    raise ValueError(f"no activation model for the {shape!r} shape (Hugging Face model_type {cfg['model_type']!r})")


def sliding_mask_layers(flavor: ModelFlavor, seq_len: int) -> int:
    """How many of the flavor's layers (the last ones) attend through a materialised seq x seq
    sliding-window mask at `seq_len` (0: SDPA runs causal without one). transformers skips the
    mask while the sequence is shorter than the window."""
    kind = flavor.architecture.sliding
    if not kind:
        return 0
    config = load_config_dict(flavor)
    window = config.get("sliding_window", SLIDING_WINDOW_DEFAULT)
    if kind == "switched" and not config.get("use_sliding_window", False):
        return 0
    if not isinstance(window, int) or isinstance(window, bool) or seq_len < window:
        return 0
    layers = config["num_hidden_layers"]
    first = config.get("max_window_layers", 28) if kind == "switched" else 0
    return max(0, layers - first)


def _matmul_weights(flavor: ModelFlavor, vocab: int, h: int) -> int:
    """Elements of the weights a forward's matmuls read: every block's matrices and the head."""
    from fsdp_bench.analysis.comm_model import model_units

    blocks = sum(math.prod(s) for u in model_units(flavor) if not u.is_root for s in u.shapes if len(s) == 2)
    return blocks + vocab * h


def estimate_activations(
    flavor: ModelFlavor,
    batch_size: int,
    seq_len: int,
    *,
    act_ckpt: bool = False,
    dtype_bytes: int = 4,
    autocast: bool = False,
    loss: str = "full",
) -> Activations:
    """The saved activations of one micro-batch (batch_size x seq_len tokens) on one rank.

    `dtype_bytes` 2: bf16/fp16 compute, with what stays fp32 counted at 4 (the module doc);
    `autocast`: low precision by autocast over fp32 parameters (DDP) rather than by casting the
    parameters (FSDP's mixed precision). The log-probabilities and the loss's gradients are fp32.
    `loss` "chunked" (worker.models.loss): the loss keeps its gradients with respect to the hidden
    states and the head from forward to backward, where copies join them; no vocab-wide tensor."""
    d = _dims(flavor, seq_len)
    tokens = batch_size * seq_len
    low = dtype_bytes < 4
    layer_def: _Layer = d["layer"]
    h, vocab = d["h"], d["vocab"]
    norm_extra = _NORM_FP32_EXTRA[flavor.architecture.norm, autocast] if low else 0
    fp32_extra = (4 - dtype_bytes) * layer_def.lse + norm_extra * h * layer_def.norms
    if autocast and low:
        fp32_extra += layer_def.separate_inputs * h * dtype_bytes
    layer = (layer_def.per_token * dtype_bytes + fp32_extra) * tokens
    weight_copies = _matmul_weights(flavor, vocab, h) * dtype_bytes if autocast and low else 0
    if flavor.architecture.shape == "linear":  # input and target (fp32 data); each block its ReLU output
        input_copy = h * tokens * dtype_bytes if low else 0
        weight_copies -= h * h * dtype_bytes if weight_copies else 0  # the first block's: no input gradient
        return Activations(tuple([layer] * d["layers"]), 2 * h * tokens * 4 + input_copy + weight_copies, 0)
    widths, extras = d["norm"]  # final norm: hidden-wide tensors kept, per-token statistics
    kept_logprobs, loss_temp = _loss_bytes(vocab, h, tokens, loss, 4 if autocast else dtype_bytes)
    outside = (
        layer_def.per_seq * (4 if autocast else dtype_bytes)  # rotary cos/sin follow the parameters' dtype
        + ((d["embd_drop"] + widths * h + extras) * dtype_bytes + norm_extra * h) * tokens
        + kept_logprobs
        + 2 * tokens * INT64
        + (seq_len * INT64 if d["positions"] else 0)
        + weight_copies
    )  # ids, targets, positions
    head = {
        "logprobs": kept_logprobs,
        "final_norm": ((widths * h + extras) * dtype_bytes + norm_extra * h) * tokens,
        "stream_grad": h * tokens * dtype_bytes,
        "mlp_per_layer": layer_def.mlp * dtype_bytes * tokens,
    }
    masked = sliding_mask_layers(flavor, seq_len)  # the boolean mask once, each sliding layer's additive copy
    outside += tokens * seq_len if masked else 0
    per_layer = [layer] * (d["layers"] - masked) + [layer + tokens * seq_len * dtype_bytes] * masked
    if act_ckpt:  # each block keeps its input; backward rebuilds one block at a time
        return Activations(
            tuple([h * tokens * (4 if autocast else dtype_bytes)] * d["layers"]),
            outside,
            loss_temp,
            recompute=layer,
            **head,
        )
    return Activations(tuple(per_layer), outside, loss_temp, **head)
