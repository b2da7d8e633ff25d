"""A validated sweep (`Sweep`): the grid axes, the shared case settings and how to run them, with
the cases it expands to and the fingerprint a resume compares (no torch). The `--bench-*` options
that build one are in `fsdp_bench.plan.options`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from fsdp_bench.plan.case import Case, Grid, check_unique_ids, expand_grid
from fsdp_bench.plan.catalog import DEFAULT_STRATEGIES
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.plan.devices import resolve_device, resolve_nproc
from fsdp_bench.plan.nodes import Launch
from fsdp_bench.plan.suites import SuiteSettings, suite_cases

_CASE_DEFAULTS = {f.name: f.default for f in fields(Case) if f.name != "strategy"}
CPU_TARGET_CI_PCT = 2.0  # --bench-target-ci-pct's default on CPU


# how cases run or where results go, not what they measure: a resume may change these
_NOT_MEASURED = frozenset(
    {
        "timeout_s",
        "kill_grace_s",
        "results_dir",
        "resume",
        "report",
        "nnodes",
        "node_rank",
        "rdzv_endpoint",
        "run_id",
        "allow_slow_cpu",
        "gpu_name",
        "allow_memory_overcommit",
        # the tuner picks which cases to measure, not how each is measured
        "tune",
        "budget_gib",
        "tune_time_s",
    }
)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def fingerprint_differences(stored: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """'name: was X, now Y' for each setting that differs (a missing one is the default)."""
    return [
        f"{name}: was {stored.get(name, 'default')!r}, now {now.get(name, 'default')!r}"
        for name in sorted(set(stored) | set(now))
        if stored.get(name) != now.get(name)
    ]


CASE_TIMEOUT_S = 600.0  # one case's whole process tree, unless --bench-timeout says otherwise
KILL_GRACE_S = 30.0  # SIGTERM to torchrun, then this long before SIGKILL


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """A validated sweep: the grid axes, the shared case settings and how to run them."""

    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    batch_sizes: tuple[int, ...] = (2, 4)
    grad_accums: tuple[int, ...] = (1, 2)
    optimizer_timings: tuple[str, ...] = ("after_shard",)
    models: tuple[str, ...] = (_CASE_DEFAULTS["model"],)
    device: str = "auto"  # resolved to cpu/cuda by `resolve_device`
    nproc: int | None = None  # None: all GPUs on cuda, 2 ranks on cpu
    steps: int = _CASE_DEFAULTS["steps"]
    warmup: int = _CASE_DEFAULTS["warmup"]
    seq_len: int = _CASE_DEFAULTS["seq_len"]
    timeout_s: float = CASE_TIMEOUT_S
    kill_grace_s: float = KILL_GRACE_S
    results_dir: Path = Path("results")
    resume: Path | None = None
    report: bool = True
    # Multi-node launch settings (fsdp_bench.plan.nodes): how cases run, not what they are.
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    run_id: str | None = None  # the run folder's name; required on several nodes
    mesh: str = ""  # hybrid strategies' REPLICATExSHARD; "" = the node boundary
    simulate_world_sizes: tuple[int, ...] = ()  # non-empty: simulate rank 0 at these world sizes
    profile: bool = _CASE_DEFAULTS["profile"]
    memory_snapshot: bool = _CASE_DEFAULTS["memory_snapshot"]
    skip_probes: bool = not _CASE_DEFAULTS["probes"]
    extra: Mapping[str, Any] = field(default_factory=dict)
    knobs: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # training knobs crossed as axes
    data: str = _CASE_DEFAULTS["data"]
    suite: str | None = None
    allow_slow_cpu: bool = False  # run CPU cases whose first step is estimated over a minute
    allow_memory_overcommit: bool = False  # run cases predicted to need more host memory than is available
    repeats: int = 1  # each case run this many times, each in a fresh process tree
    # Adaptive measurement (issue 25, analysis.adaptive): None = CPU_TARGET_CI_PCT on CPU, where
    # shared cores make 10 steps too few to rank strategies, and off (exactly --bench-steps) on CUDA.
    target_ci_pct: float | None = None
    measure_cap_s: float = 10.0  # per case: measured seconds after which an adaptive case stops
    gpu_name: str | None = None  # whose published figures the duration estimate uses (None: the visible GPU)
    # Autotune (issue 27, analysis.tune / launch.tune): one test per model measures only the
    # cases that could win, within a memory budget per device and a budget of case-seconds.
    tune: bool = False
    budget_gib: float | None = None
    tune_time_s: float | None = None

    def fingerprint(self) -> dict[str, Any]:
        """The settings that decide what the cases measure, where they differ from the defaults,
        as JSON values: stored in the run folder so a resume with other settings is refused."""
        out = {}
        for f in fields(self):
            if f.name in _NOT_MEASURED:
                continue
            value = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            if value != default:
                out[f.name] = _jsonable(value)
        return out

    def launch(self) -> Launch:
        return Launch(
            nnodes=self.nnodes, node_rank=self.node_rank, rdzv_endpoint=self.rdzv_endpoint, run_id=self.run_id
        )

    def process_group_timeout_s(self) -> float:
        """Collectives must time out before the case does, so a hang ends as a rank error."""
        return max(5.0, min(_CASE_DEFAULTS["pg_timeout_s"], self.timeout_s * 0.5))

    def grids(self, device: str, nproc: int, simulate: bool = False) -> list[Grid]:
        return [
            Grid(
                strategies=self.strategies,
                batch_sizes=self.batch_sizes,
                grad_accums=self.grad_accums,
                optimizer_timings=self.optimizer_timings,
                base={
                    "model": model,
                    "seq_len": self.seq_len,
                    "steps": self.steps,
                    "warmup": self.warmup,
                    "device": device,
                    "nproc": nproc,
                    "pg_timeout_s": self.process_group_timeout_s(),
                    "data": self.data,
                    "profile": self.profile,
                    "memory_snapshot": self.memory_snapshot,
                    "probes": not self.skip_probes,
                    **({"simulate": True} if simulate else {}),
                    **self.measurement(device),
                    **self.extra,
                },
                knobs=self.knobs,
            )
            for model in self.models
        ]

    def measurement(self, device: str) -> dict[str, float]:
        """The cases' adaptive-measurement settings on `device` (see `target_ci_pct`)."""
        target = (
            self.target_ci_pct if self.target_ci_pct is not None else (CPU_TARGET_CI_PCT if device == "cpu" else 0.0)
        )
        return {"target_ci_pct": target, "measure_cap_s": self.measure_cap_s}

    def cases(self) -> list[Case]:
        """Every case, in the same order on every node. `nproc` is ranks per node, so a case's
        world size (its `nproc`, `ws` in the id) is nproc x nnodes."""
        if self.suite is not None:
            return self.suite_cases(self.suite)
        device = resolve_device(self.device)
        nproc = resolve_nproc(self.nproc, device) * self.nnodes
        worlds = [(n, True) for n in self.simulate_world_sizes] or [(nproc, False)]
        cases = [
            case
            for world, simulate in worlds
            for grid in self.grids(device, world, simulate)
            for case in expand_grid(grid)
        ]
        if self.mesh:
            cases = [c.replace(mesh=self.mesh) if catalog_strategy(c.strategy).hybrid else c for c in cases]
        check_unique_ids(cases)
        return cases

    def runs_module(self, module_suite: str | None, *, named_on_command_line: bool) -> bool:
        """Whether a benchmark module's cases run: `--bench-suite NAME` keeps only that suite's
        module; without it a suite module runs only when its file is named on the command line,
        so `pytest benchmarks` stays the strategy sweep."""
        if self.suite is not None:
            return module_suite == self.suite
        return module_suite is None or named_on_command_line

    def suite_cases(self, name: str) -> list[Case]:
        """A named suite's cases; the user's device, nproc, steps, warmup and data still apply."""
        device = resolve_device(self.device)
        # --bench-simulate-world-size: the suite at each of those world sizes, rank 0 simulated
        worlds = [(n, True) for n in self.simulate_world_sizes] or [(resolve_nproc(self.nproc, device), False)]
        cases = []
        for world, simulate in worlds:
            settings = SuiteSettings(
                device=device,
                nproc=world,
                steps=self.steps,
                warmup=self.warmup,
                pg_timeout_s=self.process_group_timeout_s(),
                data=self.data,
            )
            cases += [
                c.replace(
                    profile=self.profile,
                    memory_snapshot=self.memory_snapshot,
                    probes=not self.skip_probes,
                    **({"simulate": True} if simulate else {}),
                )
                for c in suite_cases(name, settings)
            ]
        check_unique_ids(cases)
        return cases


# option name (without --bench-) -> (Sweep field, parser, help)
