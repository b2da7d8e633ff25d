"""The files the measurement scripts write (scripts/measure_autotune.py, measure_peak_prediction.py,
measure_fit_answers.py): one declared shape each, checked on write as the run's own records are
(`results.io.write_json_atomic(..., shape=)`). Kept apart from results.records, which declares the
files a run is made of."""

from __future__ import annotations

from typing import Any, TypedDict

from fsdp_bench.results.metrics import M
from fsdp_bench.results.readings import Number
from fsdp_bench.results.records import CaseFields, TuneDrift


class LoadSummary(TypedDict):
    """The 1-minute load average sampled while a run went on."""

    min: Number
    mean: Number
    max: Number
    samples: int


class AutotuneCheck(TypedDict, total=False):
    """One grid of scripts/measure_autotune.py: the tuner's answer judged against the exhaustive
    grid run with repeats (interleaved), with the cost and the load during both runs."""

    grid: str
    cases: int
    pick: str | None
    single_winner: bool | None
    tied: list[str]
    true_best: str
    truth_tied_with_best: list[str]
    gap_pct: Number | None
    within_noise: bool
    tied_set_holds_best: bool
    unmeasured_within_noise: int  # cases the tuner named as never run, predicted within the pick's noise
    best_unmeasured_within_noise: bool  # the truth's best is one of them
    drift: TuneDrift | None
    stopped: str
    tune_case_s: Number
    tune_runs: int
    runs_by_purpose: dict[str, int]  # launch.tune.runs_by_purpose: probe, explore, control, repeat
    grid_case_s: Number
    ratio: Number | None
    tune_case_s_truth_priced: Number | None  # the tuner's runs at the truth's seconds per run of each case
    ratio_truth_priced: Number | None  # that over grid_case_s: the cost at the truth's load
    load_truth: LoadSummary
    load_tune: LoadSummary
    wall_s: dict[str, Number]
    runs: dict[str, str]


class AutotuneMeasurement(TypedDict, total=False):
    """scripts/measure_autotune.py --out: the command, the burners beside it, one row per grid;
    `truth`: the --truth-only file whose ground truth the rows were judged against (absent when
    the script ran the ground truth itself)."""

    command: list[str]
    burn: int
    rows: list[AutotuneCheck]
    truth: str


class AutotuneTruthCase(TypedDict, total=False):
    """One ground-truth case as measure_autotune judges it: id, status, case-seconds over its
    repeats, the repeats and the metrics the noise band reads (absent when the case has none)."""

    case_id: str
    status: str | None
    duration_s: Number
    repeats: int
    tokens_per_s_per_device: Number
    step_time_s_median: Number
    step_time_s_median_ci_low: Number
    step_time_s_median_ci_high: Number
    step_time_median_ci_level_pct: Number
    repeat_spread_pct: Number
    params_changed: bool


# What a ground truth keeps of each case's metrics (AutotuneTruthCase's metric fields): what
# measure_autotune's judgement reads, and what replay_autotune rebuilds a case from.
TRUTH_METRICS = (
    M.tokens_per_s_per_device,
    M.step_time_s_median,
    M.step_time_s_median_ci_low,
    M.step_time_s_median_ci_high,
    M.step_time_median_ci_level_pct,
    M.repeat_spread_pct,
    M.params_changed,
)


class AutotuneTruth(TypedDict):
    """One grid's exhaustive run with repeats (interleaved): its run folder, load, wall time, cases."""

    grid: str
    run: str
    load: LoadSummary
    wall_s: Number
    cases: list[AutotuneTruthCase]


class AutotuneTruthRun(TypedDict):
    """scripts/measure_autotune.py --truth-only --out: the ground truth, reused by --truth FILE
    (`options`: the grid options and repeats every tuner run judged against it must use)."""

    command: list[str]
    burn: int
    repeats: int
    options: list[str]
    truths: list[AutotuneTruth]


class PeakCheckRow(TypedDict, total=False):
    """One case of scripts/measure_peak_prediction.py --holdout: the peak model's prediction (and
    on real ranks the fake-tensor estimator's) against the measured rank-0 peak."""

    case: str  # the case id
    case_fields: CaseFields  # the case, its model path as it was then (rebuilt from `seed` to re-predict)
    seed: int  # plan.generated_configs seed of its model
    model_type: str
    ranks: str  # "real" (torchrun, gloo) or "simulated" (rank 0 on the fake process group)
    status: str  # ok, or why no peak was measured
    reason: str
    phase: str  # the predicted peak's moment of the step
    predicted_bytes: Number
    measured_bytes: Number
    peak_prediction_error_pct: Number
    estimated_bytes: Number  # real ranks: worker.estimate's probe peak
    peak_estimate_error_pct: Number
    measure_s: Number  # wall seconds the measurement took (a real case's whole torchrun)
    estimate_s: Number  # real ranks: wall seconds of the estimator


class ScriptRun(TypedDict, total=False):
    """What every measurement script's file says of its run (PeakCheckRun, FitAnswerRun)."""

    schema_version: int
    command: str
    utc_time: str
    git_sha: str | None
    torch: str
    load_average: list[Number]  # os.getloadavg() at the start and at the end
    wall_s: Number


class PeakCheckRun(ScriptRun, total=False):
    """The file scripts/measure_peak_prediction.py --holdout writes: every case and the summary."""

    predicted_at: str | None  # --repredict: the git sha whose peak model re-scored these measurements
    seeds: list[int]
    cases: list[PeakCheckRow]
    summary: dict[str, Any]
    # --add-real-ranks: the run that measured the real-rank rows of a file whose simulated rows an
    # earlier run measured (the file's own facts are that earlier run's)
    real_ranks_added: ScriptRun


class FitAnswerRow(TypedDict, total=False):
    """One answer of scripts/measure_fit_answers.py: `fit.largest_batch` for a budget, that batch
    run (a simulated rank 0, two steps) and its measured peak against the budget."""

    model: str  # hf:PATH of a shipped config, or generated:SEED
    strategy: str
    world_size: int
    budget_bytes: int
    batch: int  # the largest batch that fits (0: none)
    measured_bytes: int
    used_pct: Number  # measured / budget
    predicted_pct: Number  # the peak model's prediction / budget
    next_batch_pct: Number  # one more sample's prediction with the margin / budget (over 100 %)


class FitAnswerRun(ScriptRun, total=False):
    """The file scripts/measure_fit_answers.py --out writes: every answer and the counts."""

    answers: list[FitAnswerRow]
    summary: dict[str, Any]
