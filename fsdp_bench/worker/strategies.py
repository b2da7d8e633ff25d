"""Data-parallel strategies as verbs: `apply_*` wraps or shards a model in place of the original.

One verb per catalog family (`fsdp_bench.plan.catalog`); each reads the traits it needs from the
strategy's row (sharding, reshard after forward, offload, hybrid mesh), so a new strategy of an
existing family is a catalog row and nothing here. Blocks first, then the root, as torchtitan
does: each block becomes one communication unit so its parameters are gathered just before they
are needed and freed right after.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fsdp_bench.plan.case import Case, hybrid_mesh_shape
from fsdp_bench.plan.catalog import Strategy, precision
from fsdp_bench.plan.catalog import strategy as catalog_strategy


class StrategyUnavailable(RuntimeError):
    """The strategy cannot run here (backend, device or torch version); the case is skipped."""


@dataclass(frozen=True, kw_only=True)
class Knobs:
    """The case's knobs a strategy verb reads, typed, with the case's own defaults."""

    precision: str = Case.__dataclass_fields__["precision"].default
    wrap_policy: str = Case.__dataclass_fields__["wrap_policy"].default
    min_num_params: int = Case.__dataclass_fields__["min_num_params"].default
    forward_prefetch: int = Case.__dataclass_fields__["forward_prefetch"].default
    backward_prefetch: str = Case.__dataclass_fields__["backward_prefetch"].default
    act_ckpt: bool = Case.__dataclass_fields__["act_ckpt"].default
    mesh: str = Case.__dataclass_fields__["mesh"].default

    @classmethod
    def of(cls, case: Case | None) -> Knobs:
        if case is None:
            return cls()
        return cls(**{name: getattr(case, name) for name in cls.__dataclass_fields__})


@dataclass(frozen=True, kw_only=True)
class ShardContext:
    """What every strategy needs besides the model."""

    device: torch.device
    blocks: list[nn.Module]
    row: Strategy  # the strategy's catalog row
    knobs: Knobs = Knobs()
    seed: int = 0


def compute_dtype(name: str) -> torch.dtype:
    return getattr(torch, precision(name).dtype)


def build_hybrid_mesh(ctx: ShardContext):
    """The 2D (replicate, shard) device mesh of a hybrid strategy.

    The default replicate dimension is the node boundary: torchrun's LOCAL_WORLD_SIZE ranks
    share a node, so WORLD_SIZE / LOCAL_WORLD_SIZE replicas, each sharded within its node.
    """
    import os

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    shape = hybrid_mesh_shape(ctx.knobs.mesh, world_size=world, ranks_per_node=per_node)
    return init_device_mesh(ctx.device.type, shape, mesh_dim_names=("replicate", "shard"))


def fsdp1_mixed_precision(dtype: torch.dtype):
    """FSDP1's MixedPrecision for a low compute dtype (None for fp32). Buffers stay fp32
    (buffer_dtype None): bf16 would round RoPE's inv_freq and shift every position's angle."""
    from torch.distributed.fsdp import MixedPrecision

    if dtype == torch.float32:
        return None
    return MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=None)


def apply_ddp(model: nn.Module, *, ctx: ShardContext) -> nn.Module:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fsdp_bench.worker.models.build import has_meta_params, materialize_module

    if has_meta_params(model):  # a replica per rank: DDP needs the whole model anyway
        materialize_module(model, ctx.device, ctx.seed)
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


def apply_fsdp1(model: nn.Module, *, ctx: ShardContext) -> nn.Module:
    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy

    from fsdp_bench.worker.models.build import has_meta_params, param_init_fn

    policy = ctx.knobs.wrap_policy
    if policy == "module":
        auto_wrap = ModuleWrapPolicy({type(b) for b in ctx.blocks})
    elif policy == "size_based":
        auto_wrap = functools.partial(size_based_auto_wrap_policy, min_num_params=ctx.knobs.min_num_params)
    else:
        auto_wrap = None  # one flat parameter for the whole model
    dtype = compute_dtype(ctx.knobs.precision)
    mixed = fsdp1_mixed_precision(dtype)
    prefetch = {"pre": BackwardPrefetch.BACKWARD_PRE, "post": BackwardPrefetch.BACKWARD_POST, "none": None}
    hybrid = {"device_mesh": build_hybrid_mesh(ctx)} if ctx.row.hybrid else {}
    # use_orig_params=True keeps the module's Parameter objects (as views into the flat
    # parameter), which torch.compile and per-parameter optimizer groups need.
    return FSDP(
        model,
        sharding_strategy=ShardingStrategy[ctx.row.fsdp1_sharding_strategy],
        auto_wrap_policy=auto_wrap,
        device_id=ctx.device,
        use_orig_params=True,
        mixed_precision=mixed,
        cpu_offload=CPUOffload(offload_params=True) if ctx.row.offload else None,
        forward_prefetch=ctx.knobs.forward_prefetch > 0,
        backward_prefetch=prefetch[ctx.knobs.backward_prefetch],
        # Meta-built models: each wrapped unit is materialized as FSDP reaches it, then sharded.
        param_init_fn=param_init_fn(model, ctx.device, ctx.seed) if has_meta_params(model) else None,
        **hybrid,
    )


def apply_fsdp2(model: nn.Module, *, ctx: ShardContext) -> nn.Module:
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    from fsdp_bench.worker.models.build import has_meta_params, materialize_fsdp2

    dtype = compute_dtype(ctx.knobs.precision)
    kwargs: dict[str, Any] = {"reshard_after_forward": ctx.row.reshard_after_forward}
    if dtype != torch.float32:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype)
    if ctx.row.offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    if ctx.row.hybrid:  # a 2D mesh makes fully_shard replicate over dim 0 and shard over dim 1 (HSDP)
        kwargs["mesh"] = build_hybrid_mesh(ctx)
    for block in ctx.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    depth = ctx.knobs.forward_prefetch
    if depth > 0:  # explicit prefetch: gather the next `depth` blocks' params ahead of need
        for i, block in enumerate(ctx.blocks):
            if ctx.blocks[i + 1 : i + 1 + depth]:
                block.set_modules_to_forward_prefetch(ctx.blocks[i + 1 : i + 1 + depth])
            if ctx.blocks[max(0, i - depth) : i]:
                block.set_modules_to_backward_prefetch(list(reversed(ctx.blocks[max(0, i - depth) : i])))
    if has_meta_params(model):
        # CPUOffloadPolicy keeps the sharded params on the host: allocating them on the GPU breaks it.
        materialize_fsdp2(model, ctx.device, ctx.seed, param_device=torch.device("cpu") if ctx.row.offload else None)
    return model


def apply_accelerate_fsdp2(model: nn.Module, optimizer: torch.optim.Optimizer | None, *, ctx: ShardContext):
    """Shard through `Accelerator.prepare` with FSDP2, as accelerate users do: model and optimizer
    are built first, and accelerate re-points the optimizer at the sharded parameters."""
    try:
        from accelerate.utils import FullyShardedDataParallelPlugin
    except ImportError as exc:
        raise StrategyUnavailable(f"accelerate_fsdp2: accelerate is not installed ({exc})") from exc
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.tensor import DTensor

    dtype = compute_dtype(ctx.knobs.precision)
    # accelerate's own policy also sets output_dtype to the low dtype: the root then casts the loss
    # the model computed in fp32 to bf16/fp16 before anyone reads it ([6.21875, 5.9375] against
    # fp32's [6.2254, 5.9517]). apply_fsdp2's policy instead: no output cast at all (an fp32
    # output_dtype would also apply to every block, and the final norm would then mix dtypes).
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype) if dtype != torch.float32 else None
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        reshard_after_forward=ctx.row.reshard_after_forward,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=sorted({type(b).__name__ for b in ctx.blocks}),
        activation_checkpointing=bool(ctx.knobs.act_ckpt),
        mixed_precision_policy=policy,
    )
    mixed = precision(ctx.knobs.precision).accelerate
    accelerator = make_accelerator(plugin, mixed, ctx.device)
    prepared = accelerator.prepare(model, optimizer) if optimizer is not None else (accelerator.prepare(model),)
    if not any(isinstance(p, DTensor) for p in prepared[0].parameters()):
        raise StrategyUnavailable(
            f"accelerate_fsdp2 on {ctx.device.type}: accelerate ran as {accelerator.distributed_type} and "
            f"returned {type(prepared[0]).__name__}, not an FSDP2 module (it cannot shard here)"
        )
    return prepared[0], (prepared[1] if optimizer is not None else None)


def make_accelerator(plugin, mixed_precision: str, device: torch.device):
    """accelerate's Accelerator, as a user builds it (tests swap it to reach FSDP2 on a CPU)."""
    from accelerate import Accelerator

    return Accelerator(fsdp_plugin=plugin, mixed_precision=mixed_precision, cpu=device.type == "cpu")


def prepare_blocks(model: nn.Module, case: Case) -> tuple[nn.Module, list[nn.Module]]:
    """Compile and/or activation-checkpoint every block before sharding; the blocks to shard.

    FSDP1 gets its checkpoint wrappers after wrapping (`checkpoint_after_wrapping`), as its docs advise;
    blocks are compiled in place (`Module.compile`) so the module tree and names stay the same.
    """
    from fsdp_bench.worker.models.build import block_modules

    blocks = block_modules(model)
    if case.compile:
        for block in blocks:
            block.compile()
    if case.act_ckpt and catalog_strategy(case.strategy).checkpoints_before_sharding:
        blocks = _checkpoint_blocks(model, blocks)
    return model, blocks


def _checkpoint_blocks(model: nn.Module, blocks: list[nn.Module]) -> list[nn.Module]:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        CheckpointWrapper,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    targets = {id(b) for b in blocks}
    apply_activation_checkpointing(
        model,
        checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
        check_fn=lambda m: id(m) in targets,
    )
    return [m for m in model.modules() if isinstance(m, CheckpointWrapper)]


def shard_context(case: Case, blocks: list[nn.Module], device: torch.device) -> ShardContext:
    """What the case's strategy verb needs besides the model (setup.build_rank, step 6)."""
    return ShardContext(
        device=device, blocks=blocks, row=catalog_strategy(case.strategy), knobs=Knobs.of(case), seed=case.seed
    )


def apply_strategy(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, *, ctx: ShardContext
) -> tuple[nn.Module, torch.optim.Optimizer | None]:
    """The verb of the row's family, applied: the model to train and the optimizer (accelerate
    returns its own wrapper; the other families leave it as it was). A platform's refusal becomes
    StrategyUnavailable."""
    try:
        return APPLY_BY_FAMILY[ctx.row.family](model, optimizer, ctx=ctx)
    except RuntimeError as exc:
        # torch refuses some strategy/device pairs with a RuntimeError at wrap time; that is
        # a property of the platform, not a bug in the case, so it becomes a skip.
        if _is_platform_refusal(exc):
            raise StrategyUnavailable(f"{ctx.row.name} on {ctx.device.type}: {exc}") from exc
        raise


def checkpoint_after_wrapping(model: nn.Module, blocks: list[nn.Module], case: Case) -> None:
    """Activation-checkpoint wrappers on the wrapped units, for the strategies whose docs want them
    after wrapping (FSDP1: the catalog's `checkpoints_before_sharding` is False); a no-op otherwise."""
    if case.act_ckpt and not catalog_strategy(case.strategy).checkpoints_before_sharding:
        _checkpoint_blocks(model, [m for m in model.modules() if type(m) in {type(b) for b in blocks}])


def _model_only(apply: Callable[..., nn.Module]) -> Callable[..., tuple[nn.Module, torch.optim.Optimizer | None]]:
    """A verb that shards the model alone, in apply_strategy's shape (the optimizer passes through)."""
    return lambda model, optimizer, *, ctx: (apply(model, ctx=ctx), optimizer)


# One verb per catalog family (`fsdp_bench.plan.catalog.FAMILIES`); a test checks they match.
APPLY_BY_FAMILY: dict[str, Callable[..., tuple[nn.Module, torch.optim.Optimizer | None]]] = {
    "ddp": _model_only(apply_ddp),
    "fsdp1": _model_only(apply_fsdp1),
    "fsdp2": _model_only(apply_fsdp2),
    # looked up when called, so a test can swap the accelerate verb for one that runs on a CPU
    "accelerate": lambda model, optimizer, *, ctx: apply_accelerate_fsdp2(model, optimizer, ctx=ctx),
}


_REFUSALS = ("needs a non-CPU accelerator", "Cannot access accelerator device", "not supported on CPU")


def _is_platform_refusal(exc: BaseException) -> bool:
    return any(text in str(exc) for text in _REFUSALS)


def repoint_optimizer(optimizer: torch.optim.Optimizer, before: dict[str, nn.Parameter], model: nn.Module) -> int:
    """Swap the optimizer's pre-sharding parameters for the model's current ones, by name.

    This is the fix accelerate applies when the optimizer was built before `fully_shard`
    replaced the parameters. Returns how many references were re-pointed.
    """
    from fsdp_bench.worker.models.build import clean_name

    after = {clean_name(n): p for n, p in model.named_parameters()}
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
