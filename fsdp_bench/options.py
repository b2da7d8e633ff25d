"""The `--bench-*` options: their defaults, parsing and validation into a `Sweep` (no torch).

Every error is a `CaseError` whose message starts with the option's name, so pytest can show it
as a one-line usage error.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from fsdp_bench.case import DEVICES, OPTIMIZER_TIMINGS, STRATEGIES, Case, CaseError, Grid, expand_grid
from fsdp_bench.models.flavors import MODEL_FLAVORS, is_hf_path

_CASE_DEFAULTS = {f.name: f.default for f in fields(Case) if f.name != "strategy"}


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """A validated sweep: the grid axes, the shared case settings and how to run them."""

    strategies: tuple[str, ...] = tuple(STRATEGIES)
    batch_sizes: tuple[int, ...] = (2, 4)
    grad_accums: tuple[int, ...] = (1, 2)
    optimizer_timings: tuple[str, ...] = ("after_shard",)
    models: tuple[str, ...] = (_CASE_DEFAULTS["model"],)
    device: str = "auto"  # resolved to cpu/cuda by `resolve_device`
    nproc: int | None = None  # None: all GPUs on cuda, 2 ranks on cpu
    steps: int = _CASE_DEFAULTS["steps"]
    warmup: int = _CASE_DEFAULTS["warmup"]
    seq_len: int = _CASE_DEFAULTS["seq_len"]
    timeout_s: float = 600.0
    results_dir: Path = Path("results")
    resume: Path | None = None
    report: bool = True
    profile: bool = _CASE_DEFAULTS["profile"]
    memory_snapshot: bool = _CASE_DEFAULTS["memory_snapshot"]
    extra: Mapping[str, Any] = field(default_factory=dict)

    def process_group_timeout_s(self) -> float:
        """Collectives must time out before the case does, so a hang ends as a rank error."""
        return max(5.0, min(_CASE_DEFAULTS["pg_timeout_s"], self.timeout_s * 0.5))

    def grids(self, device: str, nproc: int) -> list[Grid]:
        return [
            Grid(
                strategies=self.strategies, batch_sizes=self.batch_sizes, grad_accums=self.grad_accums,
                optimizer_timings=self.optimizer_timings,
                base={"model": model, "seq_len": self.seq_len, "steps": self.steps, "warmup": self.warmup,
                      "device": device, "nproc": nproc, "pg_timeout_s": self.process_group_timeout_s(),
                      "profile": self.profile, "memory_snapshot": self.memory_snapshot, **self.extra},
            )
            for model in self.models
        ]

    def cases(self) -> list[Case]:
        device = resolve_device(self.device)
        nproc = resolve_nproc(self.nproc, device)
        return [case for grid in self.grids(device, nproc) for case in expand_grid(grid)]


# --- device discovery without torch -------------------------------------------------------------

def count_cuda_devices() -> int:
    """Visible NVIDIA GPUs, read without importing torch or touching CUDA."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir():
        return len(list(gpus.iterdir()))
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if count_cuda_devices() > 0 else "cpu"
    return device


def resolve_nproc(nproc: int | None, device: str) -> int:
    if nproc is not None:
        return nproc
    return max(1, count_cuda_devices()) if device == "cuda" else 2


# --- parsing ----------------------------------------------------------------------------------

def _split(option: str, raw: str) -> list[str]:
    items = [s.strip() for s in raw.split(",") if s.strip()]
    if not items:
        raise CaseError(f"{option}: empty list")
    return items


def _positive_int(option: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise CaseError(f"{option}: {text!r} is not a positive integer") from None
    if value < 1:
        raise CaseError(f"{option}: {text!r} is not a positive integer")
    return value


def _non_negative_int(option: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise CaseError(f"{option}: {text!r} is not a non-negative integer")
    return value


def _positive_float(option: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CaseError(f"{option}: {text!r} is not a positive number of seconds")
    return value


def _names(option: str, raw: str, known: Mapping[str, Any] | tuple[str, ...]) -> tuple[str, ...]:
    names = _split(option, raw)
    for name in names:
        if name not in known:
            raise CaseError(f"{option}: unknown value {name!r}; choose from {', '.join(known)}")
    return tuple(dict.fromkeys(names))


def _models(option: str, raw: str) -> tuple[str, ...]:
    names = _split(option, raw)
    for name in names:
        if name not in MODEL_FLAVORS and not is_hf_path(name):
            raise CaseError(f"{option}: unknown model {name!r}; choose from {', '.join(MODEL_FLAVORS)} or hf:PATH")
    return tuple(dict.fromkeys(names))


_TRUE, _FALSE = ("on", "true", "yes", "1"), ("off", "false", "no", "0")


def _switch(option: str, text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise CaseError(f"{option}: {text!r} is not on/off (give the flag alone to turn it on)")


def _writable_dir(option: str, raw: str) -> Path:
    path = Path(raw)
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        raise CaseError(f"{option}: {raw!r} is not a writable folder")
    return path


def _existing_run(option: str, raw: str) -> Path:
    path = Path(raw)
    if not (path / "cases").is_dir():
        raise CaseError(f"{option}: {raw!r} is not a run folder (no cases/ inside)")
    return path


# option name (without --bench-) -> (Sweep field, parser, help)
OPTIONS: dict[str, tuple[str, Callable[[str, str], Any], str]] = {
    "strategies": ("strategies", lambda o, r: _names(o, r, STRATEGIES),
                   f"comma list of strategies (default: all): {', '.join(STRATEGIES)}"),
    "batch-sizes": ("batch_sizes", lambda o, r: tuple(_positive_int(o, s) for s in _split(o, r)),
                    f"per-device micro-batch sizes (default: {','.join(map(str, Sweep.batch_sizes))})"),
    "grad-accum": ("grad_accums", lambda o, r: tuple(_positive_int(o, s) for s in _split(o, r)),
                   f"gradient accumulation steps (default: {','.join(map(str, Sweep.grad_accums))})"),
    "optimizer-timing": ("optimizer_timings", lambda o, r: _names(o, r, OPTIMIZER_TIMINGS),
                         f"when the optimizer is built: {', '.join(OPTIMIZER_TIMINGS)} (default: after_shard)"),
    "model": ("models", _models, f"model flavor(s) (default: {Sweep.models[0]}): {', '.join(MODEL_FLAVORS)}, hf:PATH"),
    "nproc": ("nproc", _positive_int, "ranks per case (default: all GPUs on cuda, 2 on cpu)"),
    "steps": ("steps", _positive_int, f"measured optimizer steps (default: {Sweep.steps})"),
    "warmup": ("warmup", _non_negative_int, f"warmup steps excluded from statistics (default: {Sweep.warmup})"),
    "seq-len": ("seq_len", _positive_int, f"tokens per sample (default: {Sweep.seq_len})"),
    "device": ("device", lambda o, r: _names(o, r, ("auto", *DEVICES))[0], "auto, cpu or cuda (default: auto)"),
    "timeout": ("timeout_s", _positive_float, f"seconds per case before it is stopped (default: {Sweep.timeout_s:g})"),
    "results-dir": ("results_dir", _writable_dir, "where run folders are created (default: results)"),
    "resume": ("resume", _existing_run, "continue this run folder: keep its ok cases, re-run the rest"),
    "profile": ("profile", _switch, "profile 2 extra untimed steps per case with torch.profiler: communication "
                "(total, exposed), compute, optimizer and host time per step; TensorBoard trace in the case folder"),
    "memory-snapshot": ("memory_snapshot", _switch, "CUDA only: record allocator history and write a "
                        "memory_viz snapshot pickle per rank in the case folder"),
}

# Options that are switches: the pytest flag alone means "on" (`--bench-profile`); parse_sweep
# also takes on/off text for them (what the flag stores, and what other callers may pass).
SWITCH_OPTIONS = frozenset({"profile", "memory-snapshot"})


def parse_sweep(raw: Mapping[str, str | None], *, no_report: bool = False) -> Sweep:
    """A Sweep from option texts (None: not given). Raises CaseError naming the bad option."""
    values: dict[str, Any] = {}
    for name, (attr, parse, _help) in OPTIONS.items():
        text = raw.get(name)
        if text is not None:
            values[attr] = parse(f"--bench-{name}", str(text))
    values["report"] = not no_report
    sweep = Sweep(**values)
    _check_devices(sweep)
    try:
        sweep.cases()
    except CaseError as exc:
        raise CaseError(f"--bench-* options: {exc}") from None
    return sweep


def _check_devices(sweep: Sweep) -> None:
    if sweep.device == "cuda" and count_cuda_devices() == 0:
        raise CaseError("--bench-device: cuda requested but no NVIDIA GPU is visible")
    if resolve_device(sweep.device) == "cuda" and sweep.nproc is not None:
        available = count_cuda_devices()
        if sweep.nproc > available:
            raise CaseError(f"--bench-nproc: {sweep.nproc} ranks requested but only {available} GPU(s) visible")
