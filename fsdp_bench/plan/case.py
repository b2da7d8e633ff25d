"""One benchmark case: what to run, its stable id, and the grid that produces cases.

Pure Python on purpose: pytest collects thousands of these without importing torch.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from fsdp_bench.plan.catalog import DEFAULT_PRECISION, OPTIMIZER_TIMING_ROWS, PRECISIONS, STRATEGIES, precision
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.plan.flavors import MODEL_FLAVORS, hf_path_problem, is_hf_path
from fsdp_bench.results.records import CaseFields
from fsdp_bench.results.work import global_batch_size

# Knob values (first = default, mirrored by the Case field defaults below).
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "plain")
WRAP_POLICIES = ("module", "size_based", "none")
BACKWARD_PREFETCHES = ("pre", "post", "none")
GRAD_SYNCS = ("every", "last")
CHECKPOINTS = ("none", "full", "sharded")
# The loss: the whole batch's logits at once, or the head and cross-entropy over LOSS_CHUNKS slices
# of the tokens, each slice's gradients made in forward (worker.models.loss): the vocab-wide logits,
# log-probabilities and their gradients (23.5 GiB of llama3_1b's batch 8 x 2048) shrink to one
# slice's, and the loss keeps the hidden states' and the head's gradients instead.
LOSSES = ("full", "chunked")
LOSS_CHUNKS = 8

# Optimizer timing and its short form in case ids.
# name -> short form in case ids (the rows are in plan.catalog.OPTIMIZER_TIMING_ROWS)
OPTIMIZER_TIMINGS: dict[str, str] = {t.name: t.short for t in OPTIMIZER_TIMING_ROWS.values()}

DEVICES = ("cpu", "cuda")


# A case id is a file and folder name (cases/<id>.json, cases/.attempts/<id>-repeatR.N): with
# room for those suffixes it stays under the 255-byte name limit of Linux filesystems.
MAX_CASE_ID_BYTES = 200


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
    # Adaptive measurement (analysis.adaptive): > 0 keeps measuring past `steps` until the
    # median's interval is within +-target_ci_pct %, or the measured steps took measure_cap_s.
    target_ci_pct: float = 0.0
    measure_cap_s: float = 60.0
    nproc: int = 2
    device: str = "cpu"
    seed: int = 0
    lr: float = 1e-3
    pg_timeout_s: float = 120.0  # collective timeout; the runner keeps the case timeout above it
    # Training knobs (issue 5). In the id only when not at these defaults.
    precision: str = (
        DEFAULT_PRECISION  # fp32 | bf16 | fp16: FSDP1 MixedPrecision, FSDP2 MixedPrecisionPolicy, DDP autocast
    )
    act_ckpt: bool = False  # activation checkpointing of every block
    compile: bool = False  # torch.compile of every block
    optimizer_impl: str = "auto"  # AdamW implementation: auto (torch picks) | fused | foreach | plain
    grad_clip: float = 0.0  # max global grad norm (0: no clipping)
    wrap_policy: str = "module"  # FSDP1 auto-wrap: module (per block) | size_based | none (root only)
    min_num_params: int = 100_000_000  # FSDP1 size_based threshold (torch's default)
    forward_prefetch: int = 0  # FSDP1: >0 turns forward_prefetch on; FSDP2: blocks prefetched ahead
    backward_prefetch: str = "pre"  # FSDP1 BACKWARD_PRE | POST | NONE; FSDP2 only pre
    grad_sync: str = "every"  # reduce grads every micro-step, or only on the last (no_sync)
    loss: str = "full"  # full | chunked: cross-entropy over LOSS_CHUNKS token slices, gradients made in forward
    checkpoint: str = "none"  # after the measured steps: save/load a full or sharded state dict
    data: str = ""  # folder of .txt/.json/.jsonl text ("" = synthetic tokens)
    suite: str = ""  # named suite that produced this case (not in the id)
    scaled_down: str = ""  # what a suite scaled down to fit this device ("" = full size; not in the id)
    # Hybrid strategies' "REPLICATExSHARD" mesh; "" = the node boundary (nodes x ranks per node).
    mesh: str = ""
    # Run only rank 0 of an `nproc`-rank job on one device with a fake process group.
    simulate: bool = False
    profile: bool = False  # torch.profiler over extra untimed steps: communication breakdown + trace
    memory_snapshot: bool = False  # CUDA allocator history snapshot per rank (memory_viz pickle)
    # The untimed probe steps after the measured ones (FLOP counter, measured model state,
    # MemTracker breakdown, and on CPU the peak); off saves their steps on big models.
    probes: bool = True

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
        return global_batch_size(self.batch_size, self.grad_accum, self.nproc)

    @property
    def tokens_per_step(self) -> int:
        """Tokens consumed by one optimizer step across all ranks."""
        return self.global_batch_size * self.seq_len

    def runs_gloo(self, world_size: int | None = None) -> bool:
        """Whether its collectives run on gloo between real ranks (CPU, not simulated, at
        `world_size`, default its ranks): gloo's reduce-scatter copies its whole input, which the
        peak model and the estimator count; a simulated rank's fake process group allocates nothing."""
        return self.device != "cuda" and not self.simulate and (world_size or self.nproc) > 1

    @property
    def update_norm_steps(self) -> range:
        """The steps that get an update norm (worker.update_norms): the warmup steps, never a
        measured one. Each norm copies the rank's local parameters to the host between two steps,
        time in which a GPU idles (GPT-2 124M: 0.11-0.15 s per warmup step on the H100 on
        2026-11-26, 0.55-0.6 s on the 2-core CPU VM); taken on every measured step they left 8.8-20.6 %
        of its measure stage to the timed steps, on the first and last 75-95 %. The duration
        estimate counts them."""
        return range(self.warmup)

    def to_dict(self) -> CaseFields:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Case:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CaseError(f"unknown case field(s) {_known(unknown)}; known: {_known(sorted(names))}")
        return cls(**dict(data))

    def replace(self, **changes: Any) -> Case:
        return dataclasses.replace(self, **changes)


# --bench-profile: steps recorded by torch.profiler, after steps it runs but does not record (its
# own start-up stays out of the trace). The worker runs them; the duration estimate counts them.
PROFILED_STEPS = 2
PROFILER_WARMUP_STEPS = 1
# The step-parts probe (worker.probes._probe_step_parts): PARTS_PROBE_PLAIN_STEPS timed without
# the profiler first (time_plain_steps, the moment nearest the timed loop), then one profiled but
# unmarked step and PARTS_PROBE_WINDOWS profiled windows (probe_step_events).
PARTS_PROBE_WINDOWS = 2
PARTS_PROBE_PLAIN_STEPS = 5
PARTS_PROBE_STEPS = 1 + PARTS_PROBE_WINDOWS + PARTS_PROBE_PLAIN_STEPS
# FSDP1's CPU peak (worker.profiled_peak, MemTracker refuses FSDP1): steps under the profiler's
# memory events, the peak read in the last (the first makes every free it sees one it counted).
PROFILED_PEAK_STEPS = 2

# Update norms need two host copies of the local parameters (on a GPU): above this many bytes of
# them a benchmark would take more host memory than it should, and the norms are null with the
# reason. The worker applies it; the duration estimate counts no norm above it.
UPDATE_NORM_MAX_BYTES = 2 * 2**30


# Axes always spelled out in the id (in a fixed order); other fields appear only when
# they differ from their default. Measurement settings never appear: they do not change
# what is being compared, and resuming a run must find the same ids.
_ID_AXES = frozenset({"strategy", "model", "nproc", "batch_size", "grad_accum", "optimizer_timing"})
_NOT_IN_ID = frozenset(
    {
        "steps",
        "warmup",
        "target_ci_pct",
        "measure_cap_s",
        "device",
        "pg_timeout_s",
        "suite",
        "scaled_down",
        "profile",
        "memory_snapshot",
        "probes",
    }
)
_ID_PREFIX = {
    "seq_len": "sl",
    "seed": "seed",
    "lr": "lr",
    "precision": "",
    "act_ckpt": "ac",
    "compile": "compiled",
    "optimizer_impl": "adamw_",
    "grad_clip": "clip",
    "wrap_policy": "wrap_",
    "min_num_params": "mnp",
    "forward_prefetch": "fwdpf",
    "backward_prefetch": "bwdpf_",
    "grad_sync": "sync_",
    "loss": "loss_",
    "checkpoint": "ckpt_",
    "data": "data_",
    "mesh": "mesh",
    "simulate": "sim",
}


def check_unique_ids(cases: Iterable[Case]) -> None:
    """Two different cases with one id would overwrite each other's results (e.g. hf:/a/b_c and
    hf:/a/b/c both give `hf__a_b_c`): refuse them, naming both and where they differ."""
    seen: dict[str, Case] = {}
    for case in cases:
        other = seen.setdefault(case.id, case)
        if other != case:
            a, b = other.to_dict(), case.to_dict()
            diff = ", ".join(f"{k}={a[k]!r} vs {b[k]!r}" for k in a if a[k] != b[k])
            raise CaseError(
                f"two different cases share the id {case.id!r} ({diff}); rename or move one of them so their ids differ"
            )


def _format_id_value(value: Any) -> str:
    if isinstance(value, bool):
        return "" if value else "_off"
    if isinstance(value, str) and ("/" in value or ":" in value):  # a path: its last part
        return value.rstrip("/").rsplit("/", 1)[-1].replace(":", "_")
    return str(value)


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CaseError(f"{name} must be a positive integer, got {value!r}")


def validate_case(case: Case) -> None:
    """Every field of a case checked; CaseError with one line naming the first bad one."""
    _validate_names(case)
    _validate_numbers(case)
    _validate_combinations(case)


def _validate_names(case: Case) -> None:
    if case.strategy not in STRATEGIES:
        raise CaseError(f"unknown strategy {case.strategy!r}; known: {_known(STRATEGIES)}")
    if case.optimizer_timing not in OPTIMIZER_TIMINGS:
        raise CaseError(f"unknown optimizer timing {case.optimizer_timing!r}; known: {_known(OPTIMIZER_TIMINGS)}")
    if case.model not in MODEL_FLAVORS and not is_hf_path(case.model):
        raise CaseError(f"unknown model {case.model!r}; known: {_known(MODEL_FLAVORS)} or hf:PATH")
    if is_hf_path(case.model) and (problem := hf_path_problem(case.model)):
        raise CaseError(problem)
    if case.device not in DEVICES:
        raise CaseError(f"unknown device {case.device!r}; known: {_known(DEVICES)}")
    for name, known in (
        ("precision", PRECISIONS),
        ("optimizer_impl", OPTIMIZER_IMPLS),
        ("wrap_policy", WRAP_POLICIES),
        ("backward_prefetch", BACKWARD_PREFETCHES),
        ("grad_sync", GRAD_SYNCS),
        ("checkpoint", CHECKPOINTS),
        ("loss", LOSSES),
    ):
        if getattr(case, name) not in known:
            raise CaseError(f"unknown {name} {getattr(case, name)!r}; known: {_known(known)}")
    for name in ("simulate", "profile", "memory_snapshot", "probes", "act_ckpt", "compile"):
        if not isinstance(getattr(case, name), bool):
            raise CaseError(f"{name} must be true or false, got {getattr(case, name)!r}")


def _validate_numbers(case: Case) -> None:
    for name in ("batch_size", "grad_accum", "seq_len", "steps", "nproc", "min_num_params"):
        _positive_int(name, getattr(case, name))
    for name in ("warmup", "forward_prefetch"):
        value = getattr(case, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CaseError(f"{name} must be a non-negative integer, got {value!r}")
    for name in ("target_ci_pct", "measure_cap_s", "grad_clip"):
        value = getattr(case, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
            raise CaseError(f"{name} must be a non-negative number, got {value!r}")
    if not isinstance(case.seed, int) or isinstance(case.seed, bool):
        raise CaseError(f"seed must be an integer, got {case.seed!r}")
    for name in ("lr", "pg_timeout_s"):
        value = getattr(case, name)
        if not (isinstance(value, (int, float)) and value > 0):
            raise CaseError(f"{name} must be a positive number, got {value!r}")


def _validate_combinations(case: Case) -> None:
    if case.mesh:
        if not catalog_strategy(case.strategy).hybrid:
            hybrids = sorted(s.name for s in STRATEGIES.values() if s.hybrid)
            raise CaseError(f"mesh {case.mesh!r} only applies to {_known(hybrids)}, not {case.strategy}")
        replicate, shard = parse_mesh(case.mesh)
        if replicate * shard != case.nproc:
            raise CaseError(f"mesh {case.mesh} has {replicate * shard} ranks but the case has {case.nproc}")
    flavor = MODEL_FLAVORS.get(case.model)
    if flavor is not None and flavor.max_seq_len is not None and case.seq_len > flavor.max_seq_len:
        raise CaseError(f"seq_len {case.seq_len} exceeds {case.model}'s context of {flavor.max_seq_len} tokens")
    if case.data and flavor is not None and not flavor.takes_tokens:
        raise CaseError(f"data {case.data!r} needs a language model; {case.model} takes vectors, not tokens")
    if len(case.id.encode()) > MAX_CASE_ID_BYTES:
        raise CaseError(
            f"case id {case.id[:60]}... is {len(case.id.encode())} bytes; a file name holds "
            f"{MAX_CASE_ID_BYTES} at most here (a shorter hf: path gives a shorter id)"
        )


def applicable(case: Case) -> Case:
    """The case with knobs its strategy ignores reset to their defaults, so a grid never runs the
    same program under two ids (like DDP's optimizer timing)."""
    changes: dict[str, Any] = {}
    row = catalog_strategy(case.strategy)
    if row.fixed_timing:
        changes["optimizer_timing"] = row.fixed_timing
    if not row.uses_wrap_policy:
        changes.update(wrap_policy="module", min_num_params=_DEFAULTS["min_num_params"])
    elif case.wrap_policy != "size_based":
        changes["min_num_params"] = _DEFAULTS["min_num_params"]
    if not row.uses_fsdp_knobs:
        changes.update(forward_prefetch=0, backward_prefetch="pre")
    if case.grad_accum == 1:
        changes["grad_sync"] = "every"
    flavor = MODEL_FLAVORS.get(case.model)
    if flavor is not None and not flavor.takes_tokens:  # no vocabulary: one loss
        changes["loss"] = "full"
    return case.replace(**changes) if changes else case


def timing_order(name: str) -> int:
    """Position in OPTIMIZER_TIMINGS (unknown names last): the order tables and legends use."""
    names = list(OPTIMIZER_TIMINGS)
    return names.index(name) if name in names else len(names)


def parse_mesh(text: str) -> tuple[int, int]:
    """ "2x4" -> (replicate=2, shard=4)."""
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
    row = catalog_strategy(case.strategy)
    if case.device == "cpu":
        if precision(case.precision).grad_scaler:
            return (
                "fp16 needs CUDA: the fp16 recipe (half params + sharded GradScaler) is a GPU training "
                "choice; CPU kernels for half matmuls are slow emulation, so its timings mean nothing"
            )
        if row.cpu_skip_reason:
            return f"{case.strategy} {row.cpu_skip_reason}"
    if case.device == "cuda" and case.nproc == 1 and not case.simulate and row.degrades_to_no_shard_at_one_rank:
        return (
            f"{case.strategy} at 1 rank: FSDP1 switches every sharded strategy to NO_SHARD when the "
            "world size is 1, so it would measure fsdp1_no_shard under this name; run it with "
            "nproc >= 2 or simulate=True"
        )
    if row.uses_fsdp_knobs and not row.chooses_backward_prefetch and case.backward_prefetch != "pre":
        return (
            f"backward_prefetch={case.backward_prefetch} does not exist in FSDP2: fully_shard always "
            "prefetches the next block in backward (only explicit deeper prefetch can be set)"
        )
    return None


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The axes a sweep crosses; every other case field comes from `base`. Every axis is named
    by the caller: the defaults a user gets live on `plan.sweep.Sweep`, and a suite's own grids
    say theirs (`plan.suites`), so no grid silently takes a third set."""

    strategies: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    grad_accums: tuple[int, ...]
    optimizer_timings: tuple[str, ...]
    base: Mapping[str, Any] = field(default_factory=dict)
    knobs: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # more case fields to cross


def expand_grid(grid: Grid) -> list[Case]:
    """The product of the grid's axes as cases, in a stable order, without duplicates.

    Strategies with a fixed optimizer timing get that one case instead of three identical ones,
    and knobs a strategy ignores are reset (see `applicable`).
    """
    cases: dict[str, Case] = {}
    knob_names = list(grid.knobs)
    for strategy, bs, ga, timing, *knob_values in itertools.product(
        grid.strategies,
        grid.batch_sizes,
        grid.grad_accums,
        grid.optimizer_timings,
        *(grid.knobs[n] for n in knob_names),
    ):
        case = Case(
            **{
                **grid.base,
                "strategy": strategy,
                "batch_size": bs,
                "grad_accum": ga,
                "optimizer_timing": timing,
                **dict(zip(knob_names, knob_values)),
            }
        )
        case = applicable(case)
        cases.setdefault(case.id, case)
    return list(cases.values())


_DEFAULTS = {f.name: f.default for f in fields(Case)}
