"""Untimed probe steps after the measured ones: FLOP counting, model-state bytes, memory breakdown.

Each probe runs one real training step (so the model keeps training) outside every timed region;
nothing here runs during the measured steps.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from fsdp_bench.training import local_tensor

# MemTracker's categories folded into the five the results report.
BREAKDOWN_CATEGORIES = {"param": "params", "buffer": "params", "grad": "grads", "opt": "optimizer",
                        "act": "activations", "temp": "other", "oth": "other"}


def count_matmul_params(model: nn.Module) -> int:
    """N of the FLOPs formula: unique parameters minus lookup-only embedding tables.

    An embedding weight that is also some Linear's weight (GPT-2 tying) is an output projection
    and stays in N once.
    """
    unique = {id(p): p for p in model.parameters()}
    linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    lookup = {id(p): p for m in model.modules() if isinstance(m, nn.Embedding)
              for p in m.parameters() if id(p) not in linear_weights}
    return sum(p.numel() for i, p in unique.items() if i not in lookup)


def attention_shape(model: nn.Module) -> dict[str, int]:
    """Layers, heads and head size of the attention (zeros for attention-free models).

    Hugging Face models say it in their config (head count of the queries: the 12*L*H*Q*T
    attention term counts the score and value matmuls, which grouped-query attention does not
    shrink); the project's GPT says it in its modules.
    """
    config = getattr(getattr(model, "lm", None), "config", None)
    if config is not None:
        layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", 0)
        heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", 0)
        hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", 0)
        head_dim = getattr(config, "head_dim", None) or (hidden // heads if heads else 0)
        return {"n_layers": int(layers), "n_heads": int(heads), "head_dim": int(head_dim)}
    blocks = getattr(model, "blocks", None)
    attn = getattr(blocks[0], "attn", None) if blocks is not None and len(blocks) else None
    if attn is None:
        return {"n_layers": 0, "n_heads": 0, "head_dim": 0}
    n_embd = attn.proj.in_features
    return {"n_layers": len(blocks), "n_heads": attn.n_head, "head_dim": n_embd // attn.n_head}


def _cpu_sdpa_flop_mapping() -> dict[Any, Callable[..., int]]:
    """FlopCounterMode knows the CUDA attention kernels but not the CPU flash kernel; count it
    with torch's own SDPA formulas so CPU and GPU counts mean the same thing."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten
    mapping: dict[Any, Callable[..., int]] = {}
    fwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    # FlopCounterMode keys its registry by overload packet and hands formulas shapes, not tensors.
    if fwd is not None:
        def fwd_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
            return sdpa_flop_count(query_shape, key_shape, value_shape)
        mapping[fwd] = fwd_flop
    if bwd is not None:
        def bwd_flop(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
            return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)
        mapping[bwd] = bwd_flop
    return mapping


def count_step_flops(step: Callable[[], Any]) -> int:
    """FLOPs this rank executes in one training step, as torch.utils.flop_counter counts them
    (matmuls, convolutions, attention; includes activation-checkpoint recompute)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_flop_mapping())
    with counter:
        step()
    return int(counter.get_total_flops())


def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one flat buffer count once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        local = local_tensor(t)
        storage = local.untyped_storage()
        seen[storage.data_ptr() or id(storage)] = storage.nbytes()
    return sum(seen.values())


def model_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Params, grads and optimizer state resident on this rank right now, by distinct storage."""
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    out = {"params": _storage_bytes(params), "grads": _storage_bytes(p.grad for p in params),
           "optimizer": _storage_bytes(state)}
    out["total"] = out["params"] + out["grads"] + out["optimizer"]
    return out


def measure_model_state_after_step(step: Callable[[], Any], optimizer: torch.optim.Optimizer,
                                   model: nn.Module) -> dict[str, int]:
    """Run `step` and read the model state after optimizer.step(), before zero_grad frees grads."""
    seen: dict[str, int] = {}
    handle = optimizer.register_step_post_hook(lambda opt, args, kwargs: seen.update(model_state_bytes(model, opt)))
    try:
        step()
    finally:
        handle.remove()
    return seen


def fold_breakdown(by_category: dict[str, int]) -> dict[str, int]:
    """MemTracker's categories folded into params/grads/optimizer/activations/other."""
    out = {"params": 0, "grads": 0, "optimizer": 0, "activations": 0, "other": 0}
    for name, value in by_category.items():
        out[BREAKDOWN_CATEGORIES.get(name, "other")] += int(value)
    return out
