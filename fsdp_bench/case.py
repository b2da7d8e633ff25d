"""One benchmark case: what to run, its stable id, and the grid that produces cases.

Pure Python on purpose: pytest collects thousands of these without importing torch.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping

from fsdp_bench.models.flavors import MODEL_FLAVORS, is_hf_path

# Strategy names and what a user reads in `--help` and error messages. The torch side
# (fsdp_bench.strategies.STRATEGY_REGISTRY) must hold exactly these keys; a test checks it.
STRATEGIES: dict[str, str] = {
    "ddp": "DistributedDataParallel: full replica per rank, gradients all-reduced",
    "fsdp1_full_shard": "FSDP1 FULL_SHARD (ZeRO-3): params, grads and optimizer state sharded",
    "fsdp1_shard_grad_op": "FSDP1 SHARD_GRAD_OP (ZeRO-2): params kept after forward, grads/optim sharded",
    "fsdp1_no_shard": "FSDP1 NO_SHARD: DDP-like replication through the FSDP1 code path",
    "fsdp2": "FSDP2 fully_shard, reshard_after_forward=True (ZeRO-3-like)",
    "fsdp2_no_reshard": "FSDP2 fully_shard, reshard_after_forward=False (ZeRO-2-like)",
    "fsdp1_hybrid_shard": "FSDP1 HYBRID_SHARD: FULL_SHARD inside a node, replicated across nodes (2D mesh)",
    "fsdp2_hsdp": "FSDP2 fully_shard on a 2D (replicate x shard) mesh: HSDP",
}

# Strategies that shard over a 2D (replicate x shard) device mesh; `Case.mesh` applies to them only.
HYBRID_STRATEGIES = frozenset({"fsdp1_hybrid_shard", "fsdp2_hsdp"})

# Optimizer timing and its short form in case ids.
OPTIMIZER_TIMINGS: dict[str, str] = {
    "after_shard": "after",
    "before_shard": "before",
    "before_shard_fixed": "before_fixed",
}

# Strategies that do not replace the module's parameters, so building the optimizer
# before or after wrapping is the same program: only `after_shard` is run for them.
TIMING_INSENSITIVE = frozenset({"ddp"})

DEVICES = ("cpu", "cuda")


class CaseError(ValueError):
    """A case (or an option that builds one) is invalid; the message is one line for the user."""


def _known(names: Iterable[str]) -> str:
    return ", ".join(names)


@dataclass(frozen=True, kw_only=True)
class Case:
    """Everything one torchrun launch needs. The defaults here are the project's only defaults."""

    strategy: str
    model: str = "gpt_tiny"
    batch_size: int = 2  # per device, per micro-step
    grad_accum: int = 1
    optimizer_timing: str = "after_shard"
    seq_len: int = 128
    steps: int = 10  # measured optimizer steps
    warmup: int = 3  # optimizer steps run before measuring, excluded from statistics
    nproc: int = 2
    device: str = "cpu"
    seed: int = 0
    lr: float = 1e-3
    pg_timeout_s: float = 120.0  # collective timeout; the runner keeps the case timeout above it
    # Hybrid strategies' "REPLICATExSHARD" mesh; "" = the node boundary (nodes x ranks per node).
    mesh: str = ""
    # Run only rank 0 of an `nproc`-rank job on one device with a fake process group.
    simulate: bool = False

    def __post_init__(self) -> None:
        validate_case(self)

    @property
    def id(self) -> str:
        """The one name of this case: pytest id, file stem, CSV key and plot label."""
        parts = [
            self.strategy,
            self.model.replace("/", "_").replace(":", "_"),
            f"ws{self.nproc}",
            f"bs{self.batch_size}",
            f"ga{self.grad_accum}",
            f"opt_{OPTIMIZER_TIMINGS[self.optimizer_timing]}",
        ]
        for f in fields(self):
            if f.name in _ID_AXES or f.name in _NOT_IN_ID:
                continue
            value = getattr(self, f.name)
            if value != f.default:
                parts.append(f"{_ID_PREFIX.get(f.name, f.name)}{_format_id_value(value)}")
        return "-".join(parts)

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.grad_accum * self.nproc

    @property
    def tokens_per_step(self) -> int:
        """Tokens consumed by one optimizer step across all ranks."""
        return self.global_batch_size * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Case":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CaseError(f"unknown case field(s) {_known(unknown)}; known: {_known(sorted(names))}")
        return cls(**dict(data))

    def replace(self, **changes: Any) -> "Case":
        return dataclasses.replace(self, **changes)


# Axes always spelled out in the id (in a fixed order); other fields appear only when
# they differ from their default. Measurement settings never appear: they do not change
# what is being compared, and resuming a run must find the same ids.
_ID_AXES = frozenset({"strategy", "model", "nproc", "batch_size", "grad_accum", "optimizer_timing"})
_NOT_IN_ID = frozenset({"steps", "warmup", "device", "pg_timeout_s"})
_ID_PREFIX = {"seq_len": "sl", "seed": "seed", "lr": "lr", "mesh": "mesh", "simulate": "sim_"}


def _format_id_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CaseError(f"{name} must be a positive integer, got {value!r}")


def validate_case(case: Case) -> None:
    if case.strategy not in STRATEGIES:
        raise CaseError(f"unknown strategy {case.strategy!r}; known: {_known(STRATEGIES)}")
    if case.optimizer_timing not in OPTIMIZER_TIMINGS:
        raise CaseError(
            f"unknown optimizer timing {case.optimizer_timing!r}; known: {_known(OPTIMIZER_TIMINGS)}"
        )
    if case.model not in MODEL_FLAVORS and not is_hf_path(case.model):
        raise CaseError(f"unknown model {case.model!r}; known: {_known(MODEL_FLAVORS)} or hf:PATH")
    if case.device not in DEVICES:
        raise CaseError(f"unknown device {case.device!r}; known: {_known(DEVICES)}")
    for name in ("batch_size", "grad_accum", "seq_len", "steps", "nproc"):
        _positive_int(name, getattr(case, name))
    if isinstance(case.warmup, bool) or not isinstance(case.warmup, int) or case.warmup < 0:
        raise CaseError(f"warmup must be a non-negative integer, got {case.warmup!r}")
    if not isinstance(case.seed, int) or isinstance(case.seed, bool):
        raise CaseError(f"seed must be an integer, got {case.seed!r}")
    if not (isinstance(case.lr, (int, float)) and case.lr > 0):
        raise CaseError(f"lr must be a positive number, got {case.lr!r}")
    if not (isinstance(case.pg_timeout_s, (int, float)) and case.pg_timeout_s > 0):
        raise CaseError(f"pg_timeout_s must be a positive number, got {case.pg_timeout_s!r}")
    if not isinstance(case.simulate, bool):
        raise CaseError(f"simulate must be true or false, got {case.simulate!r}")
    if case.mesh:
        if case.strategy not in HYBRID_STRATEGIES:
            raise CaseError(f"mesh {case.mesh!r} only applies to {_known(sorted(HYBRID_STRATEGIES))}, not {case.strategy}")
        replicate, shard = parse_mesh(case.mesh)
        if replicate * shard != case.nproc:
            raise CaseError(f"mesh {case.mesh} has {replicate * shard} ranks but the case has {case.nproc}")
    flavor = MODEL_FLAVORS.get(case.model)
    if flavor is not None and flavor.max_seq_len is not None and case.seq_len > flavor.max_seq_len:
        raise CaseError(
            f"seq_len {case.seq_len} exceeds {case.model}'s context of {flavor.max_seq_len} tokens"
        )


def parse_mesh(text: str) -> tuple[int, int]:
    """"2x4" -> (replicate=2, shard=4)."""
    parts = str(text).lower().split("x")
    try:
        replicate, shard = (int(p) for p in parts)
    except ValueError:
        raise CaseError(f"mesh {text!r} is not REPLICATExSHARD, e.g. 2x4") from None
    if replicate < 1 or shard < 1:
        raise CaseError(f"mesh {text!r} needs positive sizes")
    return replicate, shard


def hybrid_mesh_shape(mesh: str, *, world_size: int, ranks_per_node: int) -> tuple[int, int]:
    """(replicate, shard) for a hybrid strategy: the case's mesh, else one replica per node so
    that parameter all-gathers and gradient reduce-scatters stay on the fast intra-node links
    and only the (sharded) gradient all-reduce crosses nodes."""
    if mesh:
        replicate, shard = parse_mesh(mesh)
    else:
        shard = max(1, min(ranks_per_node, world_size))
        replicate = world_size // shard
    if replicate * shard != world_size:
        raise CaseError(f"mesh {replicate}x{shard} does not cover a world of {world_size} ranks")
    return replicate, shard


def skip_reason(case: Case) -> str | None:
    """Why this case cannot run where it would run, known before launching it (None: it can)."""
    return None


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The axes a sweep crosses; every other case field comes from `base`."""

    strategies: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    grad_accums: tuple[int, ...] = (1,)
    optimizer_timings: tuple[str, ...] = ("after_shard",)
    base: Mapping[str, Any] = field(default_factory=dict)


def expand_grid(grid: Grid) -> list[Case]:
    """The product of the grid's axes as cases, in a stable order, without duplicates.

    Timing-insensitive strategies (DDP) get a single `after_shard` case instead of three
    identical ones.
    """
    cases: dict[str, Case] = {}
    for strategy, bs, ga, timing in itertools.product(
        grid.strategies, grid.batch_sizes, grid.grad_accums, grid.optimizer_timings
    ):
        if strategy in TIMING_INSENSITIVE:
            timing = "after_shard"
        case = Case(
            **{**grid.base, "strategy": strategy, "batch_size": bs, "grad_accum": ga,
               "optimizer_timing": timing}
        )
        cases.setdefault(case.id, case)
    return list(cases.values())
