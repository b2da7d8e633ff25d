"""How much host memory one case's processes take at their peak, from its parts: the one estimate
the launch guard refuses cases by (launch/memory_guard.py), and the one `fit` and the tuner can ask
(`host_peak(case, text_bytes=...)`). Pure numbers; the caller reads the data folder's size.

A CPU rank's resident memory peaks at the largest of its stages, on top of what the process costs
before it holds anything (`RANK_BASE_BYTES`: torch, gloo, the interpreter; more with a CUDA
build of torch, `import_extra_bytes`):
- **data**: a `--bench-data` folder is read whole by every rank, then tokenized and packed as
  Python lists of ints (8-byte pointers; the text, the documents, the packed stream, its rows)
  before one int64 tensor of the rows is kept for the run. Measured on gpt_tiny, byte-level
  tokens: 19.9 MB of text raised a rank's peak RSS by 0.42 GiB (22.7 bytes per text byte); the
  issue reports 1.70 GiB per rank for 58 MB (25.5 above the 0.32 GiB base): `TEXT_LOAD_BYTES_PER_BYTE`.
- **build**: a model whose builder does not use the meta device is built whole, in fp32, before
  any strategy shards it: every rank of an FSDP case holds the whole model at stage `model`
  (linear_odsc at a simulated 64: 9 GiB at stage `model`, whatever its shard will be).
- **step**: the training step's peak as `analysis.fit` predicts it on a CPU rank (on CUDA the
  step lives in device memory), plus the attention matrices where the attention implementation
  materialises them on the CPU: attention dropout takes torch's math path (the flash kernel has
  no dropout), which keeps heads x seq^2 per sample three times per layer (counted by
  analysis.activations) and, in backward, one more for the gradient of the scores
  (`attention_transient_bytes`). A 1-layer, 4-head Llama with attention dropout at seq 4096:
  1.01 GiB allocated, of which 1.0 GiB is those four.
- **simulated** (`--bench-simulate-world-size`): rank 0 on a fake process group holds, through
  its step, about `SIMULATED_WHOLE_MODEL_FACTOR` times the whole model beyond its base, whatever
  the world size (measured, probes on: linear_small 4.2x, gpt_124m 4.1x at a simulated 64;
  3.1x for gpt_124m without probes; the cause inside FSDP2-on-fake-collectives is not known).
  Since the step-parts probe runs 8 steps, 3 of them under the profiler, linear_small at a
  simulated 64 measured 1.194, 1.427 and 1.288 GiB in three runs (2026-11-26, load 1.5-3), 7.8x.
  With the parts probe run first (before the FLOP and MemTracker probes) the same rank measured
  1.145, 0.910 and 0.864 GiB (2026-11-27 00:00-00:05 UTC, load 1.8-2.5). A simulated rank no
  longer runs the parts probe (its collectives are fakes): then it measured 0.669-0.766 GiB in six
  runs (01:45-02:00 UTC, load 6-11), so the profiler's buffers were the spread. 3.4x, the factor
  now, puts the guard at 0.755 GiB, -1% to +13% of those. Without any probe it peaked at 0.57 GiB.
A case's total adds, per node, the launcher (torchrun: one more interpreter with torch) unless
the case is simulated (one process, no torchrun).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fsdp_bench.analysis.comm_model import model_units
from fsdp_bench.analysis.fit import predict_case_peak
from fsdp_bench.plan.case import Case, parse_mesh
from fsdp_bench.plan.catalog import precision as precision_row
from fsdp_bench.plan.flavors import ModelFlavor, flavor_for, load_config_dict
from fsdp_bench.results.schema import GIB

# One rank process before its model, data or step: gpt_tiny (3 MB of model) on one CPU rank
# peaked at 0.323 GiB RSS (2026-11-26, torch 2.13); a Hugging Face model's rank also imports
# transformers (a 1-layer Llama rank: 0.42-0.45 GiB beyond what its step allocated).
RANK_BASE_BYTES = 0.33 * GIB
HF_IMPORT_BYTES = 0.10 * GIB
# torchrun's own process (it imports torch): the case's process tree minus its ranks, measured
# 0.218 GiB with one and with two gpt_tiny ranks (tests/rss_watchdog.py, load 11.8).
LAUNCHER_BYTES = 0.22 * GIB
# The constants above hold for torch 2.13's CPU wheel, whose `import torch` leaves the env.json
# reader at a peak RSS of 0.214 GiB. A CUDA build maps more before any case runs: 0.473 GiB for
# 2.11.0+cu130, 0.579 for 2.14.1+cu130 and 0.525 for 2.15.0+cu132 (2026-11-27, on the CPU). Every
# rank and torchrun pays that difference, so the guard adds it to each (`import_extra_bytes`); on
# 2.14.1+cu130 the constants alone had put the guard 45-52% under the measured peak.
REFERENCE_IMPORT_BYTES = 0.214 * GIB
TEXT_LOAD_BYTES_PER_BYTE = 26  # the rank's peak while it reads and packs its text (measured 22.7-25.5)
TOKEN_BYTES = 8  # the packed rows kept for the run: int64, one per token (at most one per text byte)
SIMULATED_WHOLE_MODEL_FACTOR = 3.4  # FLOP and MemTracker probes on, no parts probe; see the module doc


@dataclass(frozen=True)
class HostPeak:
    """One case's host memory at its peak, by part (bytes). A rank's peak is its base plus the
    largest of its stages; the case's is its processes' peaks plus the launcher."""

    processes: int  # rank processes on this node (1 for a simulated case)
    launcher: float  # torchrun, per node; 0 for a simulated case
    base: float  # one rank process before anything (RANK_BASE_BYTES, + transformers)
    data_load: float  # reading and packing a --bench-data folder (0 without)
    data_kept: float  # its packed rows, kept through the run
    build: float  # the whole model built before sharding (0 when built on the meta device)
    step: float  # the training step's predicted peak on this host (0 on CUDA)
    attention: float  # the math path's score gradient in backward, beyond `step`
    simulated: float  # a simulated rank's step (SIMULATED_WHOLE_MODEL_FACTOR x the whole model)

    @property
    def rank_bytes(self) -> float:
        later = max(self.build, self.step + self.attention, self.simulated)
        return self.base + max(self.data_load, self.data_kept + later)

    @property
    def total_bytes(self) -> float:
        return self.launcher + self.processes * self.rank_bytes

    def largest_part(self) -> str:
        """The part that sets the rank's peak, in words (the guard's refusal names it)."""
        later = {
            "the model built whole before sharding": self.build,
            "the training step": self.step + self.attention,
            "the simulated rank's step": self.simulated,
        }
        name, value = max(later.items(), key=lambda kv: kv[1])
        if self.data_load > self.data_kept + value:
            return f"reading the --bench-data text ({self.data_load / GIB:.1f} GiB)"
        return f"{name} ({value / GIB:.1f} GiB)"


def whole_model_bytes(flavor: ModelFlavor) -> int:
    """The model's parameters in fp32, as every builder first makes them (tied weights once)."""
    return 4 * sum(u.numel for u in model_units(flavor))


def attention_transient_bytes(flavor: ModelFlavor, batch_size: int, seq_len: int, dtype_bytes: int) -> int:
    """The gradient of one layer's attention scores (heads x seq^2 per sample), alive in backward
    beside the saved matrices, where attention dropout sends SDPA down torch's math path on CPU;
    0 where the flash kernel runs (no dropout: memory linear in the sequence)."""
    shape = flavor.architecture.shape
    if shape not in ("gpt2", "llama_style"):
        return 0
    config = load_config_dict(flavor)
    heads = config.get("n_head") if shape == "gpt2" else config.get("num_attention_heads")
    dropout = config.get("attn_pdrop", 0.1) if shape == "gpt2" else config.get("attention_dropout", 0.0)
    if not heads or not dropout:
        return 0
    return int(heads) * seq_len * seq_len * batch_size * dtype_bytes


def predicted_step_bytes(case: Case) -> float | None:
    """fit's predicted peak of the case's step on one rank (model state and activations); None
    where it cannot say (no model). The host guard counts it on CPU, the GPU note on CUDA."""
    mesh = parse_mesh(case.mesh) if case.mesh else None
    try:
        return predict_case_peak(case, mesh=mesh)["peak_bytes"]
    except (KeyError, ValueError, TypeError, ZeroDivisionError):
        return None


def import_extra_bytes(import_bytes: int | None) -> float:
    """What each process pays beyond the constants for the workers' torch: its measured import
    peak (env.json's `torch_import_rss_bytes`) less the CPU wheel's; 0 when not measured."""
    return max(0.0, import_bytes - REFERENCE_IMPORT_BYTES) if import_bytes else 0.0


def host_peak(
    case: Case, *, ranks_here: int | None = None, text_bytes: int = 0, import_bytes: int | None = None
) -> HostPeak:
    """The case's host memory by part. `ranks_here`: its ranks on this node (default all);
    `text_bytes`: the size of its --bench-data folder's text files (the caller reads it);
    `import_bytes`: the workers' torch import peak (`import_extra_bytes`; None: the CPU wheel's)."""
    flavor = flavor_for(case.model)
    on_cpu = case.device == "cpu"
    whole = whole_model_bytes(flavor)
    tokens = text_bytes  # byte-level tokens: one per byte, an upper bound for any tokenizer
    extra = import_extra_bytes(import_bytes)
    return HostPeak(
        processes=1 if case.simulate else max(1, ranks_here or case.nproc),
        launcher=0.0 if case.simulate else LAUNCHER_BYTES + extra,
        base=RANK_BASE_BYTES + extra + (HF_IMPORT_BYTES if flavor.from_hf_config else 0.0),
        data_load=text_bytes * TEXT_LOAD_BYTES_PER_BYTE,
        data_kept=tokens * TOKEN_BYTES,
        build=0.0 if flavor.architecture.built_on_meta else float(whole),
        step=(predicted_step_bytes(case) or 0.0) if on_cpu else 0.0,
        attention=attention_transient_bytes(flavor, case.batch_size, case.seq_len, precision_row(case.precision).bytes)
        if on_cpu
        else 0.0,
        simulated=SIMULATED_WHOLE_MODEL_FACTOR * whole if case.simulate and on_cpu else 0.0,
    )


OVERCOMMIT = "--bench-allow-memory-overcommit"


def host_refusal(peak: HostPeak, available_bytes: int | None) -> str | None:
    """One line saying why a case is not run, when its processes need more host memory than is
    available; None when it fits (or the machine does not say what it has). The sweep's guard
    skips a case with it, fit answers "no" with it and the tuner skips a candidate with it, so a
    user reads one figure and one reason whichever asked."""
    if available_bytes is None or peak.total_bytes <= available_bytes:
        return None
    launcher = f" + {peak.launcher / GIB:.1f} GiB for torchrun" if peak.launcher else ""
    return (
        f"needs about {peak.total_bytes / GIB:.1f} GiB of host memory ({peak.processes} process(es) x "
        f"{peak.rank_bytes / GIB:.1f} GiB, most of it {peak.largest_part()}{launcher}) but only "
        f"{available_bytes / GIB:.1f} GiB is available; not launched (use a smaller model, batch, sequence "
        f"or data folder, or pass {OVERCOMMIT} to run it anyway)"
    )


def host_check(available_bytes: int | None, import_bytes: int | None = None) -> Callable[[Case], str | None]:
    """case -> `host_refusal` of its host peak (no data folder): what fit's CPU table asks of each
    row (analysis.fit.fit_table), so its "no" is the guard's figure and line, the workers' torch
    import (`import_bytes`) counted as the guard counts it."""
    return lambda case: host_refusal(host_peak(case, import_bytes=import_bytes), available_bytes)
