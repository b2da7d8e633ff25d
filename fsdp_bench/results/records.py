"""The two records a run is made of, every field named once with its JSON type: a rank's record
(the worker fills it as it goes and leaves it behind whatever happens) and a case's result (the
parent's merge of its ranks, and of its repeats).

They are TypedDicts, not classes with a to/from-JSON layer: the JSON object *is* the record, so a
file reads back byte-identical, a half-written rank record (a rank killed mid-stage) is still a
valid record, and every reader keeps the plain `record["field"]` it had. What a class would add
lives here as functions: reading a case file (checked against these types, then migrated from
any older schema version: `results.load`, `results.migrate`) and writing one (`results.io`).
`results.schema.check_field_types` reads its checks from these annotations, so a field and its
type are declared in this one place.

Nested objects (a memory reading, an error, the FLOP counts) stay `dict[str, Any]`: they are
described where they are measured (worker.memory, worker.failure, worker.probes).
"""

from __future__ import annotations

from typing import Any, TypedDict

Number = int | float


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
    error: dict[str, Any]  # type, message, traceback tail of a failure
    started_utc: str
    ended_utc: str
    stages: list[dict[str, Any]]  # a memory reading after each stage
    stage_started_unix: dict[str, Number | None]
    # a null item or value is read as not measured (older files hold some)
    warmup_step_times_s: list[Number | None]
    step_times_s: list[Number | None]
    losses: list[Number | None]
    grad_norms: list[Number]
    measurement_version: int  # results.schema.MEASUREMENT_VERSION of the loop that measured it
    update_norms: list[Number]
    update_norm_steps: list[int]  # the step (warmup included) each norm is of; older files: every step
    update_norms_null_reason: str
    measurement_stop_reason: str
    memory: dict[str, Any]  # peaks of the measured steps
    memory_timeline: list[dict[str, Any]]
    memory_at_failure: dict[str, Any]
    memory_breakdown_bytes: dict[str, Number | None]
    memory_breakdown_null_reason: str
    memory_snapshot: str
    memory_snapshot_recording: bool
    allocator: dict[str, Any]
    device: str
    device_name: str
    dtype: str
    compute_dtype: str
    precision: dict[str, Any]
    n_params: int
    param_bytes: int
    effective_sharding: str
    construction: dict[str, Any]
    data: dict[str, Any]
    expected_model_state_bytes: dict[str, Number | str | None]
    measured_model_state_bytes: dict[str, Number]
    measured_model_state_null_reason: str
    optimizer_vs_model: dict[str, Any]
    optimizer_params_match_model: bool
    optimizer_params_repointed: int
    params_changed: bool
    flops: dict[str, Any]
    prediction: dict[str, Any]
    profile: dict[str, Any]
    gpu_util: dict[str, Any]
    gpu_busy: dict[str, Any]
    step_parts: dict[str, Any]  # analysis.attribution.step_parts of the rank's profiled probe step
    checkpoint: dict[str, Any]
    simulation: dict[str, Any]
    oom: dict[str, Any]
    probe_oom: dict[str, Any]
    oom_snapshot_error: str
    oom_observer_error: str


class CaseResult(TypedDict, total=False):
    """A case's result (`cases/<case id>.json`): status and why, the launch's timings, the
    headline metrics (names in results.metrics) and every rank's record. `case_id`, `case` and
    `status` are always present (results.load refuses a file without them)."""

    schema_version: int
    case_id: str
    case: dict[str, Any]  # plan.case.Case.to_dict()
    status: str  # results.schema.STATUSES
    reason: str
    failed_rank: int | None
    failed_stage: str | None
    returncode: int | None
    started_utc: str | None
    launched_unix: Number | None
    finished_unix: Number | None
    duration_s: Number
    log_tail: str
    metrics: dict[str, Any]  # checked against the metric registry (results.schema)
    ranks: list[RankRecord]
    simulation: dict[str, Any]  # --bench-simulate-world-size: what was simulated
    repeat: int | None  # which repeat this file is (a repeat's own file)
    repeats: list[dict[str, Any]]  # merged repeats: each one's status, duration, median
    step_times_s_by_repeat: list[list[Number]]
    time_split_s: dict[str, Number] | None
    leftover_pids: list[int]
    launch: dict[str, Any]  # multi-node: nnodes, node_rank, rendezvous, note


REQUIRED_RESULT_FIELDS = ("case_id", "case", "status")
