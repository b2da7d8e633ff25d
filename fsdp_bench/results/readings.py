"""The measured objects a rank record nests (a memory reading, an error, the busy probe, the step's
parts ...), each declared once with its JSON types beside the module that measures it, so a
reader of `rank["gpu_busy"]` or `rank["step_parts"]` finds its fields here, not by reading the
worker. All `total=False`: a rank that died mid-stage, or a device that has no such reading,
leaves fields out; a `null_reason` says why a value is missing.

Stdlib only, like results.records (which uses these as the types of its fields).
"""

from __future__ import annotations

from typing import TypedDict

Number = int | float


class MemoryReading(TypedDict, total=False):
    """worker.memory.read_memory: process RSS, and on CUDA the caching allocator's bytes."""

    rss_bytes: Number | None
    allocated_bytes: Number | None
    max_allocated_bytes: Number | None
    reserved_bytes: Number | None
    max_reserved_bytes: Number | None
    num_ooms: int | None  # memory_at_failure on CUDA: the allocator's counters when the rank gave up
    num_alloc_retries: int | None
    error: str  # memory_at_failure only: the reading itself failed


# memory_breakdown_bytes' parts, in their order: MemTracker's categories folded (worker.probes) or
# FSDP1's profiled peak taken apart (worker.profiled_peak)
BREAKDOWN_PARTS = ("params", "grads", "optimizer", "activations", "other")


class ProfiledPeak(TypedDict, total=False):
    """worker.profiled_peak.profiled_step_peak: FSDP1's CPU peak from the profiler's memory events."""

    peak_bytes: Number
    resident_bytes: Number  # between steps: parameters, gradients, optimizer state
    breakdown_bytes: dict[str, Number]  # the peak by memory_breakdown_bytes' categories
    drift_bytes: Number  # the second step's end minus the first's: 0 when no free was missed
    missed_frees: int  # blocks allocated again at the address of one never seen freed
    null_reason: str


class StepPeaks(TypedDict, total=False):
    """A rank's `memory`: the peaks of its measured steps (worker.loop, worker.probes)."""

    peak_allocated_bytes: Number | None  # CUDA: the allocator's; CPU: a probe step's (below)
    peak_reserved_bytes: Number | None
    peak_rss_bytes: Number | None
    method: str  # what measured the peak allocated: the allocator, the probe step, or why neither
    tracked_peak_bytes: Number
    tracked_by_category_bytes: dict[str, Number]
    profiled_peak: ProfiledPeak  # CPU FSDP1 only (MemTracker refuses it)


class MemorySample(TypedDict, total=False):
    """One point of a rank's `memory_timeline` (worker.memory.MemoryTimeline, CUDA only)."""

    step: int
    phase: str
    t_s: Number
    allocated_bytes: Number
    reserved_bytes: Number


class TrackedPeak(TypedDict, total=False):
    """worker.memory.track_step_memory: MemTracker's peak live tensor bytes, total and by category."""

    peak_bytes: Number
    by_category_bytes: dict[str, Number]


class AllocatorHealth(TypedDict, total=False):
    """worker.memory.allocator_health: the CUDA caching allocator's retries, OOMs and slack."""

    num_alloc_retries: int
    num_ooms: int
    reserved_minus_allocated_bytes: Number
    peak_reserved_minus_peak_allocated_bytes: Number
    inactive_split_bytes: Number
    alloc_conf: str | None


class ErrorRecord(TypedDict, total=False):
    """worker.failure.error_record: what a failed rank raised."""

    type: str
    message: str
    traceback_tail: str
    time_unix: Number


class GpuUtilReading(TypedDict, total=False):
    """worker.gpu_util: NVML's sampled utilization over the timed steps (not a busy measure)."""

    pct_mean: Number | None
    pct_min: Number | None
    samples: int
    null_reason: str | None


class BusyProbe(TypedDict, total=False):
    """analysis.busy.device_busy: device busy seconds per profiled step, and the steps' window."""

    steps: int
    busy_s_per_step: Number
    window_s_per_step: Number
    null_reason: str | None


class GpuBusy(TypedDict, total=False):
    """A rank's `gpu_busy` (analysis.busy.busy_record): the probe's busy time against the median step."""

    pct: Number | None
    idle_ms_per_step: Number
    busy_ms_per_step: Number
    step_ms_median: Number
    probe_window_ms: Number
    probe_steps: int
    null_reason: str | None
    method: str


class StepParts(TypedDict, total=False):
    """A rank's `step_parts` (analysis.attribution.step_parts): seconds per step of each disjoint
    part of the profiled probe step, summing to `window_s`."""

    compute_s: Number
    comm_exposed_s: Number
    optimizer_s: Number
    data_s: Number
    host_s: Number
    steps: int
    window_s: Number
    plain_step_s: Number  # the same number of steps right after, timed without the profiler
    comm_exposed_by_kind_s: dict[str, Number]
    null_reason: str | None
    host_means: str
    method: str
    busy: BusyProbe  # CUDA: the same probe's busy time, moved to the rank's gpu_busy once read


class PrecisionUsed(TypedDict, total=False):
    """A rank's `precision` (worker.training): the dtypes the run really used."""

    mode: str
    param_dtype: str
    reduce_dtype: str
    output_dtype: str | None
    grad_scaler: str | None


class PeakPrediction(TypedDict, total=False):
    """analysis.fit.predict_peak_bytes, and a rank's `prediction` (worker.probes.predicted_memory):
    the predicted peak, the phase of the step it falls in, and the parts it adds up."""

    peak_bytes: Number
    phase: str
    parts_bytes: dict[str, Number]
    phases_bytes: dict[str, Number]
    model_state_bytes: Number
    gathered_bytes: Number
    activation_bytes: Number
    method: str
    null_reason: str


class ModelStateBytes(TypedDict, total=False):
    """analysis.model_state.expected_model_state_bytes: what one rank holds after optimizer.step()."""

    layout: str  # replicated, zero2_like, full_shard, or unknown (no figure)
    params: Number
    grads: Number
    optimizer: Number
    total: Number
    textbook_total: Number  # the ZeRO formula, beside the allocated figure
    zero2_textbook_total: Number
    method: str


class CheckpointReading(TypedDict, total=False):
    """worker.checkpointing.run_checkpoint_benchmark: save, load and resume of one checkpoint kind."""

    kind: str
    save_s: Number
    load_s: Number
    size_bytes: Number
    save_peak_allocated_bytes: Number | None
    load_peak_allocated_bytes: Number | None
    peak_rss_bytes: Number
    resume_losses_uninterrupted: list[Number]
    resume_losses_resumed: list[Number]
    resume_max_abs_diff: Number


class ProfileSummary(TypedDict, total=False):
    """A rank's `profile` (--bench-profile, worker.profiling.profile_steps): its profiled steps
    reduced to seconds per step, and the trace file TensorBoard opens."""

    steps_profiled: int
    step_s_per_step: Number
    comm_total_s_per_step: Number
    comm_exposed_s_per_step: Number
    comm_by_kind_s_per_step: dict[str, Number]
    compute_s_per_step: Number
    optimizer_s_per_step: Number
    data_host_s_per_step: Number
    device_busy_s_per_step: Number | None
    method: str
    reason: str  # why nothing was profiled
    trace_file: str
