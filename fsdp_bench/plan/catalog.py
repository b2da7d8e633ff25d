"""The strategy catalog: one row per data-parallel strategy, and every question about one.

Everything the project knows about a strategy is a field of its row here: which code path applies
it (`family`), how it lays out parameters, gradients and optimizer state (`sharding`, `layout`),
whether it regathers after forward, offloads, shards over a 2D mesh, fixes the optimizer timing,
and what it needs to run. Planning, analysis, the worker and the report ask the catalog; nobody
reads a strategy's name for its traits. Adding a strategy is one row here (plus an `apply_*`
verb in `fsdp_bench.worker.strategies` when its family is new). Pure Python: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdp_bench.results.schema import sharding_word  # noqa: F401 - the catalog's words, kept on disk

# Families: the code path that applies a strategy (one `apply_*` verb each in the worker).
FAMILIES = ("ddp", "fsdp1", "fsdp2", "accelerate")
# How one rank holds parameters, gradients and optimizer state (ZeRO's vocabulary):
# replicated (every rank has everything), shard_grad_op (ZeRO-2: params whole during
# forward/backward, grads and optimizer state sharded), full_shard (ZeRO-3: everything sharded).
SHARDINGS = ("replicated", "shard_grad_op", "full_shard")
# How a sharded parameter is cut: FSDP1 concatenates a unit's parameters into one flat parameter
# (each original 16-byte aligned) padded to the group size; FSDP2 shards every parameter on dim 0,
# padded to the group size; replicated strategies do not cut.
LAYOUTS = ("whole", "fsdp1_flat", "fsdp2_dim0")


@dataclass(frozen=True)
class Strategy:
    """One strategy: what a user reads, and every trait code asks about."""

    name: str
    description: str
    family: str
    sharding: str
    reshard_after_forward: bool = False  # FSDP: free the gathered params after forward, regather in backward
    offload: bool = False  # params, grads and the optimizer step on the host
    hybrid: bool = False  # 2D (replicate x shard) mesh: shard inside a node, replicate across
    fixed_timing: str | None = None  # the only optimizer timing this strategy's program has
    in_default_sweep: bool = True
    cpu_skip_reason: str | None = None  # why it cannot run on a CPU-only machine (None: it can)

    @property
    def layout(self) -> str:
        if self.sharding == "replicated" and self.family != "fsdp1":
            return "whole"
        return "fsdp1_flat" if self.family == "fsdp1" else "fsdp2_dim0"

    @property
    def fsdp1_sharding_strategy(self) -> str | None:
        """torch's ShardingStrategy name for FSDP1 rows."""
        if self.family != "fsdp1":
            return None
        if self.hybrid:
            return "HYBRID_SHARD"
        return {"replicated": "NO_SHARD", "shard_grad_op": "SHARD_GRAD_OP", "full_shard": "FULL_SHARD"}[self.sharding]

    @property
    def zero_stage(self) -> int:
        """0 (replicated), 2 (ZeRO-2-like) or 3 (ZeRO-3-like)."""
        return {"replicated": 0, "shard_grad_op": 2, "full_shard": 3}[self.sharding]

    @property
    def shards_parameters(self) -> bool:
        return self.sharding != "replicated"

    @property
    def autocasts(self) -> bool:
        """bf16/fp16 comes from autocast over fp32 parameters (DDP); FSDP paths cast the
        parameters themselves (mixed-precision policy), so what the forward keeps differs."""
        return self.family == "ddp"

    @property
    def rebuilds_buckets(self) -> bool:
        """Gradients are all-reduced in buckets that DDP's reducer rebuilds after the first step,
        in the order the gradients became ready (the estimator records that order first)."""
        return self.family == "ddp"

    @property
    def uses_fsdp_knobs(self) -> bool:
        """Prefetch settings apply (FSDP1 and FSDP2 paths the suite configures itself)."""
        return self.family in ("fsdp1", "fsdp2")

    @property
    def uses_wrap_policy(self) -> bool:
        """Units come from an auto-wrap policy (FSDP1); the others shard each block explicitly."""
        return self.family == "fsdp1"

    @property
    def chooses_backward_prefetch(self) -> bool:
        """BACKWARD_PRE/POST/none is a choice (FSDP1); FSDP2 always prefetches the next block."""
        return self.family == "fsdp1"

    @property
    def checkpoints_before_sharding(self) -> bool:
        """Activation checkpointing wraps the blocks before the strategy is applied (DDP, FSDP2);
        FSDP1 gets its wrappers after wrapping, accelerate through its plugin."""
        return self.family in ("ddp", "fsdp2")

    @property
    def prepares_optimizer(self) -> bool:
        """The strategy takes model and optimizer together and re-points the optimizer itself
        (accelerate's prepare), so the model must hold real parameters before the optimizer."""
        return self.family == "accelerate"

    @property
    def owns_grad_scaler(self) -> bool:
        """fp16's loss scaler comes with the strategy (accelerate's AcceleratedOptimizer steps it)."""
        return self.family == "accelerate"

    @property
    def degrades_to_no_shard_at_one_rank(self) -> bool:
        """FSDP1 runs every sharded strategy as NO_SHARD when the world size is 1."""
        return self.family == "fsdp1" and self.sharding != "replicated"

    @property
    def memtracker_refuses(self) -> bool:
        """torch's MemTracker cannot follow FSDP1's flat-parameter views (its post-accumulate-grad
        hooks need leaf tensors): the CPU peak comes from the profiler instead, and the fake-tensor
        estimator cannot run it."""
        return self.layout == "fsdp1_flat"

    @property
    def is_baseline(self) -> bool:
        """The reference others are compared with (loss parity, speed-ups): plain DDP."""
        return self.family == "ddp" and not self.hybrid

    def precision_mode(self) -> str:
        """How low precision reaches a sharded model in this family (autocast is DDP's)."""
        return "FSDP1 MixedPrecision" if self.family == "fsdp1" else "FSDP2 MixedPrecisionPolicy"


@dataclass(frozen=True)
class OptimizerTiming:
    """When the optimizer is built, relative to sharding, and what that means."""

    name: str
    short: str  # in case ids: opt_<short>
    label: str  # in charts and tables
    line_style: str  # matplotlib's, one per timing
    builds_before_shard: bool
    repoints: bool  # the parameter re-pointing fix is applied after sharding
    not_trained_reason: str | None = None  # why a case with this timing does not train (None: it does)


OPTIMIZER_TIMING_ROWS: dict[str, OptimizerTiming] = {
    t.name: t
    for t in (
        OptimizerTiming("after_shard", "after", "optimizer after sharding", "-", False, False),
        OptimizerTiming(
            "before_shard",
            "before",
            "optimizer before sharding (no fix)",
            "--",
            True,
            False,
            "optimizer built before sharding: parameters never changed",
        ),
        OptimizerTiming("before_shard_fixed", "before_fixed", "optimizer before sharding + fix", ":", True, True),
    )
}
INTENDED_TIMING = "after_shard"  # the way the PyTorch docs build it: the correct program, shown first


def intended_timing() -> OptimizerTiming:
    """The timing the report takes as the correct program (its main slice, no optimizer note)."""
    return OPTIMIZER_TIMING_ROWS[INTENDED_TIMING]


def timings_before_shard() -> tuple[OptimizerTiming, ...]:
    """The timings that build the optimizer before sharding, whose effect the report checks."""
    return tuple(t for t in OPTIMIZER_TIMING_ROWS.values() if t.builds_before_shard)


def is_baseline(name: object) -> bool:
    """Whether `name` is the baseline strategy others are compared with (False for unknown names,
    as old or foreign rows may hold)."""
    return name in STRATEGIES and STRATEGIES[name].is_baseline


def optimizer_timing(name: str) -> OptimizerTiming:
    return OPTIMIZER_TIMING_ROWS[name]


_NEEDS_CUDA = "needs CUDA: "
STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "ddp",
            "DistributedDataParallel: full replica per rank, gradients all-reduced",
            "ddp",
            "replicated",
            fixed_timing="after_shard",
        ),
        Strategy(
            "fsdp1_full_shard",
            "FSDP1 FULL_SHARD (ZeRO-3): params, grads and optimizer state sharded",
            "fsdp1",
            "full_shard",
            reshard_after_forward=True,
        ),
        Strategy(
            "fsdp1_shard_grad_op",
            "FSDP1 SHARD_GRAD_OP (ZeRO-2): params kept after forward, grads/optim sharded",
            "fsdp1",
            "shard_grad_op",
        ),
        Strategy(
            "fsdp1_no_shard", "FSDP1 NO_SHARD: DDP-like replication through the FSDP1 code path", "fsdp1", "replicated"
        ),
        Strategy(
            "fsdp2",
            "FSDP2 fully_shard, reshard_after_forward=True (ZeRO-3-like)",
            "fsdp2",
            "full_shard",
            reshard_after_forward=True,
        ),
        Strategy(
            "fsdp2_no_reshard", "FSDP2 fully_shard, reshard_after_forward=False (ZeRO-2-like)", "fsdp2", "shard_grad_op"
        ),
        Strategy(
            "fsdp1_offload",
            "FSDP1 FULL_SHARD with CPUOffload(offload_params=True): params and grads live on the host",
            "fsdp1",
            "full_shard",
            reshard_after_forward=True,
            offload=True,
            in_default_sweep=False,
            cpu_skip_reason=(
                _NEEDS_CUDA + "FSDP1 CPUOffload(offload_params=True) raises 'Cannot access accelerator "
                "device when none is available' at the first forward on a CPU-only machine"
            ),
        ),
        Strategy(
            "fsdp2_offload",
            "FSDP2 fully_shard with CPUOffloadPolicy: sharded params, grads and optimizer step on the host",
            "fsdp2",
            "full_shard",
            reshard_after_forward=True,
            offload=True,
            in_default_sweep=False,
            cpu_skip_reason=(
                _NEEDS_CUDA + "FSDP2 CPUOffloadPolicy raises 'Cannot access accelerator device when "
                "none is available' on a CPU-only machine"
            ),
        ),
        Strategy(
            "accelerate_fsdp2",
            "Hugging Face accelerate FSDP2: model and optimizer built first, then Accelerator.prepare",
            "accelerate",
            "full_shard",
            reshard_after_forward=True,
            fixed_timing="before_shard_fixed",
            in_default_sweep=False,
            cpu_skip_reason=(
                _NEEDS_CUDA + "accelerate 1.15 on CPU runs as DistributedType.MULTI_CPU and wraps the "
                "model in DDP, ignoring the FSDP2 plugin, so nothing would be sharded"
            ),
        ),
        Strategy(
            "fsdp1_hybrid_shard",
            "FSDP1 HYBRID_SHARD: FULL_SHARD inside a node, replicated across nodes (2D mesh)",
            "fsdp1",
            "full_shard",
            reshard_after_forward=True,
            hybrid=True,
            in_default_sweep=False,
        ),
        Strategy(
            "fsdp2_hsdp",
            "FSDP2 fully_shard on a 2D (replicate x shard) mesh: HSDP",
            "fsdp2",
            "full_shard",
            reshard_after_forward=True,
            hybrid=True,
            in_default_sweep=False,
        ),
    )
}


def strategy(name: str) -> Strategy:
    """The catalog row of `name` (KeyError for an unknown name: validate with `STRATEGIES` first)."""
    return STRATEGIES[name]


def names_where(**traits: object) -> tuple[str, ...]:
    """Strategy names whose rows have every given trait value, in catalog order."""
    return tuple(s.name for s in STRATEGIES.values() if all(getattr(s, key) == value for key, value in traits.items()))


DEFAULT_STRATEGIES = names_where(in_default_sweep=True)


def strategy_order(name: str) -> int:
    """Catalog position (unknown names last): the order tables and legends list strategies in."""
    names = list(STRATEGIES)
    return names.index(name) if name in names else len(names)


@dataclass(frozen=True)
class Precision:
    """One compute precision a case takes (`--bench-precision`): everything code asks of it."""

    name: str  # the case's word
    dtype: str  # the torch dtype name the model computes in
    bytes: int  # bytes per element of that dtype (activations, gathered parameters)
    grad_scaler: bool  # fp16's gradients underflow without a loss scaler
    accelerate: str  # accelerate's `mixed_precision` word
    peak_flops_column: str  # the peak-FLOPs table's column (analysis.flops.PeakFlops)

    @property
    def low(self) -> bool:
        """Below fp32: FSDP casts parameters to it, DDP runs under autocast."""
        return self.bytes < 4


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", "float32", 4, False, "no", "fp32"),
        Precision("bf16", "bfloat16", 2, False, "bf16", "bf16"),
        Precision("fp16", "float16", 2, True, "fp16", "fp16"),
    )
}


DEFAULT_PRECISION = "fp32"  # a case's, and every function's that takes a precision


def precision(name: str) -> Precision:
    """The row of a precision name (KeyError for an unknown one: cases are validated first)."""
    return PRECISIONS[name]
