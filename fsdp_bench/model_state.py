"""Expected model-state bytes per rank from the ZeRO formulas (pure, no torch).

ZeRO (Rajbhandari et al. 2020) counts, per parameter, K bytes of model state: with mixed-precision
Adam 2 (bf16 params) + 2 (bf16 grads) + 12 (fp32 master, momentum, variance) = 16. Per rank:
replicated (DDP) 16P, ZeRO-2 2P + 14P/N, ZeRO-3 (full shard) 16P/N.

This suite trains in fp32 with AdamW, so the same 16 bytes split as params 4 + grads 4 +
optimizer 8 (exp_avg, exp_avg_sq) and there is no separate master copy.

What is compared with the measurement is the state RESIDENT AFTER THE OPTIMIZER STEP (before
zero_grad), the one point where params, grads and optimizer state all exist at full size:
- replicated (ddp, fsdp1_no_shard): 4P + 4P + 8P = 16P
- full shard (fsdp1_full_shard, fsdp2): 16P/N
- ZeRO-2-like (fsdp1_shard_grad_op, fsdp2_no_reshard): torch's FSDP keeps the unsharded
  parameters only from forward to backward and reshards them after backward, so after the step it
  holds 16P/N too. The textbook ZeRO-2 figure (fp32: 4P + 12P/N) is recorded beside it as
  `zero2_textbook_total`; the extra 4P - 4P/N is transient, inside forward/backward.
"""

from __future__ import annotations

from typing import Any

LAYOUTS = {
    "ddp": "replicated",
    "fsdp1_no_shard": "replicated",
    "fsdp1_shard_grad_op": "zero2_like",
    "fsdp2_no_reshard": "zero2_like",
    "fsdp1_full_shard": "full_shard",
    "fsdp2": "full_shard",
}


def expected_model_state_bytes(strategy: str, *, n_params: int, world_size: int, param_bytes: int = 4,
                               grad_bytes: int = 4, optimizer_bytes: int = 8) -> dict[str, Any]:
    """Bytes of params, grads and optimizer state one rank holds after the optimizer step."""
    if world_size < 1 or n_params < 0:
        raise ValueError("expected_model_state_bytes: world_size >= 1 and n_params >= 0")
    layout = LAYOUTS.get(strategy, "unknown")
    if layout == "unknown":
        return {"layout": layout}
    shard = 1 if layout == "replicated" else world_size
    out: dict[str, Any] = {
        "layout": layout,
        "params": n_params * param_bytes / shard,
        "grads": n_params * grad_bytes / shard,
        "optimizer": n_params * optimizer_bytes / shard,
    }
    out["total"] = out["params"] + out["grads"] + out["optimizer"]
    if layout == "zero2_like":
        out["zero2_textbook_total"] = n_params * param_bytes + n_params * (grad_bytes + optimizer_bytes) / world_size
    return out
