"""How long a sweep will take, estimated before its first case starts (pure, no torch).

A case costs a fixed start-up (torchrun, imports, process group, model build, result merge) plus
its optimizer steps: warmup + measured + the untimed probe steps (FLOP counter and MemTracker,
each slower than a plain step) + the profiled steps when profiling. One optimizer step costs

    step_s = flops_per_token x tokens per rank per step / device FLOP/s + overhead per micro-step

with the one FLOPs formula of `analysis.flops` (6 N + 12 L H Q T; here N is every parameter,
embeddings included: an upper bound, so the estimate errs long).

The device rates are documented figures, not measurements of this machine:
- CPU: 10 GFLOP/s per rank. CPU ranks run one thread each (OMP_NUM_THREADS=1). On the project's
  2-core x86 VM GPT-2 124M at 2 x 1024 tokens per rank took 129 s for its first step (reported in
  issue 16), 13.6 GFLOP/s; 10 rounds that down, so CPU estimates err long.
- CUDA: 20 TFLOP/s per GPU, a conservative fp32/bf16 mix for the GPUs in the peak table; the
  estimate is a hint of the order of magnitude on GPUs.
The fixed cost per case on CPU is 5 s: 3.5 s measured on the quiet 2-core VM (launch 2.0 s,
setup 1.0 s of which torch._dynamo's import is most, exit 0.1 s, pytest's share 0.4 s; see
scripts/measure_sweep_cost.py), about twice that when the machine is loaded. The overhead per
micro-step (50 ms on CPU; tiny models' steps take 10-70 ms) was read off tiny sweeps (gpt_tiny,
2 gloo ranks) on the same VM. A model between tiny and GPT-2 runs faster than 10 GFLOP/s on CPU
(gpt_small: 0.41 s measured for a 1.5 s estimate), so estimates for such models err long too.

The guard: on CPU, a case whose FIRST optimizer step is estimated over FIRST_STEP_LIMIT_S is a
mistake far more often than a plan (a GPU-sized model left on the CPU default), so the sweep
refuses to start unless `--bench-allow-slow-cpu` is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

from fsdp_bench.analysis.comm_model import model_units
from fsdp_bench.analysis.flops import flops_per_token
from fsdp_bench.analysis.hf_units import hf_dims
from fsdp_bench.plan.case import PROFILED_STEPS, PROFILER_WARMUP_STEPS, Case
from fsdp_bench.plan.flavors import flavor_for, load_config_dict

DEVICE_FLOPS = {"cpu": 10e9, "cuda": 20e12}  # per rank, see the module docstring
CASE_FIXED_S = {"cpu": 5.0, "cuda": 20.0}  # start-up and teardown of one case's process tree
MICRO_STEP_OVERHEAD_S = {"cpu": 0.05, "cuda": 0.01}  # Python, collectives and optimizer per micro-step
PROBE_STEP_EQUIVALENTS = 3  # FLOP-counter step + MemTracker step (about twice a plain one)
FIRST_STEP_LIMIT_S = 60.0  # CPU: a first step estimated longer than this stops the sweep


def case_flops_per_token(case: Case) -> int:
    """Training FLOPs per token of the case's model at its sequence length (embeddings counted)."""
    flavor = flavor_for(case.model)
    n_params = sum(unit.numel for unit in model_units(flavor))
    c = flavor.config
    if flavor.family == "gpt":
        layers, width = c["n_layer"], c["n_embd"]
    elif flavor.family == "hf":
        dims = hf_dims(load_config_dict(flavor))
        layers, width = dims["layers"], dims["hidden"]
    else:  # linear stacks have no attention
        layers, width = 0, 0
    return flops_per_token(n_matmul_params=n_params, n_layers=layers, n_heads=1, head_dim=width,
                           seq_len=case.seq_len)


def rank_flops(case: Case, cpu_count: int | None = None) -> float:
    """The FLOP/s one rank gets: the device's rate, shared when a CPU has fewer cores than the
    case has ranks (4 gloo ranks on 2 cores run at half speed each)."""
    if case.device in DEVICE_FLOPS and case.device != "cpu":
        return DEVICE_FLOPS[case.device]
    ranks_here = 1 if case.simulate else case.nproc
    cores = cpu_count or os.cpu_count() or 1
    return DEVICE_FLOPS["cpu"] * min(1.0, cores / ranks_here)


def step_seconds(case: Case) -> float:
    """One optimizer step of one rank: every micro-batch's FLOPs at the device rate, plus overhead."""
    device = case.device if case.device in DEVICE_FLOPS else "cpu"
    tokens = case.batch_size * case.grad_accum * case.seq_len
    compute = case_flops_per_token(case) * tokens / rank_flops(case)
    return compute + case.grad_accum * MICRO_STEP_OVERHEAD_S[device]


def case_seconds(case: Case) -> float:
    """The whole case: start-up plus warmup, measured, probe and profiled steps."""
    probes = PROBE_STEP_EQUIVALENTS if case.probes else 0
    steps = case.warmup + case.steps + probes + (PROFILED_STEPS + PROFILER_WARMUP_STEPS if case.profile else 0)
    return fixed_seconds(case) + steps * step_seconds(case)


def fixed_seconds(case: Case) -> float:
    """A case's start-up and teardown on its device (an unknown device counts as a CPU)."""
    return CASE_FIXED_S.get(case.device, CASE_FIXED_S["cpu"])


@dataclass(frozen=True)
class SweepEstimate:
    cases: int
    repeats: int
    total_s: float
    slowest_case: Case | None
    slowest_first_step_s: float


def estimate_sweep(cases: Iterable[Case], repeats: int = 1) -> SweepEstimate:
    """Every case run `repeats` times; the case with the slowest first step, for the guard.
    A model whose shapes are unknown (an unsupported hf:PATH) counts only its fixed cost."""
    total, slowest, slowest_s, n = 0.0, None, 0.0, 0
    for case in cases:
        n += 1
        try:
            first = step_seconds(case)
            seconds = case_seconds(case)
        except (ValueError, KeyError, OSError):
            first, seconds = 0.0, fixed_seconds(case)
        total += seconds * repeats
        if slowest is None or first > slowest_s:
            slowest, slowest_s = case, first
    return SweepEstimate(cases=n, repeats=repeats, total_s=total, slowest_case=slowest, slowest_first_step_s=slowest_s)


def format_duration(seconds: float) -> str:
    """`1m05s`, or `2h03m` from an hour on."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def estimate_line(estimate: SweepEstimate) -> str:
    """`fsdp-bench: estimated duration 0m34s for 4 case(s) (slowest first step ~0.05 s: CASE); ...`."""
    line = f"fsdp-bench: estimated duration {format_duration(estimate.total_s)} for {estimate.cases} case(s)"
    if estimate.repeats > 1:
        line += f" x {estimate.repeats} repeats"
    if estimate.slowest_case is not None:
        first = estimate.slowest_first_step_s
        line += f" (slowest first step ~{first:.2g} s: {estimate.slowest_case.id})" if first < 10 else \
            f" (slowest first step ~{first:.0f} s: {estimate.slowest_case.id})"
    return line + "; a rough figure from model FLOPs, see fsdp_bench/analysis/duration.py"


def slow_cpu_line(estimate: SweepEstimate, limit_s: float = FIRST_STEP_LIMIT_S) -> str | None:
    """The one line that stops a CPU sweep whose first step would take over `limit_s`, else None."""
    case = estimate.slowest_case
    if case is None or case.device != "cpu" or estimate.slowest_first_step_s <= limit_s:
        return None
    return (f"fsdp-bench: refusing to start on CPU: {case.model} at seq len {case.seq_len} "
            f"(case {case.id}) needs ~{estimate.slowest_first_step_s:.0f} s for its first step alone "
            f"(limit {limit_s:.0f} s); use a smaller model or --bench-seq-len, run on a GPU, "
            "or pass --bench-allow-slow-cpu to run it anyway")
