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

import math
from collections.abc import Sequence

from fsdp_bench.analysis.comm_model import GPUS_PER_NODE, Unit, fsdp1_flat_numel, padded_numel
from fsdp_bench.plan.case import hybrid_mesh_shape
from fsdp_bench.plan.catalog import STRATEGIES
from fsdp_bench.results.readings import ModelStateBytes


def expected_model_state_bytes(
    strategy: str,
    *,
    n_params: int,
    world_size: int,
    param_bytes: int = 4,
    grad_bytes: int = 4,
    optimizer_bytes: int = 8,
    units: Sequence[Unit] | None = None,
    mesh: tuple[int, int] | None = None,
    rank: int = 0,
) -> ModelStateBytes:
    """Bytes of params, grads and optimizer state one rank holds after the optimizer step.

    Given the model's `units`, params/grads/optimizer/total are what the strategy really
    allocates on `rank` (FSDP2's dim-0 padding, FSDP1's flat-parameter alignment and padding,
    a hybrid mesh's shard group: see `allocated_model_state_bytes`), and the ZeRO formula's
    figure stays beside it as `textbook_total`. Without units, the ZeRO formula alone.
    """
    out = _textbook_model_state_bytes(
        strategy,
        n_params=n_params,
        world_size=world_size,
        param_bytes=param_bytes,
        grad_bytes=grad_bytes,
        optimizer_bytes=optimizer_bytes,
    )
    if units is None or out["layout"] == "unknown":
        return out
    out["textbook_total"] = out["total"]
    allocated = allocated_model_state_bytes(strategy, units, world_size, mesh=mesh, rank=rank, dtype_bytes=param_bytes)
    out.update(allocated, method="allocated: the strategy's padding and alignment, from the model's units")
    return out


def _textbook_model_state_bytes(
    strategy: str, *, n_params: int, world_size: int, param_bytes: int, grad_bytes: int, optimizer_bytes: int
) -> ModelStateBytes:
    if world_size < 1 or n_params < 0:
        raise ValueError("expected_model_state_bytes: world_size >= 1 and n_params >= 0")
    if strategy not in STRATEGIES:
        return {"layout": "unknown"}
    layout = {0: "replicated", 2: "zero2_like", 3: "full_shard"}[STRATEGIES[strategy].zero_stage]
    shard = 1 if layout == "replicated" else world_size
    out: ModelStateBytes = {
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
# AdamW also keeps a per-parameter `step` counter, a float32 scalar tensor (torch.optim's
# _get_scalar_dtype), for every parameter it has state for: 4 bytes each, in the optimizer part.
# Negligible for a big model, but at 512 ranks a tiny model's shard is a few KiB and ~40 counters
# are several percent of it.
ADAM_STEP_BYTES = 4


def shard_size(strategy: str, world_size: int, mesh: tuple[int, int] | None = None) -> int:
    """Ranks one parameter is sharded over: 1 when replicated, the shard dim for hybrids."""
    row = STRATEGIES[strategy]
    if not row.shards_parameters:
        return 1
    if row.hybrid:
        return (mesh or hybrid_mesh_shape("", world_size=world_size, ranks_per_node=min(world_size, GPUS_PER_NODE)))[1]
    return world_size


def padded_model_state_bytes(
    strategy: str, units: Sequence[Unit], world_size: int, *, mesh: tuple[int, int] | None = None, dtype_bytes: int = 4
) -> dict[str, int]:
    """Parameters, gradients and AdamW state rank 0 holds between steps, with the padding and
    alignment the strategy's parameter layout really allocates (and a step counter for every
    parameter: rank 0's dim-0 shard of each one is never empty)."""
    row = STRATEGIES[strategy]
    shard = shard_size(strategy, world_size, mesh)
    numel = sum(padded_numel(row.layout, u, shard, dtype_bytes) // shard for u in units)
    params = numel * dtype_bytes
    optimizer = ADAM_STATES * params + ADAM_STEP_BYTES * sum(len(u.shapes) for u in units)
    return {"params": params, "grads": params, "optimizer": optimizer, "total": 2 * params + optimizer}


def fsdp1_piece_numels(unit: Unit, shard: int, rank: int, dtype_bytes: int = 4) -> list[int]:
    """Elements of each original parameter (alignment and padding left out) inside `rank`'s
    chunk of FSDP1's flat parameter, in registration order (0: none of it is there)."""
    chunk = fsdp1_flat_numel(unit, shard, dtype_bytes) // shard
    lo, hi = rank * chunk, (rank + 1) * chunk
    align, offset, pieces = 16 // dtype_bytes, 0, []
    for s in unit.shapes:
        offset += (-offset) % align
        n = math.prod(s)
        pieces.append(max(0, min(hi, offset + n) - max(lo, offset)))
        offset += n
    return pieces


def fsdp1_real_numel_in_shard(unit: Unit, shard: int, rank: int, dtype_bytes: int = 4) -> int:
    """Original-parameter elements inside `rank`'s chunk of FSDP1's flat parameter: what the
    optimizer's per-parameter state is sized by."""
    return sum(fsdp1_piece_numels(unit, shard, rank, dtype_bytes))


def fsdp2_local_numel(unit: Unit, shard: int, rank: int) -> int:
    """Elements of `rank`'s dim-0 pieces of the unit's parameters, padding left out: FSDP2 cuts
    like torch.chunk (ceil(dim0 / shard) rows each, so the last ranks get fewer rows or none)."""
    total = 0
    for s in unit.shapes:
        dim0 = s[0] if s else 1
        rows = math.ceil(dim0 / shard)
        total += max(0, min(rows, dim0 - rank * rows)) * math.prod(s[1:])
    return total


def allocated_model_state_bytes(
    strategy: str,
    units: Sequence[Unit],
    world_size: int,
    *,
    mesh: tuple[int, int] | None = None,
    rank: int = 0,
    dtype_bytes: int = 4,
) -> dict[str, int]:
    """Params, grads and AdamW state `rank` holds after the step, as allocated. Params and grads
    are storage: FSDP2's padded dim-0 shard, FSDP1's chunk of the flat parameter (DDP: whole).
    AdamW's state follows the rank's real elements, padding and alignment left out (on rank 0 of
    FSDP2 that is the full padded chunk); FSDP1 gives a parameter with no piece in the chunk no
    gradient, so no state and no step counter."""
    row = STRATEGIES[strategy]
    shard = shard_size(strategy, world_size, mesh)
    local_rank = rank % shard
    if row.layout != "fsdp1_flat":
        out = padded_model_state_bytes(strategy, units, world_size, mesh=mesh, dtype_bytes=dtype_bytes)
        if row.layout == "fsdp2_dim0" and shard > 1:
            real = sum(fsdp2_local_numel(u, shard, local_rank) for u in units) * dtype_bytes
            out["optimizer"] = ADAM_STATES * real + ADAM_STEP_BYTES * sum(len(u.shapes) for u in units)
            out["total"] = out["params"] + out["grads"] + out["optimizer"]
        return out
    params = sum(fsdp1_flat_numel(u, shard, dtype_bytes) // shard for u in units) * dtype_bytes
    pieces = [n for u in units for n in fsdp1_piece_numels(u, shard, local_rank, dtype_bytes)]
    optimizer = ADAM_STATES * sum(pieces) * dtype_bytes + ADAM_STEP_BYTES * sum(1 for n in pieces if n)
    return {"params": params, "grads": params, "optimizer": optimizer, "total": 2 * params + optimizer}
