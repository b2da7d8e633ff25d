"""Data-parallel strategies as verbs: `apply_*` wraps or shards a model in place of the original.

Blocks first, then the root, as torchtitan does: each block becomes one communication unit so
its parameters are gathered just before they are needed and freed right after.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


class StrategyUnavailable(RuntimeError):
    """The strategy cannot run here (backend, device or torch version); the case is skipped."""


@dataclass(frozen=True)
class ShardContext:
    """What every strategy needs besides the model."""

    device: torch.device
    blocks: list[nn.Module]
    mesh: str = ""  # hybrid strategies: "REPLICATExSHARD"; "" = the node boundary


def build_hybrid_mesh(ctx: ShardContext):
    """The 2D (replicate, shard) device mesh of a hybrid strategy.

    The default replicate dimension is the node boundary: torchrun's LOCAL_WORLD_SIZE ranks
    share a node, so WORLD_SIZE / LOCAL_WORLD_SIZE replicas, each sharded within its node.
    """
    import os

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from fsdp_bench.case import hybrid_mesh_shape

    world = dist.get_world_size()
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    shape = hybrid_mesh_shape(ctx.mesh, world_size=world, ranks_per_node=per_node)
    return init_device_mesh(ctx.device.type, shape, mesh_dim_names=("replicate", "shard"))


def apply_ddp(model: nn.Module, *, ctx: ShardContext) -> nn.Module:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    ddp = DDP(model, device_ids=device_ids)
    if dist.get_backend() == "fake":
        # Simulation: the fake group's all-reduce future resolves to None, which DDP's reducer
        # rejects. A real all-reduce works in place on the bucket, so hand the bucket back.
        ddp.register_comm_hook(None, _bucket_unchanged)
    return ddp


def _bucket_unchanged(state, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def apply_fsdp1(model: nn.Module, *, sharding_strategy: str, ctx: ShardContext) -> nn.Module:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    block_types = {type(b) for b in ctx.blocks}
    hybrid = {"device_mesh": build_hybrid_mesh(ctx)} if sharding_strategy == "HYBRID_SHARD" else {}
    # use_orig_params=True keeps the module's Parameter objects (as views into the flat
    # parameter), which torch.compile and per-parameter optimizer groups need.
    return FSDP(
        model,
        sharding_strategy=ShardingStrategy[sharding_strategy],
        auto_wrap_policy=ModuleWrapPolicy(block_types),
        device_id=ctx.device,
        use_orig_params=True,
        **hybrid,
    )


def apply_fsdp2(model: nn.Module, *, reshard_after_forward: bool, ctx: ShardContext,
                hybrid: bool = False) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    # A 2D mesh makes fully_shard replicate over dim 0 and shard over dim 1 (HSDP).
    kwargs = {"mesh": build_hybrid_mesh(ctx)} if hybrid else {}
    for block in ctx.blocks:
        fully_shard(block, reshard_after_forward=reshard_after_forward, **kwargs)
    fully_shard(model, reshard_after_forward=reshard_after_forward, **kwargs)
    return model


StrategyFn = Callable[..., nn.Module]

STRATEGY_REGISTRY: dict[str, StrategyFn] = {
    "ddp": apply_ddp,
    "fsdp1_full_shard": functools.partial(apply_fsdp1, sharding_strategy="FULL_SHARD"),
    "fsdp1_shard_grad_op": functools.partial(apply_fsdp1, sharding_strategy="SHARD_GRAD_OP"),
    "fsdp1_no_shard": functools.partial(apply_fsdp1, sharding_strategy="NO_SHARD"),
    "fsdp2": functools.partial(apply_fsdp2, reshard_after_forward=True),
    "fsdp2_no_reshard": functools.partial(apply_fsdp2, reshard_after_forward=False),
    "fsdp1_hybrid_shard": functools.partial(apply_fsdp1, sharding_strategy="HYBRID_SHARD"),
    "fsdp2_hsdp": functools.partial(apply_fsdp2, reshard_after_forward=True, hybrid=True),
}


def apply_strategy(name: str, model: nn.Module, *, ctx: ShardContext) -> nn.Module:
    try:
        return STRATEGY_REGISTRY[name](model, ctx=ctx)
    except RuntimeError as exc:
        # torch refuses some strategy/device pairs with a RuntimeError at wrap time; that is
        # a property of the platform, not a bug in the case, so it becomes a skip.
        if _is_platform_refusal(exc):
            raise StrategyUnavailable(f"{name} on {ctx.device.type}: {exc}") from exc
        raise


_REFUSALS = ("needs a non-CPU accelerator", "Cannot access accelerator device", "not supported on CPU")


def _is_platform_refusal(exc: BaseException) -> bool:
    return any(text in str(exc) for text in _REFUSALS)


_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def clean_param_name(name: str) -> str:
    """A parameter's name as the user's model spells it, without wrapper prefixes."""
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name.removeprefix("module.")


def repoint_optimizer(optimizer: torch.optim.Optimizer, before: dict[str, nn.Parameter], model: nn.Module) -> int:
    """Swap the optimizer's pre-sharding parameters for the model's current ones, by name.

    This is the fix accelerate applies when the optimizer was built before `fully_shard`
    replaced the parameters. Returns how many references were re-pointed.
    """
    after = {clean_param_name(n): p for n, p in model.named_parameters()}
    by_id = {id(p): after[n] for n, p in before.items() if n in after}
    swapped = 0
    for group in optimizer.param_groups:
        new_params = []
        for p in group["params"]:
            new = by_id.get(id(p), p)
            swapped += new is not p
            new_params.append(new)
        group["params"] = new_params
    if optimizer.state:
        raise RuntimeError("re-pointing an optimizer that already has state would lose it")
    return swapped
