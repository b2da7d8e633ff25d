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

from typing import Sequence

from fsdp_bench.analysis.comm_model import GPUS_PER_NODE, Unit, padded_numel
from fsdp_bench.plan.case import hybrid_mesh_shape
from fsdp_bench.plan.catalog import STRATEGIES

def expected_model_state_bytes(strategy: str, *, n_params: int, world_size: int, param_bytes: int = 4,
                               grad_bytes: int = 4, optimizer_bytes: int = 8) -> dict[str, Any]:
    """Bytes of params, grads and optimizer state one rank holds after the optimizer step."""
    if world_size < 1 or n_params < 0:
        raise ValueError("expected_model_state_bytes: world_size >= 1 and n_params >= 0")
    if strategy not in STRATEGIES:
        return {"layout": "unknown"}
    layout = {0: "replicated", 2: "zero2_like", 3: "full_shard"}[STRATEGIES[strategy].zero_stage]
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


ADAM_STATES = 2  # exp_avg and exp_avg_sq, in the parameters' dtype


def shard_size(strategy: str, world_size: int, mesh: tuple[int, int] | None = None) -> int:
    """Ranks one parameter is sharded over: 1 when replicated, the shard dim for hybrids."""
    row = STRATEGIES[strategy]
    if not row.shards_parameters:
        return 1
    if row.hybrid:
        return (mesh or hybrid_mesh_shape("", world_size=world_size, ranks_per_node=min(world_size, GPUS_PER_NODE)))[1]
    return world_size


def padded_model_state_bytes(strategy: str, units: Sequence[Unit], world_size: int, *,
                             mesh: tuple[int, int] | None = None, dtype_bytes: int = 4) -> dict[str, int]:
    """Parameters, gradients and AdamW state rank 0 holds between steps, with the padding and
    alignment the strategy's parameter layout really allocates."""
    row = STRATEGIES[strategy]
    shard = shard_size(strategy, world_size, mesh)
    numel = sum(padded_numel(row.layout, u, shard, dtype_bytes) // shard for u in units)
    params = numel * dtype_bytes
    return {"params": params, "grads": params, "optimizer": ADAM_STATES * params,
            "total": (2 + ADAM_STATES) * params}
