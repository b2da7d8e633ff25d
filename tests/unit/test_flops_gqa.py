"""Attention FLOPs for grouped-query and multi-head shapes, by hand and through FlopCounterMode.

torch 2.11's FlopCounterMode asserted equal query/key/value head counts, so every grouped-query
model failed its FLOP probe there; the project's own formula (the one torch >= 2.13 uses) counts
every fused attention kernel on every supported torch.
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from fsdp_bench.analysis.flops import sdpa_backward_flops, sdpa_forward_flops
from fsdp_bench.worker.probes import _sdpa_flop_mapping

# A path that moves with torch/accelerate versions: .ci/run also runs it under the GPU machine's set.
pytestmark = pytest.mark.versions

# (batch, query heads, key/value heads, query length, key length, q/k head size, value head size)
SHAPES = {"gqa": (2, 8, 2, 16, 16, 4, 4), "mha": (2, 4, 4, 16, 16, 8, 8), "mqa_cross": (3, 6, 1, 5, 7, 4, 2)}


def _hand_counts(b, h_q, h_kv, s_q, s_k, d, d_v):
    """Written out matmul by matmul: every one runs at the query's head count (KV heads broadcast)."""
    mm = lambda n, m, p: 2 * b * h_q * n * m * p  # noqa: E731 - one line per matmul below
    forward = mm(s_q, d, s_k) + mm(s_q, s_k, d_v)
    backward = mm(s_q, d, s_k) + mm(s_q, d_v, s_k) + mm(s_k, s_q, d_v) + mm(s_q, s_k, d) + mm(d, s_q, s_k)
    return forward, backward


@pytest.mark.parametrize("name", SHAPES)
def test_formula_matches_hand_count(name):
    b, h_q, h_kv, s_q, s_k, d, d_v = SHAPES[name]
    q, k, v, g = (b, h_q, s_q, d), (b, h_kv, s_k, d), (b, h_kv, s_k, d_v), (b, h_q, s_q, d_v)
    forward, backward = _hand_counts(b, h_q, h_kv, s_q, s_k, d, d_v)
    assert sdpa_forward_flops(q, k, v) == forward
    assert sdpa_backward_flops(g, q, k, v) == backward
    if name == "gqa":  # 4 * b * H * T^2 * Q forward and 10 * ... backward: the 12*L*H*Q*T term's shape
        assert forward == 4 * b * h_q * s_q * s_k * d and backward == 10 * b * h_q * s_q * s_k * d


def test_heads_that_do_not_group_are_refused():
    with pytest.raises(ValueError, match="not a multiple"):
        sdpa_forward_flops((1, 6, 4, 8), (1, 4, 4, 8), (1, 4, 4, 8))


@pytest.mark.parametrize("name", ["gqa", "mha"])
def test_counter_on_cpu_sdpa_forward_and_backward(name):
    """A real grouped-query SDPA (as transformers calls it) under FlopCounterMode on this torch."""
    b, h_q, h_kv, s, _, d, _ = SHAPES[name]
    q = torch.randn(b, h_q, s, d, requires_grad=True)
    k = torch.randn(b, h_kv, s, d, requires_grad=True)
    v = torch.randn(b, h_kv, s, d, requires_grad=True)
    with FlopCounterMode(display=False, custom_mapping=_sdpa_flop_mapping()) as counter:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=h_q != h_kv)
        out.sum().backward()
    forward, backward = _hand_counts(b, h_q, h_kv, s, s, d, d)
    assert counter.get_total_flops() == forward + backward


@pytest.mark.parametrize(
    "kernel",
    [
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    ],
)
def test_counter_on_cuda_kernels_with_grouped_heads(kernel):
    """The CUDA kernels' own ops, called on meta tensors (their shape functions run without a GPU)."""
    b, h_q, h_kv, s, _, d, _ = SHAPES["gqa"]
    q = torch.empty(b, h_q, s, d, device="meta")
    k = v = torch.empty(b, h_kv, s, d, device="meta")
    op = getattr(torch.ops.aten, kernel)
    extra = {
        "_scaled_dot_product_efficient_attention": (None, True),
        "_scaled_dot_product_cudnn_attention": (None, True, 0.0, False),
    }.get(kernel, ())
    with FlopCounterMode(display=False, custom_mapping=_sdpa_flop_mapping()) as counter:
        op(q, k, v, *extra)
    assert counter.get_total_flops() == _hand_counts(b, h_q, h_kv, s, s, d, d)[0]
