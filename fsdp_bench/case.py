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
}

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
    profile: bool = False  # torch.profiler over extra untimed steps: communication breakdown + trace
    memory_snapshot: bool = False  # CUDA allocator history snapshot per rank (memory_viz pickle)

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
_NOT_IN_ID = frozenset({"steps", "warmup", "device", "pg_timeout_s", "profile", "memory_snapshot"})
_ID_PREFIX = {"seq_len": "sl", "seed": "seed", "lr": "lr"}


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
    for name in ("profile", "memory_snapshot"):
        if not isinstance(getattr(case, name), bool):
            raise CaseError(f"{name} must be true or false, got {getattr(case, name)!r}")
    flavor = MODEL_FLAVORS.get(case.model)
    if flavor is not None and flavor.max_seq_len is not None and case.seq_len > flavor.max_seq_len:
        raise CaseError(
            f"seq_len {case.seq_len} exceeds {case.model}'s context of {flavor.max_seq_len} tokens"
        )


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
