"""How long a sweep will take, estimated before its first case starts (pure, no torch).

A case costs a fixed start-up (torchrun, imports, process group, model build, result merge) plus
its optimizer steps: warmup + measured + the untimed probe steps (FLOP counter and MemTracker,
each slower than a plain step) + the profiled steps when profiling, plus what runs between the
steps of the timed loop: STEP_BOOKKEEPING_S per warmup and measured step, and the update norms of
the warmup steps (`Case.update_norm_steps`: a host copy of the rank's local parameters each,
UPDATE_NORM_S_PER_PARAM, and the first one's host buffers, UPDATE_NORM_BUFFERS_S_PER_PARAM).
One optimizer step costs

    step_s = flops_per_token x tokens per rank per step x recompute / device FLOP/s
             + overhead per micro-step + host optimizer step (offloaded strategies)

with the one FLOPs formula of `analysis.flops` (6 N + 12 L H Q T; here N is every parameter,
embeddings included: an upper bound, so the estimate errs long). Activation checkpointing runs
every forward twice: recompute = 8/6 of the step's FLOPs.

The device rates are published or documented figures, not measurements of this machine, so a
sweep for a GPU can be planned on a machine without one:
- CPU: 10 GFLOP/s per rank. CPU ranks run one thread each (OMP_NUM_THREADS=1). On the project's
  2-core x86 VM GPT-2 124M at 2 x 1024 tokens per rank took 129 s for its first step (reported in
  issue 16), 13.6 GFLOP/s; 10 rounds that down, so CPU estimates err long.
- CUDA: the GPU's dense datasheet peak for the case's precision (the one peak-FLOPs table,
  `analysis.flops.PEAK_TFLOPS`) x CUDA_PEAK_FRACTION. The GPU is the one named by
  `--bench-gpu-name`, else the visible one, else DEFAULT_GPU_NAME (H100 SXM). 25% is an assumed
  model FLOPs utilization for the project's models on one GPU (nanoGPT and torchtitan report
  30-50% for tuned, compiled runs; small eager cases reach less), so GPU estimates lean long: on
  the H100 (2026-11-26) GPT-2 124M bf16 stepped in 0.052-0.055 s at batch 8 (estimated 0.068 s)
  and 0.095-0.106 s at batch 32 (0.154 s), llama3_1b at batch 8 x 2048 in 0.361 s eager (0.584 s).
The fixed cost per case on CPU is 9 s at a probe of REFERENCE_GFLOPS, and scales as the square
root of the probe's slowdown (STARTUP_EXPONENT; `Calibration.startup_scale`). Once 5 s, scaled
linearly: the launch, setup and exit of seven default-sized CPU sweeps (results/reference/
cpu-sweeps, cpu-why-quiet, cpu-readme-example and a 2-case sweep of 2026-11-29) took 1.7-2.2x
that on quiet and people-loaded machines, but 1.15x under two busy loops, whose matmul probe (18
GFLOP/s) they slowed far more than imports; against the square root the seven ratios spread
7.7-12.4 s (linear: 5.8-10.9), 9 their middle. A Hugging Face flavor adds HF_BUILD_S (transformers'
import and model classes: llama3_tiny's setup took 5.1 s a case against gpt_tiny's 2.7 s). Held out
(2026-11-29, results/reference/cpu-estimate): gpt2_tiny x 6 quiet, 2m20s estimated for 2m30s;
gpt_tiny x 6 beside two busy loops, 2m21s for 2m32s (the 5 s figure: 1m36s and 1m52s). The
overhead per micro-step (50 ms on CPU; tiny models' steps take 10-70 ms) was read off tiny sweeps
(gpt_tiny, 2 gloo ranks) on the same VM, so it holds their bookkeeping between steps too
(STEP_BOOKKEEPING_S is 0 on CPU). A sweep adds SESSION_S once: pytest's own start and the report
at its end, on CPU 10 s scaled as the start-up (8.8 s for a 2-case sweep and 11.9 s for the
24-case README example at a scale of 0.8-0.9, 2026-11-29; the report draws a dozen charts); on
CUDA 5 s, the figure the constants below were fitted with (7.0-7.6 s measured on the H100
machine). A model between tiny and GPT-2 runs faster than 10 GFLOP/s on CPU (gpt_small: 0.41 s
measured for a 1.5 s estimate), so estimates for such models err long too.

The CUDA constants are read off the H100 runs of 2026-11-26 (results/reference/NVIDIA-H100-80GB-HBM3,
each case's `time_*_s` split and its rank records' stage and step times; the 2026-11-24 runs took
an update norm on every step and are not comparable). Fitted on part3's six GPT-2 124M bf16 cases
and part5's eager llama3_1b case; part7's five GPT-2 cases (9 runs) and part5's compiled case held out:
- CASE_FIXED_S 15 s: launch + setup + exit 12.5-15.9 s per GPT-2 case (median 13.3), less the model
  build that SETUP_S_PER_PARAM counts (1.2 s), plus the first step's one-off CUDA start (cuBLAS,
  kernel loading: step 0 took 1.4-2.2 s more than a measured step, llama3_1b eager 1.6 s) and the
  probe steps' own start (0.53-0.79 s beyond three plain steps: FlopCounterMode and MemTracker):
  14.4 s, rounded up. The first lease (2026-11-24) took 16.5-22.7 s for the same launch + setup +
  exit of a one-rank GPT-2 case (launch 8.3-11.6 s): a machine in that state runs longer than this.
- SETUP_S_PER_PARAM 1e-8 s: llama3_1b's launch + setup + exit took 23.9 s, 10.6 s more than GPT-2's
  for 1.11 B more parameters (transformers' build on the meta device, every shard materialized
  with its seeded values).
- UPDATE_NORM_S_PER_PARAM 1e-9 s: a warmup step's gap beyond its step time was 0.11-0.13 s for
  GPT-2 124M (124.5 M local parameters); UPDATE_NORM_BUFFERS_S_PER_PARAM 5e-9 s: the first norm
  took 0.67-1.08 s (its pinned host buffers, 2 x 0.5 GB; an offloaded model's parameters, already
  on the host, 0.13-0.15 s: the estimate errs long there). llama3_1b's 4.9 GB of local parameters
  are above UPDATE_NORM_MAX_BYTES: no norms. CPU (2-core VM, probe at about 130 GFLOP/s, start-up
  x0.5): 0.28 s per GPT-2 124M norm, so 4.5e-9 s per parameter at REFERENCE_GFLOPS; its buffers
  0.14 s on a loaded VM (1e-9).
- STEP_BOOKKEEPING_S 2.5 ms: llama3_1b bs8 (no norms) spent 0.04-0.05 s of its measure stage
  outside its 20 timed steps, 1-2 ms per warmup step.
With these the part3 sweep's six cases estimate at 2m23s for its measured 2m09s (+7% in cases;
was 2m53s), the held-out part7 runs at +6% (-2% to +15% per case) and the llama3_1b eager +
compiled pair at 1m43s for its 89 s (+19% in cases, the step estimate's; was 2m17s);
tests/unit/test_duration_constants.py holds these to the files.

torch.compile adds COMPILE_S per case (every case is a fresh process, so every case compiles;
on the H100 llama3_1b bs8 compiled took 10.6 s more than eager in setup and first step, 2026-11-26); an offloaded strategy pays OFFLOAD_S_PER_PARAM per parameter and step
(host AdamW plus the copies over PCIe: 0.25 s for GPT-2 124M on the H100 machine). Assumed, not
measured: writing a memory snapshot or a profiler trace adds ARTIFACT_S.

Calibrated at the start of a sweep (`Calibration`, from the facts the env.json reader measures
in its own process while pytest collects, so no extra torch import): a 0.25 s single-thread
matmul probe (`cpu_matmul_gflops` in env.json) measures what one process gets of this CPU now,
load included. The CPU rate per rank is CPU_MATMUL_EFFICIENCY x that rate, and the CPU costs
that are not FLOPs (the fixed cost per case: imports, process group, model build; the overhead
per micro-step) scale with REFERENCE_GFLOPS / that rate. REFERENCE_GFLOPS was fitted on the
default sweep (24 gpt_tiny cases) on the shared 2-core VM: 14.5 s per case at a probe of
20.5 GFLOP/s (load average 10).

The load (issue #39): a 0.25 s probe on a machine whose load swings within seconds can land in a
quiet moment; two default sweeps at load 6-10 then took 38-43% longer than estimated (README).
The probe also counts the runnable tasks beside it (`cpu_probe_runnable`), and its rate is cut to
the share of a core the 1-minute load average leaves one process (load_factor), where the probe
saw less contention than that. LOAD_CPU_BOUND, how much of the load average competes as busy
loops would, was fitted on those two sweeps, assuming their probes ran alone (the runnable count
was not recorded then; they read 46 GFLOP/s, about REFERENCE_GFLOPS): they took 1.62-1.77x their
estimates at load 6-10, so 2 / (1 + 0.3 x 7.5) = 0.62. Checked on this version's sweeps
(results/reference/cpu-sweeps, README): quiet +0%, a steady burner at load 4-11 -8%, but other
engineers' work at load 7-11 -34%, where the probe did see the contention (12 runnable tasks) and
still read 37 GFLOP/s, against 137-156 on the quiet machine that day.

Without the facts (--collect-only, a reader that failed) the fixed figures above are used. A resumed run counts only the cases it will run.

The guard: on CPU, a case whose FIRST optimizer step is estimated over FIRST_STEP_LIMIT_S is a
mistake far more often than a plan (a GPU-sized model left on the CPU default), so the sweep
refuses to start unless `--bench-allow-slow-cpu` is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from fsdp_bench.analysis.adaptive import max_measured_steps
from fsdp_bench.analysis.comm_model import model_units
from fsdp_bench.analysis.flops import PEAK_TFLOPS, flops_per_token, lookup_peak_tflops
from fsdp_bench.analysis.hf_units import attention_layers_and_width
from fsdp_bench.plan.case import (
    PARTS_PROBE_STEPS,
    PROFILED_PEAK_STEPS,
    PROFILED_STEPS,
    PROFILER_WARMUP_STEPS,
    UPDATE_NORM_MAX_BYTES,
    Case,
)
from fsdp_bench.plan.catalog import precision as precision_row
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.plan.flavors import MODEL_FLAVORS, flavor_for, is_hf_path

CPU_FLOPS = 10e9  # per rank, see the module docstring
DEFAULT_GPU_NAME = "H100 SXM"  # whose figures a CUDA estimate uses when no GPU is named or visible
CUDA_PEAK_FRACTION = 0.25  # assumed model FLOPs utilization on one GPU, see the module docstring
# CUDA figures from the H100 runs of 2026-11-26: see the module docstring.
CASE_FIXED_S = {"cpu": 9.0, "cuda": 15.0}  # start-up and teardown of one case's process tree
SETUP_S_PER_PARAM = {"cpu": 0.0, "cuda": 1e-8}  # building and placing the model, beyond CASE_FIXED_S
# importing transformers and building its model class, per case of a Hugging Face flavor (CPU: see the
# module docstring; on CUDA inside CASE_FIXED_S and SETUP_S_PER_PARAM, fitted on GPT-2 and llama3_1b)
HF_BUILD_S = {"cpu": 3.0, "cuda": 0.0}
MICRO_STEP_OVERHEAD_S = {"cpu": 0.05, "cuda": 0.04}  # Python, kernel launches, collectives per micro-step
STEP_BOOKKEEPING_S = {"cpu": 0.0, "cuda": 0.0025}  # between two steps of the timed loop (CPU: in the above)
UPDATE_NORM_S_PER_PARAM = {"cpu": 4.5e-9, "cuda": 1e-9}  # one update norm, per local parameter
UPDATE_NORM_BUFFERS_S_PER_PARAM = {"cpu": 1e-9, "cuda": 5e-9}  # the first norm's host buffers (pinned on CUDA)
COMPILE_S = {"cpu": 30.0, "cuda": 10.0}  # torch.compile of the blocks, forward and backward, per case
# host AdamW and the copies over PCIe, per parameter and step: on the H100 reference machine (16
# cores) fsdp2_offload stepped GPT-2 124M 0.245 s slower than fsdp2 (bs4, bf16): 2 ns per parameter
OFFLOAD_S_PER_PARAM = 2e-9
ARTIFACT_S = 10.0  # writing one memory snapshot pickle or one profiler trace
RECOMPUTE = 8 / 6  # activation checkpointing: forward twice, then backward
SESSION_S = {"cpu": 10.0, "cuda": 5.0}  # pytest's start and the table and charts at the end, once per sweep
PROBE_STEP_EQUIVALENTS = 3 + PARTS_PROBE_STEPS  # FLOP-counter + MemTracker steps (3 plain ones), the step-parts probe
FIRST_STEP_LIMIT_S = 60.0  # CPU: a first step estimated longer than this stops the sweep
CPU_MATMUL_EFFICIENCY = 0.5  # training FLOP/s per rank / single-thread 256x256 matmul FLOP/s (see Calibration)
REFERENCE_GFLOPS = 48.0  # the probe's rate at which the CPU's fixed, per-micro-step and norm figures hold
LOAD_CPU_BOUND = 0.3  # the load average's tasks, as busy loops would compete for a core (Calibration)
STARTUP_EXPONENT = 0.5  # a case's start-up slows as the square root of the probe's rate (Calibration)


@dataclass(frozen=True)
class Calibration:
    """This machine's speed now, as the estimate uses it: FLOP/s of one CPU rank and a factor
    on the CPU's costs that are not FLOPs (1 = a probe at REFERENCE_GFLOPS). `load_factor`: the
    share of the probe's rate the load average says a process keeps over the sweep (1: none lost;
    see load_factor)."""

    cpu_flops: float = CPU_FLOPS
    fixed_scale: float = 1.0
    measured: bool = False
    load_factor: float = 1.0
    load_average: float | None = None
    startup_scale: float = 1.0  # the case's start-up: sqrt(REFERENCE_GFLOPS / rate), see STARTUP_EXPONENT

    @classmethod
    def from_facts(cls, facts: dict, load_average: float | None = None, cpus: int | None = None) -> Calibration:
        """From the env.json reader's `cpu_matmul_gflops` (and `cpu_probe_runnable`) and the
        load average now; the fixed figures without the probe."""
        gflops = facts.get("cpu_matmul_gflops")
        if not (isinstance(gflops, (int, float)) and gflops > 0):
            return cls()
        runnable = facts.get("cpu_probe_runnable")
        factor = 1.0
        if load_average is not None and cpus:
            factor = load_factor(load_average, cpus, runnable if isinstance(runnable, (int, float)) else None)
        rate = gflops * factor
        return cls(
            cpu_flops=rate * 1e9 * CPU_MATMUL_EFFICIENCY,
            fixed_scale=max(0.5, REFERENCE_GFLOPS / rate),
            measured=True,
            load_factor=factor,
            load_average=load_average,
            startup_scale=(REFERENCE_GFLOPS / rate) ** STARTUP_EXPONENT,
        )


def load_factor(load_average: float, cpus: int, probe_runnable: float | None) -> float:
    """The share of the probe's rate a process keeps over the coming sweep: the share of a core
    the load average leaves one process, min(1, cpus / (1 + LOAD_CPU_BOUND x load)), against the
    share the probe got while it ran, min(1, cpus / runnable tasks then) (1 where unknown), never
    above 1. A probe that ran among as many busy tasks as the load average says keeps its rate;
    one that landed in a quiet moment of a busy machine is slowed to what the last minute had."""
    ahead = min(1.0, cpus / (1.0 + LOAD_CPU_BOUND * max(0.0, load_average)))
    probe = min(1.0, cpus / probe_runnable) if probe_runnable and probe_runnable > 0 else 1.0
    return min(1.0, ahead / probe)


FIXED = Calibration()


def gpu_names() -> tuple[str, ...]:
    """The GPUs whose published figures an estimate can use (the peak table's rows)."""
    return tuple(peak.name for _, peak in PEAK_TFLOPS)


def check_gpu_name(name: str) -> str:
    """`name` if the peak table knows it (matched as the worker matches a device name); else a
    ValueError whose one line lists the known names."""
    peak, _why = lookup_peak_tflops(name, "float32")
    if peak is None:
        raise ValueError(
            f"--bench-gpu-name: {name!r} is not in the peak-FLOPs table "
            f"(fsdp_bench/analysis/flops.py); choose from {', '.join(gpu_names())}"
        )
    return name


def cuda_flops(gpu_name: str, precision: str) -> float:
    """FLOP/s one GPU is assumed to reach: its dense peak for the precision x CUDA_PEAK_FRACTION.
    A GPU without a tensor-core peak for the dtype (V100 has no bf16) counts at its fp32 rate."""
    peak, _why = lookup_peak_tflops(gpu_name, precision_row(precision).dtype)
    if peak is None:
        peak, _why = lookup_peak_tflops(gpu_name, "float32")
    if peak is None:
        check_gpu_name(gpu_name)  # raises with the known names
    return peak * 1e12 * CUDA_PEAK_FRACTION


def case_flops_per_token(case: Case) -> int:
    """Training FLOPs per token of the case's model at its sequence length (embeddings counted)."""
    flavor = flavor_for(case.model)
    n_params = sum(unit.numel for unit in model_units(flavor))
    layers, width = attention_layers_and_width(flavor)
    return flops_per_token(n_matmul_params=n_params, n_layers=layers, n_heads=1, head_dim=width, seq_len=case.seq_len)


def case_params(case: Case) -> int:
    """Every parameter of the case's model (what an offloaded optimizer steps on the host)."""
    return sum(unit.numel for unit in model_units(flavor_for(case.model)))


def rank_flops(
    case: Case, cpu_count: int | None = None, gpu_name: str = DEFAULT_GPU_NAME, calibration: Calibration = FIXED
) -> float:
    """The FLOP/s one rank gets: the GPU's assumed rate, or on CPU the calibrated rate shared
    when a CPU has fewer cores than the case has ranks (4 gloo ranks on 2 cores run at half speed)."""
    if case.device == "cuda":
        return cuda_flops(gpu_name, case.precision)
    ranks_here = 1 if case.simulate else case.nproc
    cores = cpu_count or os.cpu_count() or 1
    return calibration.cpu_flops * min(1.0, cores / ranks_here)


def _device(case: Case) -> str:
    return case.device if case.device in CASE_FIXED_S else "cpu"


def step_seconds(case: Case, gpu_name: str = DEFAULT_GPU_NAME, calibration: Calibration = FIXED) -> float:
    """One optimizer step of one rank: every micro-batch's FLOPs at the device rate (forward twice
    under activation checkpointing), overhead per micro-step, and an offloaded host optimizer."""
    tokens = case.batch_size * case.grad_accum * case.seq_len
    compute = case_flops_per_token(case) * tokens / rank_flops(case, gpu_name=gpu_name, calibration=calibration)
    if case.act_ckpt:
        compute *= RECOMPUTE
    host = OFFLOAD_S_PER_PARAM * case_params(case) if catalog_strategy(case.strategy).offload else 0.0
    device = _device(case)
    overhead = MICRO_STEP_OVERHEAD_S[device] * (calibration.fixed_scale if device == "cpu" else 1.0)
    return compute + case.grad_accum * overhead + host


def probe_step_equivalents(case: Case) -> int:
    """The untimed probe steps a case runs, in plain steps: none without probes; a simulated case
    has no step-parts probe (worker.probes: its peers' collectives are fakes that take no time);
    FSDP1 off CUDA adds its profiled peak's steps (MemTracker refuses it)."""
    if not case.probes:
        return 0
    refused = catalog_strategy(case.strategy).memtracker_refuses
    profiled = PROFILED_PEAK_STEPS if case.device != "cuda" and refused else 0
    return PROBE_STEP_EQUIVALENTS - (PARTS_PROBE_STEPS if case.simulate else 0) + profiled


def case_seconds(case: Case, gpu_name: str = DEFAULT_GPU_NAME, calibration: Calibration = FIXED) -> float:
    """The whole case: start-up plus warmup, measured, probe and profiled steps, the update norms
    and the bookkeeping that runs between steps. With adaptive measurement (`case.target_ci_pct`)
    the measured steps are counted at their most: up to the case's time cap or MAX_STEPS steps,
    never fewer than `case.steps` (so the estimate errs long)."""
    step = step_seconds(case, gpu_name, calibration)
    untimed = probe_step_equivalents(case) + (PROFILED_STEPS + PROFILER_WARMUP_STEPS if case.profile else 0)
    measured = case.steps
    if case.target_ci_pct > 0:
        measured = max(measured, min(case.measure_cap_s / step + 1, max_measured_steps(case.steps, case.target_ci_pct)))
    loop_step = step + bookkeeping_seconds(case, calibration)  # a warmup or measured step of the timed loop
    return (
        fixed_seconds(case, calibration)
        + untimed * step
        + (case.warmup + measured) * loop_step
        + update_norm_seconds(case, calibration)
    )


def bookkeeping_seconds(case: Case, calibration: Calibration = FIXED) -> float:
    """What runs between two steps of the timed loop (and, spread over them, after the last):
    synchronization, the loss read, the stop decision, the records of the steps."""
    device = _device(case)
    return STEP_BOOKKEEPING_S[device] * (calibration.fixed_scale if device == "cpu" else 1.0)


def local_params(case: Case) -> int:
    """Parameters one rank holds between steps: all of them, or its shard when the strategy
    shards parameters (a hybrid mesh counts as sharded over every rank: the estimate errs short
    there by the replica count, on norms of a fraction of a second)."""
    params = case_params(case)
    return params // case.nproc if catalog_strategy(case.strategy).shards_parameters else params


def update_norm_seconds(case: Case, calibration: Calibration = FIXED) -> float:
    """The update norms of the case's warmup steps (`Case.update_norm_steps`), each a host copy
    of the rank's local parameters and a sum of squares, plus the first one's host buffers;
    none above UPDATE_NORM_MAX_BYTES of local fp32 parameters, as the worker decides."""
    norms = len(case.update_norm_steps)
    local = local_params(case)
    if norms == 0 or local * 4 > UPDATE_NORM_MAX_BYTES:
        return 0.0
    device = _device(case)
    scale = calibration.fixed_scale if device == "cpu" else 1.0
    return (norms * UPDATE_NORM_S_PER_PARAM[device] + UPDATE_NORM_BUFFERS_S_PER_PARAM[device]) * local * scale


def fixed_seconds(case: Case, calibration: Calibration = FIXED) -> float:
    """A case's start-up and teardown on its device (an unknown device counts as a CPU; on a
    CPU scaled by the calibration), its compilation, and the snapshot and trace it writes."""
    device = _device(case)
    artifacts = ARTIFACT_S * (case.profile + (case.memory_snapshot and device == "cuda"))
    scale = calibration.startup_scale if device == "cpu" else 1.0
    setup = SETUP_S_PER_PARAM[device] * case_params(case) if SETUP_S_PER_PARAM[device] else 0.0
    if _built_by_transformers(case):
        setup += HF_BUILD_S[device] * scale
    return CASE_FIXED_S[device] * scale + setup + (COMPILE_S[device] if case.compile else 0.0) + artifacts


def session_seconds(cuda: bool, calibration: Calibration = FIXED) -> float:
    """pytest's start and the report at the end, once per sweep: on a CPU machine scaled as a
    case's start-up (both are Python and imports on the host)."""
    return SESSION_S["cuda"] if cuda else SESSION_S["cpu"] * calibration.startup_scale


def _built_by_transformers(case: Case) -> bool:
    """A Hugging Face flavor, or any `hf:PATH` (its config not read: fixed_seconds is the estimate
    of a case whose shapes cannot be read). A case's model is one of the two (plan.case)."""
    return is_hf_path(case.model) or MODEL_FLAVORS[case.model].from_hf_config


@dataclass(frozen=True)
class SweepEstimate:
    cases: int
    repeats: int
    total_s: float
    slowest_case: Case | None
    slowest_first_step_s: float
    gpu_name: str | None = None  # whose figures the CUDA cases were estimated with (None: no CUDA case)
    kept: int = 0  # cases a resume keeps (not run, not counted)
    calibration: Calibration = FIXED


def estimate_sweep(
    cases: Iterable[Case],
    repeats: int = 1,
    gpu_name: str = DEFAULT_GPU_NAME,
    calibration: Calibration = FIXED,
    kept: frozenset[str] = frozenset(),
) -> SweepEstimate:
    """Every case run `repeats` times, plus the session; the case with the slowest first step, for
    the guard. A model whose shapes are unknown (an unsupported hf:PATH) counts only its fixed
    cost. Cases whose id is in `kept` (ok in the run a resume continues) cost nothing."""
    total, slowest, slowest_s, n, cuda, skipped = 0.0, None, 0.0, 0, False, 0
    for case in cases:
        if case.id in kept:
            skipped += 1
            continue
        n += 1
        cuda = cuda or case.device == "cuda"
        try:
            first = step_seconds(case, gpu_name, calibration)
            seconds = case_seconds(case, gpu_name, calibration)
        except (ValueError, KeyError, OSError):
            first, seconds = 0.0, fixed_seconds(case, calibration)
        total += seconds * repeats
        if slowest is None or first > slowest_s:
            slowest, slowest_s = case, first
    return SweepEstimate(
        cases=n,
        repeats=repeats,
        total_s=total + session_seconds(cuda, calibration),
        slowest_case=slowest,
        slowest_first_step_s=slowest_s,
        gpu_name=gpu_name if cuda else None,
        kept=skipped,
        calibration=calibration,
    )


def format_duration(seconds: float) -> str:
    """`1m05s`, or `2h03m` from an hour on."""
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def estimate_line(estimate: SweepEstimate) -> str:
    """`fsdp-bench: estimated duration 0m34s for 4 case(s) (slowest first step ~0.05 s: CASE); ...`."""
    line = f"fsdp-bench: estimated duration {format_duration(estimate.total_s)} for {estimate.cases} case(s)"
    if estimate.repeats > 1:
        line += f" x {estimate.repeats} repeats"
    if estimate.kept:
        line += f" ({estimate.kept} kept from the resumed run)"
    if estimate.slowest_case is not None:
        first = estimate.slowest_first_step_s
        line += (
            f" (slowest first step ~{first:.2g} s: {estimate.slowest_case.id})"
            if first < 10
            else f" (slowest first step ~{first:.0f} s: {estimate.slowest_case.id})"
        )
    figures = f" with {estimate.gpu_name}'s published peak" if estimate.gpu_name else ""
    if estimate.calibration.measured:
        cal = estimate.calibration
        load = f", load average {cal.load_average:.1f}: x{cal.load_factor:.2f}" if cal.load_factor < 1 else ""
        figures += f", CPU calibrated now ({cal.cpu_flops / 1e9:.0f} GFLOP/s per rank, start-up x{cal.startup_scale:.1f}{load})"
    return line + f"; a rough figure from model FLOPs{figures}, see fsdp_bench/analysis/duration.py"


def slow_cpu_line(estimate: SweepEstimate, limit_s: float = FIRST_STEP_LIMIT_S) -> str | None:
    """The one line that stops a CPU sweep whose first step would take over `limit_s`, else None."""
    case = estimate.slowest_case
    if case is None or case.device != "cpu" or estimate.slowest_first_step_s <= limit_s:
        return None
    return (
        f"fsdp-bench: refusing to start on CPU: {case.model} at seq len {case.seq_len} "
        f"(case {case.id}) needs ~{estimate.slowest_first_step_s:.0f} s for its first step alone "
        f"(limit {limit_s:.0f} s); use a smaller model or --bench-seq-len, run on a GPU, "
        "or pass --bench-allow-slow-cpu to run it anyway"
    )


def estimate_gpu_name(named: str | None, cases) -> str:
    """Whose published figures estimate the CUDA cases: --bench-gpu-name (checked at configure),
    else the visible GPU when the peak table knows it, else the default (H100 SXM). nvidia-smi
    runs only for CUDA cases."""
    from fsdp_bench.plan.devices import visible_gpu_name

    if named is not None:
        return named
    if not any(case.device == "cuda" for case in cases):
        return DEFAULT_GPU_NAME
    seen = visible_gpu_name()
    try:
        return check_gpu_name(seen) if seen else DEFAULT_GPU_NAME
    except ValueError:  # a GPU the table lacks: its estimate uses the default's figures
        return DEFAULT_GPU_NAME
