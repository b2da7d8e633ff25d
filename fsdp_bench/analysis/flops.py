"""FLOPs per token, the peak-FLOPs table and model FLOPs utilization (pure, no torch).

One formula, the one nanoGPT, PaLM (appendix B) and torchtitan use for a decoder-only transformer:

    flops_per_token = 6 * N + 12 * L * H * Q * T

N counts the parameters that multiply activations. Embedding lookup tables (token and position
embeddings) are left out, as torchtitan leaves out `tok_embeddings`: a lookup costs no FLOPs. The
output projection is counted; with GPT-2 weight tying it is the same tensor as the token
embedding, so that tensor is counted once, as the output projection. 6 = 2 (multiply-add) x 3
(forward, input gradient, weight gradient). The attention term covers QK^T and AV over the full
T x T score matrix (no causal halving, as the references), L layers, H heads of size Q.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdp_bench.plan.catalog import PRECISIONS


def flops_per_token(
    *, n_matmul_params: int, n_layers: int = 0, n_heads: int = 0, head_dim: int = 0, seq_len: int = 0
) -> int:
    """Training FLOPs (forward + backward) per token; attention arguments 0 for attention-free models."""
    if n_matmul_params < 0 or min(n_layers, n_heads, head_dim, seq_len) < 0:
        raise ValueError("flops_per_token: counts must be non-negative")
    return 6 * n_matmul_params + 12 * n_layers * n_heads * head_dim * seq_len


def _bmm_flops(batch: int, n: int, m: int, p: int) -> int:
    """A batched (n x m) @ (m x p) matmul: one multiply and one add per term."""
    return 2 * batch * n * m * p


def _attention_dims(query_shape, key_shape, value_shape) -> tuple[int, int, int, int, int]:
    """(batch x query heads, query length, key length, q/k head size, value head size).

    Grouped-query attention gives key and value fewer heads than the query; the kernel broadcasts
    each key/value head to its group of query heads, so every matmul runs at the query's head
    count. torch >= 2.13 counts it so; torch 2.11 asserts equal head counts instead.
    """
    b, h_q, s_q, d_q = query_shape
    b_k, h_kv, s_k, d_k = key_shape
    b_v, h_v, s_v, d_v = value_shape
    if not (b == b_k == b_v and h_kv == h_v and d_q == d_k and s_k == s_v):
        raise ValueError(
            f"attention shapes do not fit together: q={tuple(query_shape)}, "
            f"k={tuple(key_shape)}, v={tuple(value_shape)}"
        )
    if h_kv <= 0 or h_q % h_kv:
        raise ValueError(f"query heads ({h_q}) are not a multiple of key/value heads ({h_kv})")
    return b * h_q, s_q, s_k, d_q, d_v


def sdpa_forward_flops(query_shape, key_shape, value_shape) -> int:
    """Scaled dot-product attention forward: scores = Q K^T, then scores V (shapes b, h, s, d)."""
    bh, s_q, s_k, d_qk, d_v = _attention_dims(query_shape, key_shape, value_shape)
    return _bmm_flops(bh, s_q, d_qk, s_k) + _bmm_flops(bh, s_q, s_k, d_v)


def sdpa_backward_flops(grad_out_shape, query_shape, key_shape, value_shape) -> int:
    """Its backward: the scores recomputed, then the gradients of V, the scores, Q and K."""
    bh, s_q, s_k, d_qk, d_v = _attention_dims(query_shape, key_shape, value_shape)
    if tuple(grad_out_shape)[-1] != d_v or tuple(grad_out_shape)[-2] != s_q:
        raise ValueError(f"attention output gradient {tuple(grad_out_shape)} does not fit q={tuple(query_shape)}")
    return (
        _bmm_flops(bh, s_q, d_qk, s_k)  # scores recomputed
        + _bmm_flops(bh, s_q, d_v, s_k)  # grad of the scores: grad_out V^T
        + _bmm_flops(bh, s_k, s_q, d_v)  # grad of V: scores^T grad_out
        + _bmm_flops(bh, s_q, s_k, d_qk)  # grad of Q: grad_scores K
        + _bmm_flops(bh, d_qk, s_q, s_k)
    )  # grad of K: Q^T grad_scores


@dataclass(frozen=True)
class PeakFlops:
    """Dense (no structured sparsity) tensor-core peaks in TFLOP/s from the vendor datasheets.

    fp32 is the non-tensor-core FP32 rate: PyTorch does not use TF32 for float32 matmuls unless
    `torch.backends.cuda.matmul.allow_tf32` / `set_float32_matmul_precision` says so.
    """

    name: str
    bf16: float | None
    fp16: float | None
    fp32: float | None
    tf32: float | None


# Matched in order against torch.cuda.get_device_name() (case-insensitive, every word must occur),
# so the more specific names come first. Datasheet sparse figures are halved to dense ones.
PEAK_TFLOPS: tuple[tuple[tuple[str, ...], PeakFlops], ...] = (
    (("h200", "nvl"), PeakFlops("H200 NVL", 835.5, 835.5, 60.0, 417.5)),
    (("h200",), PeakFlops("H200 SXM", 989.4, 989.4, 66.9, 494.7)),
    (("h100", "pcie"), PeakFlops("H100 PCIe", 756.5, 756.5, 51.2, 378.0)),
    (("h100", "nvl"), PeakFlops("H100 NVL", 835.5, 835.5, 60.0, 417.5)),
    (("h100",), PeakFlops("H100 SXM", 989.4, 989.4, 66.9, 494.7)),
    (("a100",), PeakFlops("A100", 312.0, 312.0, 19.5, 156.0)),
    (("l40s",), PeakFlops("L40S", 362.05, 362.05, 91.6, 183.0)),
    (("l4",), PeakFlops("L4", 121.0, 121.0, 30.3, 60.0)),
    # A10G (AWS) is left out on purpose: NVIDIA publishes no datasheet for it, and a guessed peak
    # would make a wrong MFU. Its MFU is null with the reason until a sourced figure is added.
    (("a10",), PeakFlops("A10", 125.0, 125.0, 31.2, 62.5)),
    (("v100",), PeakFlops("V100 SXM2", None, 125.0, 15.7, None)),
    (("t4",), PeakFlops("T4", None, 65.0, 8.1, None)),
)

# The peak-FLOPs column of each compute dtype: every precision's row names its own (plan.catalog);
# TF32 is what fp32 matmuls run as on CUDA when torch allows it, not a precision a case takes.
DTYPE_FIELDS = {p.dtype: p.peak_flops_column for p in PRECISIONS.values()} | {"tf32": "tf32"}


def lookup_peak_tflops(device_name: str | None, dtype: str) -> tuple[float | None, str | None]:
    """(peak TFLOP/s, None) or (None, why there is no peak). Never guesses an unknown device."""
    if not device_name or device_name == "cpu":
        return None, "no peak FLOPs for CPU: MFU is only defined against an accelerator's datasheet peak"
    field = DTYPE_FIELDS.get(dtype)
    if field is None:
        return None, f"no peak FLOPs column for dtype {dtype!r}"
    words = device_name.lower().replace("-", " ").split()
    text = " ".join(words)
    for pattern, peak in PEAK_TFLOPS:
        if all(p in words or (len(p) > 3 and p in text) for p in pattern):
            value = getattr(peak, field)
            if value is None:
                return None, f"{peak.name} has no dense {dtype} tensor peak in the table"
            return value, None
    return None, f"device {device_name!r} is not in the peak-FLOPs table (fsdp_bench/flops.py)"


def achieved_tflops_per_device(flops_per_token_value: float, tokens_per_s_per_device: float) -> float:
    return flops_per_token_value * tokens_per_s_per_device / 1e12


def utilization_pct(achieved_tflops: float, peak_tflops: float | None) -> float | None:
    """MFU (model FLOPs) or HFU (counted hardware FLOPs) in percent of the peak."""
    return None if not peak_tflops else 100.0 * achieved_tflops / peak_tflops
