"""The two records a run is made of, every field named once with its JSON type: a rank's record
(the worker fills it as it goes and leaves it behind whatever happens) and a case's result (the
parent's merge of its ranks, and of its repeats).

They are TypedDicts, not classes with a to/from-JSON layer: the JSON object *is* the record, so a
file reads back byte-identical, a half-written rank record (a rank killed mid-stage) is still a
valid record, and every reader keeps the plain `record["field"]` it had. What a class would add
lives here as functions: reading a case file (checked against these types, then migrated from
any older schema version: `results.load`, `results.migrate`) and writing one (`results.io`).
`results.checks.record_problem` reads its checks from these annotations (nested records, required
keys, numbers of a measurable size), so a field and its type are declared in this one place; the
same check reads a tune answer and env.json.

The measured objects a rank record nests are declared in results.readings; a few nested objects
whose fields vary with the device or the option that made them (FLOP counts, the profile summary,
a prediction, a checkpoint) stay `dict[str, Any]`, described where they are measured.
"""

from __future__ import annotations

from typing import Any, TypedDict

from fsdp_bench.results.readings import (
    AllocatorHealth,
    CheckpointReading,
    ErrorRecord,
    GpuBusy,
    GpuUtilReading,
    MemoryReading,
    MemorySample,
    ModelStateBytes,
    Number,
    PeakPrediction,
    PrecisionUsed,
    ProfileSummary,
    StepParts,
    StepPeaks,
)

# A case's `metrics`: a value per name the registry (results.metrics) holds; result_problem
# refuses any other name. Numbers, yes/no, labels, and the one list (repeat medians).
MetricValue = Number | str | bool | list[Number] | None
Metrics = dict[str, MetricValue]
# One case flattened for the table and every report reader (report.table.flatten_case): its axes,
# the work quantities, the verdicts and its metrics, by column name (report.table's columns).
Cell = Number | str | bool | list[Number] | None
TableRow = dict[str, Cell]


class StageReading(TypedDict, total=False):
    """A memory reading after one stage (`stages` of a rank record)."""

    stage: str
    label: str
    rank: int
    rss_bytes: Number | None
    allocated_bytes: Number | None
    reserved_bytes: Number | None


class _CaseRequired(TypedDict):
    strategy: str
    model: str
    batch_size: int
    grad_accum: int
    optimizer_timing: str


class CaseFields(_CaseRequired, total=False):
    """A result's `case`: plan.case.Case.to_dict() (results/ may not import plan; a unit test holds
    the two equal). The table's axes are required: every row and chart is keyed on them."""

    nproc: int
    seq_len: int
    steps: int
    warmup: int
    target_ci_pct: Number
    measure_cap_s: Number
    device: str
    seed: int
    lr: Number
    pg_timeout_s: Number
    precision: str
    act_ckpt: bool
    compile: bool
    optimizer_impl: str
    grad_clip: Number
    wrap_policy: str
    min_num_params: int
    forward_prefetch: int
    backward_prefetch: str
    grad_sync: str
    checkpoint: str
    loss: str
    data: str
    suite: str
    scaled_down: str
    mesh: str
    simulate: bool
    profile: bool
    memory_snapshot: bool
    probes: bool


class RankRecord(TypedDict, total=False):
    """One rank's record (`ranks/rank<N>.json` of a case folder, and each item of a result's
    `ranks`). Every field may be missing or null: a rank that died early wrote what it had."""

    schema_version: int
    case_id: str
    rank: int
    world_size: int
    pid: int
    host: str
    status: str  # running, then ok or failed / oom
    stage: str  # the last stage entered (results.schema.STAGES)
    error: ErrorRecord  # type, message, traceback tail of a failure
    started_utc: str
    ended_utc: str
    stages: list[StageReading]  # a memory reading after each stage
    stage_started_unix: dict[str, Number | None]
    # a missing or null list is not measured; no worker ever wrote a null item, and every reader
    # computes over the items, so a list holding one is a bad file (a note), not a gap
    warmup_step_times_s: list[Number]
    step_times_s: list[Number]
    losses: list[Number]
    grad_norms: list[Number]
    measurement_version: int  # results.schema.MEASUREMENT_VERSION of the loop that measured it
    update_norms: list[Number]
    update_norm_steps: list[int]  # the step (warmup included) each norm is of; older files: every step
    update_norms_null_reason: str
    measurement_stop_reason: str
    memory: StepPeaks  # peaks of the measured steps
    memory_timeline: list[MemorySample]
    memory_at_failure: MemoryReading
    memory_breakdown_bytes: dict[str, Number | None]
    memory_breakdown_null_reason: str
    memory_snapshot: str
    memory_snapshot_recording: bool
    allocator: AllocatorHealth
    device: str
    device_name: str
    dtype: str
    compute_dtype: str
    precision: PrecisionUsed
    n_params: int
    param_bytes: int
    effective_sharding: str
    construction: dict[str, Any]
    data: dict[str, Any]
    expected_model_state_bytes: ModelStateBytes
    measured_model_state_bytes: dict[str, Number]
    measured_model_state_null_reason: str
    optimizer_vs_model: dict[str, Any]
    optimizer_params_match_model: bool
    optimizer_params_repointed: int
    params_changed: bool
    flops: dict[str, Any]
    prediction: PeakPrediction
    profile: ProfileSummary
    gpu_util: GpuUtilReading
    gpu_busy: GpuBusy
    step_parts: StepParts  # analysis.attribution.step_parts of the rank's profiled probe step
    checkpoint: CheckpointReading
    simulation: dict[str, Any]
    oom: dict[str, Any]
    probe_oom: dict[str, Any]
    oom_snapshot_error: str
    oom_observer_error: str


class RepeatSummary(TypedDict, total=False):
    """One repeat of a merged case (`repeats` of its result, analysis.repeats)."""

    repeat: int
    status: str
    reason: str
    duration_s: Number | None
    step_time_s_median: Number | None


class Work(TypedDict):
    """What one optimizer step of a case computes (results.work): cases are ranked against each
    other only within one `compare_group` (same model, seq_len, tokens per step, precision)."""

    global_batch_size: int
    tokens_per_optimizer_step: int
    compare_group: str


class _ResultRequired(TypedDict):
    case_id: str
    case: CaseFields
    status: str


class CaseResult(_ResultRequired, total=False):
    """A case's result (`cases/<case id>.json`): status and why, the launch's timings, the
    headline metrics (names in results.metrics) and every rank's record. `case_id`, `case` and
    `status` are always present (results.load refuses a file without them)."""

    schema_version: int
    reason: str
    failed_rank: int | None
    failed_stage: str | None
    returncode: int | None
    started_utc: str | None
    launched_unix: Number | None
    finished_unix: Number | None
    duration_s: Number
    log_tail: str
    work: Work | None  # results.work.work_of(case), written with the result
    metrics: Metrics  # checked against the metric registry (results.checks)
    ranks: list[RankRecord]
    simulation: dict[str, Any]  # --bench-simulate-world-size: what was simulated
    repeat: int | None  # which repeat this file is (a repeat's own file)
    repeats: list[RepeatSummary]  # merged repeats: each one's status, duration, median
    step_times_s_by_repeat: list[list[Number]]
    time_split_s: dict[str, Number] | None
    leftover_pids: list[int]
    launch: dict[str, Any]  # multi-node: nnodes, node_rank, rendezvous, note


REQUIRED_RESULT_FIELDS = ("case_id", "case", "status")
TUNE_SCHEMA_VERSION = 1


# --bench-tune's answer (`tune/<request>.json`, analysis.tune.tune_answer): what the report reads
# of it unguarded is required, so a hand-edited or foreign answer is a note, never a crash.


class TuneMeasured(TypedDict):
    case_id: str
    status: str
    repeat_count: int
    case_seconds: Number
    predicted_step_s: Number | None
    measured_step_s: Number | None
    error_pct: Number | None
    speed_tokens_per_s: Number | None
    peak_gib: Number | None
    fits_budget: bool


class _TuneRunRequired(TypedDict):
    case_id: str


class TuneRun(_TuneRunRequired, total=False):
    repeat_count: int
    status: str
    predicted_step_s: Number | None
    speed_tokens_per_s: Number | None
    speed_low_tokens_per_s: Number | None
    speed_high_tokens_per_s: Number | None


class TuneRound(TypedDict):
    round: int
    kind: str
    runs: list[TuneRun]


class _TuneSkipRequired(TypedDict):
    case_id: str
    reason: str


class TuneSkip(_TuneSkipRequired, total=False):
    predicted_peak_gib: Number | None  # null: skipped at collection, as the sweep skips it


class TuneCost(TypedDict):
    spent_case_s: Number
    full_grid_case_s: Number
    ratio: Number | None
    grid_cases: int
    measured_cases: int


class _TuneBoundaryRequired(TypedDict):
    case_id: str
    predicted_peak_in_gib: Number
    measured_peak_in_gib: Number | None


class TuneBoundaryCheck(_TuneBoundaryRequired, total=False):
    over_budget_when_measured: bool | None


class TuneStepModel(TypedDict):
    fitted_on_cases: int
    device_flops_per_s: Number
    wire_bytes_per_s: Number
    micro_step_overhead_s: Number
    model_error_pct: Number


class TuneDrift(TypedDict):
    """The machine's drift measured while tuning (analysis.drift): the pooled run-to-run sd of one
    measurement's log step-time median, its degrees of freedom, the cases pooled, and the half-width
    of one measurement's band it gives, in percent."""

    sd_log: Number
    dof: int
    pooled_cases: int
    one_run_band_pct: Number


class _TuneRequired(TypedDict):
    model: str
    max_repeats: int
    stopped: str
    tied: list[str]
    skipped: list[TuneSkip]
    measured: list[TuneMeasured]
    cost: TuneCost


class TuneAnswer(_TuneRequired, total=False):
    schema_version: int  # TUNE_SCHEMA_VERSION; answers written before it had none and read as 1
    budget_gib: Number | None
    pick: str | None
    rounds: list[TuneRound]
    boundary_check: TuneBoundaryCheck | None
    step_model: TuneStepModel | None
    single_winner: bool  # one pick beyond the measured noise; false: the pick leads a tie, or is unconfirmed
    drift: TuneDrift | None  # None: no case was measured twice
    unmeasured_within_noise: list[str]  # never run: predicted to reach the pick's speed, not beyond its noise


class PeakEstimate(TypedDict, total=False):
    """The estimator's answer (worker.estimate, `--bench-trace`): a case's rank-0 peak on fake tensors."""

    case: CaseFields
    status: str  # ok, or refused with the reason
    reason: str
    peak_bytes: Number
    by_category_bytes: dict[str, Number]
    probe_peak_bytes: Number
    ddp_bucket_bytes: Number
    world_size: int
    collectives: str  # what the case's collectives allocate, as counted (gloo on real ranks, else fake)
    tracker: str
    build_s: Number
    estimate_s: Number
    method: str


class CollectiveTrace(TypedDict, total=False):
    """worker.comm_trace's `trace-rank-N.json`: the bytes per collective one rank moved in a step,
    and each collective event's name and input shapes (what analysis.comm_model is checked on)."""

    rank: int
    world_size: int
    case_id: str
    bytes: dict[str, Number]
    events: list[list[Any]]


# The sweep settings a run folder was made with, where they differ from the defaults
# (plan.sweep.Sweep.fingerprint): a resume with other settings is refused. Keys are Sweep's fields.
SweepSettings = dict[str, Any]
SWEEP_SCHEMA_VERSION = 1


class SweepFile(TypedDict):
    """`sweep.json` of a run folder (results.load.load_sweep_settings reads it; files written before
    the version held the settings alone, and read as version 1)."""

    schema_version: int
    settings: SweepSettings


class Environment(TypedDict, total=False):
    """env.json (launch.environment): the facts the report's environment section shows."""

    schema_version: int
    host: str
    python: str
    platform: str
    cpu_count: int | None
    utc_time: str
    pytorch_cuda_alloc_conf: str | None
    planted_faults: str | None  # FSDP_BENCH_FAULTS when the sweep started (a run slowed on purpose)
    git_sha: str | None
    git_dirty: bool | None
    torch: str | None
    cuda: str | None
    nccl: str | None
    gpu_count: int | None
    gpu_names: list[str]
    driver: str | None
    transformers: str | None
    accelerate: str | None
    torch_info_error: str
    torch_import_s: float  # how long `import torch` took in the reader (the estimate's start-up scale)
    # the reader's peak resident memory once torch is imported: what every rank and torchrun pay
    # before anything else (a CUDA build's 0.47-0.58 GiB against the CPU wheel's 0.21; analysis.host_memory)
    torch_import_rss_bytes: int | None
    cpu_matmul_gflops: float  # the single-thread matmul probe (analysis.duration.Calibration)
    cpu_probe_runnable: float | None  # mean runnable tasks while the probe ran (Linux), the probe included
