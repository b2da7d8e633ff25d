"""The `--bench-*` options: their defaults, parsing and validation into a `Sweep` (no torch).

Every error is a `CaseError` whose message starts with the option's name, so pytest can show it
as a one-line usage error.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from fsdp_bench.plan.case import (
    BACKWARD_PREFETCHES,
    CHECKPOINTS,
    DEVICES,
    GRAD_SYNCS,
    LOSS_CHUNKS,
    LOSSES,
    OPTIMIZER_IMPLS,
    OPTIMIZER_TIMINGS,
    PARTS_PROBE_STEPS,
    WRAP_POLICIES,
    Case,
    CaseError,
)
from fsdp_bench.plan.catalog import PRECISIONS, STRATEGIES
from fsdp_bench.plan.devices import count_cuda_devices, max_cpu_ranks, resolve_device
from fsdp_bench.plan.flavors import MODEL_FLAVORS
from fsdp_bench.plan.nodes import LaunchError, validate_launch
from fsdp_bench.plan.option_values import (  # the option table's value parsers
    _data_folder,
    _existing_run,
    _grace,
    _mesh,
    _models,
    _names,
    _non_negative_float_value,
    _non_negative_floats,
    _non_negative_int,
    _on_off,
    _positive_float,
    _positive_gib,
    _positive_int,
    _split,
    _switch,
    _text,
    _writable_dir,
)
from fsdp_bench.plan.suites import SUITES
from fsdp_bench.plan.sweep import CPU_TARGET_CI_PCT, Sweep
from fsdp_bench.results.layout import foreign_entries

# Probe steps after the measured ones: the step parts' (worker.probes), then the FLOP counter's and
# MemTracker's one each; --bench-no-probes skips them all.
PROBE_STEPS = PARTS_PROBE_STEPS + 2

OPTIONS: dict[str, tuple[str, Callable[[str, str], Any], str]] = {
    "strategies": (
        "strategies",
        lambda o, r: _names(o, r, STRATEGIES),
        f"comma list of strategies: {', '.join(STRATEGIES)}",
    ),
    "batch-sizes": (
        "batch_sizes",
        lambda o, r: tuple(_positive_int(o, s) for s in _split(o, r)),
        "per-device micro-batch sizes",
    ),
    "grad-accum": (
        "grad_accums",
        lambda o, r: tuple(_positive_int(o, s) for s in _split(o, r)),
        "gradient accumulation steps",
    ),
    "optimizer-timing": (
        "optimizer_timings",
        lambda o, r: _names(o, r, OPTIMIZER_TIMINGS),
        f"when the optimizer is built: {', '.join(OPTIMIZER_TIMINGS)}",
    ),
    "model": ("models", _models, f"model flavor(s): {', '.join(MODEL_FLAVORS)}, hf:PATH"),
    "nproc": ("nproc", _positive_int, "ranks per case"),
    "steps": (
        "steps",
        _positive_int,
        "measured optimizer steps; the least while --bench-target-ci-pct is above 0 (on CPU unless set to 0): "
        "measuring goes on to the target, --bench-measure-cap-s or 300 steps",
    ),
    "warmup": ("warmup", _non_negative_int, "warmup steps excluded from statistics"),
    "seq-len": ("seq_len", _positive_int, "tokens per sample"),
    "device": ("device", lambda o, r: _names(o, r, ("auto", *DEVICES))[0], "auto, cpu or cuda"),
    "timeout": ("timeout_s", _positive_float, "seconds per case before it is stopped"),
    "kill-grace": (
        "kill_grace_s",
        _grace,
        "seconds torchrun gets after SIGTERM before everything of the case is SIGKILLed ",
    ),
    "results-dir": ("results_dir", _writable_dir, "where run folders are created"),
    "resume": ("resume", _existing_run, "continue this run folder: keep its ok cases, re-run the rest"),
    "suite": (
        "suite",
        lambda o, r: _names(o, r, SUITES)[0],
        f"run one of the write-ups' experiments by name: {', '.join(SUITES)}",
    ),
    "data": ("data", _data_folder, "folder of .txt/.json/.jsonl text to train on"),
    # Training knobs: comma lists crossed like the axes above; in case ids only when not default.
    "precision": ("knobs.precision", lambda o, r: _names(o, r, PRECISIONS), f"{', '.join(PRECISIONS)}"),
    "act-ckpt": ("knobs.act_ckpt", _on_off, "activation checkpointing per block: off, on"),
    "compile": ("knobs.compile", _on_off, "torch.compile each block: off, on"),
    "optimizer-impl": (
        "knobs.optimizer_impl",
        lambda o, r: _names(o, r, OPTIMIZER_IMPLS),
        f"AdamW implementation: {', '.join(OPTIMIZER_IMPLS)}",
    ),
    "grad-clip": ("knobs.grad_clip", _non_negative_floats, "max global grad norm, 0 = off"),
    "wrap-policy": (
        "knobs.wrap_policy",
        lambda o, r: _names(o, r, WRAP_POLICIES),
        f"FSDP1 auto-wrap: {', '.join(WRAP_POLICIES)}",
    ),
    "min-num-params": (
        "knobs.min_num_params",
        lambda o, r: tuple(_positive_int(o, s) for s in _split(o, r)),
        "FSDP1 size_based wrap threshold",
    ),
    "forward-prefetch": (
        "knobs.forward_prefetch",
        lambda o, r: tuple(_non_negative_int(o, s) for s in _split(o, r)),
        "blocks prefetched ahead; FSDP1: >0 sets forward_prefetch",
    ),
    "backward-prefetch": (
        "knobs.backward_prefetch",
        lambda o, r: _names(o, r, BACKWARD_PREFETCHES),
        f"FSDP1 backward prefetch: {', '.join(BACKWARD_PREFETCHES)}",
    ),
    "grad-sync": (
        "knobs.grad_sync",
        lambda o, r: _names(o, r, GRAD_SYNCS),
        "grad-accum reduction: every micro-step, or only the last (no_sync)",
    ),
    "loss": (
        "knobs.loss",
        lambda o, r: _names(o, r, LOSSES),
        f"cross-entropy: full, or chunked ({LOSS_CHUNKS} token slices, each slice's gradients made in forward)",
    ),
    "checkpoint": (
        "knobs.checkpoint",
        lambda o, r: _names(o, r, CHECKPOINTS),
        f"checkpoint benchmark after the steps: {', '.join(CHECKPOINTS)}",
    ),
    "nnodes": ("nnodes", _positive_int, "nodes each case spans; run the same command on every node"),
    "node-rank": ("node_rank", _non_negative_int, "this node's rank, 0..nnodes-1; node 0 writes the results"),
    "rdzv-endpoint": (
        "rdzv_endpoint",
        _text,
        "HOST:PORT on node 0 for the c10d rendezvous (needed with --bench-nnodes > 1)",
    ),
    "run-id": (
        "run_id",
        _text,
        "name of the run folder under --bench-results-dir, the same on every node (needed with --bench-nnodes > 1)",
    ),
    "mesh": ("mesh", _mesh, "hybrid strategies' REPLICATExSHARD mesh, e.g. 2x2"),
    "simulate-world-size": (
        "simulate_world_sizes",
        lambda o, r: tuple(_positive_int(o, s) for s in _split(o, r)),
        "simulate rank 0 of these world sizes on one device with a fake process group, "
        "e.g. 8,64 (memory measured, communication modelled)",
    ),
    "profile": (
        "profile",
        _switch,
        "profile 2 extra untimed steps per case with torch.profiler: communication "
        "(total, exposed), compute, optimizer and host time per step; TensorBoard trace in the case folder",
    ),
    "memory-snapshot": (
        "memory_snapshot",
        _switch,
        "CUDA only: record allocator history and write a memory_viz snapshot pickle per rank in the case folder",
    ),
    "no-probes": (
        "skip_probes",
        _switch,
        f"skip the untimed probe steps after the measured ones (up to {PROBE_STEPS} per case): "
        "no step parts (why), no FLOP counter (MFU still from the formula), no measured model state, no "
        "memory breakdown, and on CPU no peak memory; saves their time on big models",
    ),
    "repeats": (
        "repeats",
        _positive_int,
        "run each case this many times, each in a fresh torchrun; the step "
        "times of all repeats make the case's statistics, the report shows the spread between "
        "repeats",
    ),
    # Adaptive measurement (issue 25): self-contained, parsed by the shared number parsers.
    "target-ci-pct": (
        "target_ci_pct",
        _non_negative_float_value,
        "keep measuring steps past --bench-steps until the step-time median's confidence "
        "interval (results.stats.CONFIDENCE) is within +-PCT %, or --bench-measure-cap-s; 0 = exactly --bench-steps ",
    ),
    "measure-cap-s": (
        "measure_cap_s",
        _positive_float,
        "per case: measured seconds after which adaptive measurement stops short of its target",
    ),
    "gpu-name": (
        "gpu_name",
        _text,
        "GPU whose published peak FLOPs the duration estimate uses, e.g. H100, H200; lets "
        "`--collect-only` plan a CUDA sweep on a machine without one",
    ),
    "tune": (
        "tune",
        _switch,
        "autotune: instead of every case, one test per model that predicts every case's "
        "peak memory and step time, measures the promising ones in rounds and answers with the "
        "fastest that fits (docs/autotune.md); --bench-repeats is the most repeats a finalist gets",
    ),
    "budget-gib": (
        "budget_gib",
        _positive_gib,
        "with --bench-tune: memory budget per device in GiB (as "
        "visualize.py --budget-gib): cases predicted over it are skipped, and the pick's measured "
        "peak is within it",
    ),
    "tune-time-s": (
        "tune_time_s",
        _positive_float,
        "with --bench-tune: case-seconds after which the tuning stops and answers with what it measured",
    ),
    "allow-slow-cpu": (
        "allow_slow_cpu",
        _switch,
        "start a CPU sweep even when a case's first step is estimated "
        "over a minute (fsdp_bench/analysis/duration.py); without it such a sweep stops before any case",
    ),
    "allow-memory-overcommit": (
        "allow_memory_overcommit",
        _switch,
        "launch a case even when its processes are predicted "
        "to need more host memory than the machine has available (analysis/host_memory.py); "
        "without it such a case ends skipped, never launched, and the sweep goes on",
    ),
}

# Options that are switches: the pytest flag alone means "on" (`--bench-profile`); parse_sweep
# also takes on/off text for them (what the flag stores, and what other callers may pass).
# Defaults that are a rule rather than one value (the field holds None or ""), said in words;
# None: the option has no default to state.
_DEFAULT_IN_WORDS: dict[str, str | None] = {
    "nproc": "all GPUs on cuda, 2 on cpu",
    "data": "synthetic tokens",
    "mesh": "the node boundary",
    "run_id": "a new timestamped folder; under Slurm slurm-$SLURM_JOB_ID",
    "gpu_name": "the visible GPU, else H100 SXM",
    "results_dir": f"{Sweep.results_dir}/ in the project (pytest's rootdir), wherever pytest runs from",
    "target_ci_pct": f"{CPU_TARGET_CI_PCT:g} on CPU, 0 on CUDA",
    "rdzv_endpoint": None,
    "resume": None,
    "suite": None,
    "simulate_world_sizes": None,
    "budget_gib": "none",
    "tune_time_s": "none; the rounds end by themselves",
}


def default_text(field_name: str) -> str | None:
    """The default of a Sweep field (or `knobs.X`: of Case's X) as an option's help states it."""
    if field_name in _DEFAULT_IN_WORDS:
        return _DEFAULT_IN_WORDS[field_name]
    owner, _, name = field_name.rpartition(".")
    source = {f.name: f for f in fields(Case if owner == "knobs" else Sweep)}[name]
    value = source.default_factory() if source.default_factory is not MISSING else source.default
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def option_help(name: str) -> str:
    """An option's help with its default, generated from the dataclass that holds it."""
    field_name, _parse, text = OPTIONS[name]
    default = None if name in SWITCH_OPTIONS else default_text(field_name)
    return text.rstrip() if default is None else f"{text.rstrip()} (default: {default})"


SWITCH_OPTIONS = frozenset(
    {"profile", "memory-snapshot", "no-probes", "allow-slow-cpu", "allow-memory-overcommit", "tune"}
)


def bench_option_specs() -> list[tuple[str, dict[str, Any]]]:
    """Every `--bench-*` option as pytest's addoption takes it: (flag, keyword arguments). A
    switch is a plain flag: `--bench-profile` turns it on (an optional value would swallow a
    following test path); a display flag is a boolean."""
    specs = []
    for name in OPTIONS:
        switch = {"action": "store_const", "const": "on"} if name in SWITCH_OPTIONS else {}
        kwargs = {"dest": f"bench_{name.replace('-', '_')}", "default": None, **switch}
        specs.append((f"--bench-{name}", {**kwargs, "help": option_help(name).replace("%", "%%")}))
    for name, help_text in DISPLAY_OPTIONS.items():
        specs.append((f"--bench-{name}", {"action": "store_true", "default": False, "help": help_text}))
    return specs


def unknown_option_line(message: str) -> str | None:
    """For pytest's `unrecognized arguments: --bench-strategy ddp`, one line naming the closest
    `--bench-*` option (pytest's own message is a usage block naming none); None when no unknown
    argument is a `--bench-*` one, so pytest's message stands for the rest."""
    from difflib import get_close_matches

    unknown = [a.split("=", 1)[0] for a in message.split("unrecognized arguments:", 1)[-1].split()]
    unknown = [a for a in unknown if a.startswith("--bench")]
    if "unrecognized arguments:" not in message or not unknown:
        return None
    # Names compared without the prefix every one shares, which would make any two look close.
    known = [flag.removeprefix("--bench-") for flag, _ in bench_option_specs()]
    hints = []
    for flag in unknown:
        close = get_close_matches(flag.removeprefix("--bench-"), known, n=1, cutoff=0.6)
        hints.append(f"{flag}" + (f" (did you mean --bench-{close[0]}?)" if close else ""))
    return f"unknown option {', '.join(hints)}; `pytest --help` lists every --bench-* option"


# Flags about what the session writes and prints, not what the cases measure: not in Sweep's
# fingerprint, so a resume may change them.
DISPLAY_OPTIONS: dict[str, str] = {
    "no-report": "do not write the table and charts at the end of the session",
    "benchmark-table": "also print pytest-benchmark's timing tables (one per like-for-like group, wider than "
    "a terminal); off by default so the recommendation ends the output",
}


def parse_sweep(
    raw: Mapping[str, str | None], *, no_report: bool = False, plan_only: bool = False, root: Path | None = None
) -> Sweep:
    """A Sweep from option texts (None: not given). Raises CaseError naming the bad option.

    `plan_only` (pytest --collect-only): nothing will launch, so `--bench-device cuda` and its
    `--bench-nproc` are not checked against the GPUs of this machine; a sweep for a GPU node can
    be listed and its duration estimated anywhere. CPU ranks are checked as a run checks them: a
    CPU plan is one for this machine, and a plan the run then refuses answers nothing. `root` (pytest's rootdir, the project): the
    default results folder is under it, not under the working directory (`project_results_dir`)."""
    values: dict[str, Any] = {}
    knobs: dict[str, tuple[Any, ...]] = {}
    for name, (attr, parse, _help) in OPTIONS.items():
        text = raw.get(name)
        if text is not None:
            if attr.startswith("knobs."):
                knobs[attr.removeprefix("knobs.")] = parse(f"--bench-{name}", str(text))
            else:
                values[attr] = parse(f"--bench-{name}", str(text))
    values["knobs"] = knobs
    values["report"] = not no_report
    if root is not None and "results_dir" not in values:
        values["results_dir"] = project_results_dir(root, Sweep.results_dir)
    sweep = Sweep(**values)
    if not plan_only:
        _check_devices(sweep)
    elif resolve_device(sweep.device) == "cpu":  # a plan of CPU ranks is one for this machine, as a run is
        _check_cpu_ranks(sweep)
    sweep = _check_launch(sweep)
    _check_tune(sweep)
    _check_mesh(sweep)
    try:
        sweep.cases()
    except CaseError as exc:
        raise CaseError(f"--bench-* options: {exc}") from None
    return sweep


def project_results_dir(root: Path, default: Path) -> Path:
    """The default results folder, under the project's root whichever folder a command runs
    from: a sweep started elsewhere wrote `results/` there, and `visualize.py` back in the project
    found an older run (issue #39). Relative, as before, when the command runs in the root."""
    if default.is_absolute() or Path.cwd().resolve() == Path(root).resolve():
        return default
    return Path(root).resolve() / default


def _check_launch(sweep: Sweep) -> Sweep:
    try:
        launch = validate_launch(sweep.launch(), env=dict(os.environ))
    except LaunchError as exc:
        raise CaseError(str(exc)) from None
    if launch.multi_node and sweep.resume is not None:
        raise CaseError("--bench-resume: not supported with --bench-nnodes > 1 (every node must run the same cases)")
    if launch.multi_node and sweep.simulate_world_sizes:
        raise CaseError("--bench-simulate-world-size: runs on one device; drop --bench-nnodes")
    if sweep.run_id is not None and sweep.resume is not None:
        raise CaseError("--bench-run-id: names a new run folder; use --bench-resume alone to continue one")
    existing = sweep.results_dir / launch.run_id if launch.run_id else None
    taken = foreign_entries(existing) if existing is not None and launch.owns_results else []
    if taken:  # a named run never adopts a folder with files in it: it would overwrite them
        raise CaseError(
            f"--bench-run-id: {existing} already exists and holds {', '.join(taken[:3])}; choose a new run id"
        )
    return dataclasses.replace(sweep, run_id=launch.run_id)


def _check_mesh(sweep: Sweep) -> None:
    """A mesh that no case would use is refused: the user asked for a layout and would read
    results measured without it."""
    if not sweep.mesh:
        return
    if sweep.suite is not None:
        raise CaseError("--bench-mesh: sets the strategy sweep's hybrid mesh; a --bench-suite's cases keep their own")
    if not any(STRATEGIES[name].hybrid for name in sweep.strategies):
        hybrids = ", ".join(name for name, row in STRATEGIES.items() if row.hybrid)
        raise CaseError(f"--bench-mesh: only applies to hybrid strategies ({hybrids}); none is in --bench-strategies")


def _check_tune(sweep: Sweep) -> None:
    if not sweep.tune:
        if sweep.budget_gib is not None:
            raise CaseError(
                "--bench-budget-gib: only with --bench-tune (the report's budget: visualize.py --budget-gib)"
            )
        if sweep.tune_time_s is not None:
            raise CaseError(
                "--bench-tune-time-s: only with --bench-tune (the case-seconds after which the tuning stops)"
            )
        return
    if sweep.suite is not None or sweep.simulate_world_sizes or sweep.nnodes > 1:
        raise CaseError(
            "--bench-tune: tunes the strategy grid on this node; drop --bench-suite, "
            "--bench-simulate-world-size and --bench-nnodes"
        )


def _check_devices(sweep: Sweep) -> None:
    if sweep.device == "cuda" and count_cuda_devices() == 0:
        raise CaseError("--bench-device: cuda requested but no NVIDIA GPU is visible")
    if sweep.nproc is None:
        return
    if resolve_device(sweep.device) == "cuda":
        available = count_cuda_devices()
        if sweep.nproc > available:
            raise CaseError(f"--bench-nproc: {sweep.nproc} ranks requested but only {available} GPU(s) visible")
    else:
        _check_cpu_ranks(sweep)


def _check_cpu_ranks(sweep: Sweep) -> None:
    if sweep.nproc is not None and sweep.nproc > max_cpu_ranks():
        raise CaseError(
            f"--bench-nproc: {sweep.nproc} CPU ranks requested but at most {max_cpu_ranks()} "
            f"are allowed on this machine ({os.cpu_count()} cores; CPU ranks beyond the cores only time-slice)"
        )
