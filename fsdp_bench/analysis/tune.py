"""Autotune's planning, pure (no torch, no processes): predict every case of a grid, calibrate the
step-time model on the cases measured so far, and decide what to measure next (`--bench-tune`).

Prediction (`analysis.step_model`). Per case and rank, one optimizer step costs

    step_s = c_flop x FLOPs + c_byte x wire bytes + c_micro x micro-steps

FLOPs from the one formula (`analysis.duration.case_flops_per_token` x tokens per rank); wire bytes from
the communication model (`analysis.comm_model.comm_volume`, each collective weighted by its ring
factor); micro-steps = grad accumulation (Python, kernel launches, optimizer bookkeeping). The
three coefficients start at the published or documented rates `analysis.duration` uses (a device
FLOP/s, PRIOR_BYTES_PER_S, a per-micro-step overhead) and are refitted after every round on the
cases measured so far: least squares on relative error, pulled toward those priors (a ridge of
PRIOR_WEIGHT), so two measurements move them sensibly and twenty pin them down. The first round
is the probe: two cases of the grid itself, chosen far apart in (FLOPs, bytes), measured once;
that is the few-second device and bandwidth probe on CPU, and on a GPU as well.

Peak memory: `analysis.fit.predict_peak_bytes`; under a budget a case whose prediction plus FIT_MARGIN exceeds it is
skipped, "predicted not to fit", except the boundary one (the smallest predicted peak above the budget), which is
measured once to check the prediction. A pick is only ever a measured case whose measured peak is within the budget.

The schedule (a racing scheme in the spirit of successive halving, with the prediction as prior): after the probe,
each round measures once the unmeasured fitting cases that could still beat the leader (predicted speed x (1 + model
error) at or above the leader's measured speed), best predicted first, at most ROUND_SIZE; and gives every measured
case whose tokens/s interval overlaps the leader's (`report.recommend`'s rule, at `results.stats.CONFIDENCE`) more
repeats, doubling up to `--bench-repeats`, when that race could separate each of them from the leader
(`worth_racing`); once no race could (the tie is final) under a drift as wide as the model's error, only cases that
could beat the leader beyond the drift are still explored, the others named (`exploring`). Before racing, the
leader's unmeasured neighbours (one grid step along accumulation) are measured once. It stops when nothing is left
to measure: one leader separated beyond noise, or ties that the planned repeats could not split; or when the time
budget is spent.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fsdp_bench.analysis.drift import MIN_DRIFT_DOF, Drift, drift_band, measured_drift
from fsdp_bench.analysis.fit import FIT_MARGIN
from fsdp_bench.analysis.run_noise import speed_interval, widened
from fsdp_bench.analysis.step_model import Prediction, StepModel
from fsdp_bench.analysis.tune_ties import could_win_alone, drift_outweighs_model, tie_is_final, worth_racing
from fsdp_bench.plan.case import Case, skip_reason
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import TUNE_SCHEMA_VERSION, CaseResult, TuneAnswer, TuneDrift, TuneMeasured, TuneRound
from fsdp_bench.results.schema import GIB
from fsdp_bench.results.trained import untrained_reason

PROBE_CASES = 2  # round 0: cases of the grid measured once to calibrate the model
ROUND_SIZE = 3  # at most this many new cases measured in one round
# The memory a budget is checked against: what the allocator holds when known, else RSS (CPU);
# the same order as the recommendation's (report.recommend.MEMORY_COLUMNS).
MEASURED_MEMORY = (M.peak_reserved_gib, M.peak_allocated_gib, M.peak_rss_gib)


@dataclass(frozen=True)
class Measured:
    """One measured case as the tuner sees it (from its ordinary result)."""

    case_id: str
    status: str
    step_s: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_low: float | None = None  # at the step-time median's interval bounds
    tokens_per_s_high: float | None = None
    peak_gib: float | None = None
    repeats: int = 0
    case_seconds: float = 0.0  # wall time of every repeat run so far
    spread_pct: float | None = None  # the repeats' step-time medians, (max - min) / median
    repeat_step_s: tuple[float, ...] = ()  # each repeat's step-time median, in repeat order


def measured_from_result(result: CaseResult) -> Measured:
    """The tuner's view of a case result (merged over its repeats)."""
    metrics = result.get("metrics") or {}
    case = result.get("case") or {}
    case_id = result.get("case_id") or Case.from_dict(case).id
    repeats = len(result.get(M.repeats) or []) or 1
    if result.get("status") != "ok" or untrained_reason(metrics):
        return Measured(
            case_id,
            result.get("status") or "failed",
            repeats=repeats,
            case_seconds=float(result.get("duration_s") or 0.0),
        )
    step, speed = metrics.get(M.step_time_s_median), metrics.get(M.tokens_per_s_per_device)
    band = speed_interval(metrics) or (speed, speed)
    peak = next((metrics[k] for k in MEASURED_MEMORY if isinstance(metrics.get(k), (int, float))), None)
    seconds, spread = float(result.get("duration_s") or 0.0), metrics.get(M.repeat_spread_pct)
    medians = tuple(x for x in metrics.get(M.repeat_step_time_s_medians) or [step] if isinstance(x, (int, float)))
    return Measured(case_id, "ok", step, speed, band[0], band[1], peak, repeats, seconds, spread, medians)


def fits_budget(m: Measured, budget_gib: float | None) -> bool:
    """A measured case may be picked under the budget only with a measured peak within it."""
    return budget_gib is None or (m.peak_gib is not None and m.peak_gib <= budget_gib)


def tuning_drift(measured: Mapping[str, Measured]) -> Drift | None:
    """The drift measured so far: the pooled spread of every ok case's repeats (analysis.drift)."""
    return measured_drift(m.repeat_step_s for m in measured.values() if m.status == "ok")


def noise_band(m: Measured, drift: Drift | None = None) -> tuple[float, float]:
    """The case's tokens/s interval, a single run's widened for the assumed run-to-run noise
    (run_noise), then for the drift measured during the tuning (analysis.drift)."""
    low, high = widened(m.tokens_per_s_low or 0.0, m.tokens_per_s_high or 0.0, m.repeats, m.spread_pct)
    return drift_band(low, high, m.repeats, drift)


def within_noise(leader: Measured, other: Measured, drift: Drift | None = None) -> bool:
    """Whether `other` cannot be told apart from the leader: its tokens/s band reaches the
    leader's (report.recommend's overlap rule, with the widenings above)."""
    return other.case_id == leader.case_id or noise_band(other, drift)[1] >= noise_band(leader, drift)[0]


@dataclass(frozen=True)
class Skip:
    case_id: str
    reason: str
    predicted_peak_gib: float | None = None  # None: skipped at collection, as the sweep skips it


def split_by_budget(
    predictions: Sequence[Prediction], budget_gib: float | None, margin: float = FIT_MARGIN
) -> tuple[list[Prediction], list[Skip], Prediction | None]:
    """(predicted to fit, skipped with the reason, the boundary case to measure). The boundary is
    the skipped case with the smallest predicted peak: measuring it checks the prediction."""
    if budget_gib is None:
        return list(predictions), [], None
    fit, out = [], []
    for p in predictions:
        (fit if p.peak_bytes * (1 + margin) <= budget_gib * GIB else out).append(p)
    skipped = [
        Skip(
            p.case.id,
            f"predicted not to fit: {p.peak_bytes / GIB:.4g} GiB + {margin:.0%} margin > {budget_gib:g} GiB",
            p.peak_bytes / GIB,
        )
        for p in out
    ]
    boundary = min(out, key=lambda p: p.peak_bytes, default=None)
    return fit, skipped, boundary


def rank_predictions(predictions: Sequence[Prediction], model: StepModel) -> list[Prediction]:
    """Fastest predicted tokens/s per device first (ties: the smaller predicted peak)."""
    return sorted(predictions, key=lambda p: (-model.tokens_per_s(p), p.peak_bytes, p.case.id))


def choose_probe(predictions: Sequence[Prediction], model: StepModel, n: int = PROBE_CASES) -> list[Prediction]:
    """The probe: the best predicted case, then the ones among the faster half whose predicted
    time splits most differently between compute, communication and per-micro-step overhead,
    so that two measurements constrain the coefficients as far apart as the grid allows."""
    ranked = rank_predictions(predictions, model)
    if not ranked:
        return []

    def shares(p: Prediction) -> list[float]:
        parts = [c * x for c, x in zip(model.coefficients(), p.features())]
        total = sum(parts) or 1.0
        return [x / total for x in parts]

    chosen = [ranked[0]]
    pool = ranked[1 : max(2, (len(ranked) + 1) // 2)]
    while len(chosen) < n and pool:
        far = max(pool, key=lambda p: min(sum(abs(a - b) for a, b in zip(shares(p), shares(c))) for c in chosen))
        chosen.append(far)
        pool.remove(far)
    return chosen


def leader(measured: Mapping[str, Measured], budget_gib: float | None) -> Measured | None:
    """The fastest measured case that trained and fits the budget by its measured peak."""
    ok = [m for m in measured.values() if m.status == "ok" and m.tokens_per_s and fits_budget(m, budget_gib)]
    return max(ok, key=lambda m: (m.tokens_per_s, -(m.peak_gib or 0.0)), default=None)


def survivors(measured: Mapping[str, Measured], budget_gib: float | None) -> list[Measured]:
    """The leader and every measured, fitting case within noise of it (the drift measured so far
    included), fastest first."""
    best = leader(measured, budget_gib)
    if best is None:
        return []
    drift = tuning_drift(measured)
    ok = [m for m in measured.values() if m.status == "ok" and m.tokens_per_s and fits_budget(m, budget_gib)]
    return sorted((m for m in ok if within_noise(best, m, drift)), key=lambda m: -m.tokens_per_s)


def lone_winner_allowed(measured: Mapping[str, Measured], best: Measured) -> bool:
    """A single winner may be claimed only on measured drift (analysis.drift.MIN_DRIFT_DOF) and a
    leader measured more than once: one measurement in a quiet minute is not a speed. A leader with
    no other measured case to beat (a one-case grid) is trivially alone."""
    if not any(m.status == "ok" and m.case_id != best.case_id for m in measured.values()):
        return True
    drift = tuning_drift(measured)
    return drift is not None and drift.enough and best.repeats >= 2


def plan_round(
    ranked: Sequence[Prediction],
    measured: Mapping[str, Measured],
    model: StepModel,
    *,
    budget_gib: float | None,
    max_repeats: int,
    round_size: int = ROUND_SIZE,
) -> list[tuple[Case, int]]:
    """The next round as (case, total repeats wanted); [] when tuning is done.

    Explore first: the unmeasured cases that could still beat the leader, given the model's error
    (once the measured tie is final, beyond the drift: `exploring`), with the leader once more (the
    drift's control, `control`). Then race: the survivors within
    noise of the leader get their repeats doubled, up to `max_repeats`, when that could end the tie
    (`worth_racing`); a tie left unraced gets its leader measured twice (TIE_PICK_MEASUREMENTS). A
    lone leader is done only once the drift is measured and it was measured twice
    (`lone_winner_allowed`); until then the control runs alone."""
    best = leader(measured, budget_gib)
    unmeasured = [p for p in ranked if p.case.id not in measured]
    if best is None:
        return [(p.case, 1) for p in unmeasured[:round_size]]
    promising = exploring(ranked, measured, model, budget_gib=budget_gib, max_repeats=max_repeats)
    nearby = leader_neighbours(ranked, measured, best.case_id)
    fresh = [(p.case, 1) for p in (promising[:round_size] or nearby)]
    if fresh:
        return fresh + control(ranked, best)
    tied = survivors(measured, budget_gib)
    if len(tied) < 2:
        return [] if lone_winner_allowed(measured, best) else control(ranked, best, cap=MIN_DRIFT_DOF + 1)
    by_id = {p.case.id: p.case for p in ranked}
    race = [
        (by_id[m.case_id], min(max_repeats, 2 * m.repeats))
        for m in worth_racing(tied, tuning_drift(measured), max_repeats)
        if m.repeats < max_repeats and m.case_id in by_id
    ]
    return race or control(ranked, best, cap=TIE_PICK_MEASUREMENTS)


def exploring(
    ranked: Sequence[Prediction],
    measured: Mapping[str, Measured],
    model: StepModel,
    *,
    budget_gib: float | None,
    max_repeats: int,
) -> list[Prediction]:
    """The unmeasured cases still worth a first run, best predicted first: those whose prediction
    x (1 + the model's error) reaches the leader's measured speed (they could still beat it). Once
    the measured tie is final (analysis.tune_ties.tie_is_final), only those that could beat the
    leader beyond the drift (`could_win_alone`): the others could only join the tie or leave it,
    so they are named in the answer (`unmeasured_within_noise`) instead of run."""
    best = leader(measured, budget_gib)
    if best is None or not best.tokens_per_s:
        return [p for p in ranked if p.case.id not in measured]
    drift = tuning_drift(measured)
    promising = _could_reach_leader(ranked, measured, model, best)
    if drift is None or not drift_outweighs_model(drift, model.error):
        return promising
    if not tie_is_final(survivors(measured, budget_gib), drift, max_repeats):
        return promising
    return [p for p in promising if could_win_alone(model.optimistic_tokens_per_s(p), best, drift, max_repeats)]


def _could_reach_leader(
    ranked: Sequence[Prediction], measured: Mapping[str, Measured], model: StepModel, best: Measured | None
) -> list[Prediction]:
    """The unmeasured cases, best predicted first, whose optimistic speed reaches the leader's."""
    if best is None or not best.tokens_per_s:
        return []
    return [p for p in ranked if p.case.id not in measured and model.optimistic_tokens_per_s(p) >= best.tokens_per_s]


def unmeasured_within_noise(
    ranked: Sequence[Prediction], measured: Mapping[str, Measured], model: StepModel, best: Measured | None
) -> list[str]:
    """The unmeasured cases whose prediction x (1 + the model's error) reaches the leader's
    measured speed: left unmeasured when the time budget stopped the exploring, or when the measured
    tie was final and they could not beat its leader beyond the drift (`exploring`). The answer
    names them; no single winner beside them."""
    return [p.case.id for p in _could_reach_leader(ranked, measured, model, best)]


def runs_left(
    ranked: Sequence[Prediction],
    measured: Mapping[str, Measured],
    model: StepModel,
    *,
    budget_gib: float | None,
    max_repeats: int,
    round_size: int = ROUND_SIZE,
) -> int:
    """The tuner's own estimate of the runs still to come (not the full grid's): every case still
    predicted to reach the leader once, a control per exploring round, and the cases tied now
    raced to `max_repeats`. The schedule is decided by what is measured, so this is re-estimated
    after every round."""
    best = leader(measured, budget_gib)
    unmeasured = [p for p in ranked if p.case.id not in measured]
    if best is None:
        return len(unmeasured)
    promising = len(exploring(ranked, measured, model, budget_gib=budget_gib, max_repeats=max_repeats))
    controls = max(0, CONTROL_REPEATS - best.repeats) if promising else 0
    tied = survivors(measured, budget_gib)
    racing = worth_racing(tied, tuning_drift(measured), max_repeats) if len(tied) > 1 else []
    race = sum(max(0, max_repeats - m.repeats) for m in racing)
    if len(tied) > 1:  # a race, or the tie's pick measured TIE_PICK_MEASUREMENTS times
        tail = race or max(0, TIE_PICK_MEASUREMENTS - best.repeats)
    else:
        tail = 0 if lone_winner_allowed(measured, best) else max(0, MIN_DRIFT_DOF + 1 - best.repeats)
    return promising + min(controls, math.ceil(promising / round_size)) + tail


CONTROL_REPEATS = 3  # the leader is re-measured in each exploring round until it has this many
# A tie is answered with its fastest case as the pick: never one measurement, which may have been
# taken in a quiet minute (analysis.drift), so a tie left unraced re-measures its leader first.
TIE_PICK_MEASUREMENTS = 2


def control(ranked: Sequence[Prediction], best: Measured, cap: int = CONTROL_REPEATS) -> list[tuple[Case, int]]:
    """The leader once more, as the drift's control, while it has fewer than `cap` repeats: its
    measurements lie rounds apart, so their spread is what the machine changed meanwhile (even
    beyond --bench-repeats, which bounds the race, not the machine's measurement)."""
    case = next((p.case for p in ranked if p.case.id == best.case_id), None)
    return [(case, best.repeats + 1)] if case is not None and best.repeats < cap else []


# The grid axes a leader's neighbours step along: where the step model is least trustworthy. Its
# per-micro-step term prices accumulation (the optimizer step amortized over micro-batches) with
# one coefficient for every strategy; on a CPU llama3_tiny grid it priced accumulation 2 too slow,
# and the tuner stopped at accumulation 1, 30% behind the grid's best. Batch size follows FLOPs,
# which the model gets right; stepping along it too measured whole small grids.
# Forward and backward prefetch change when communication overlaps compute, which the additive
# step model cannot price: the leader's prefetch neighbours are measured instead of predicted.
NEIGHBOUR_AXES = ("grad_accum", "forward_prefetch", "backward_prefetch")


def leader_neighbours(ranked: Sequence[Prediction], measured: Mapping[str, Measured], best_id: str) -> list[Prediction]:
    """The unmeasured cases one grid step from the leader along a NEIGHBOUR_AXES axis (all else
    equal): measured once before the tuner stops, so a model biased along an axis cannot hide the
    best case next to its pick."""
    by_id = {p.case.id: p for p in ranked}
    if best_id not in by_id:
        return []
    best = by_id[best_id].case
    out = []
    for axis in NEIGHBOUR_AXES:
        values = sorted({getattr(p.case, axis) for p in ranked})
        at = values.index(getattr(best, axis))
        for value in values[max(at - 1, 0) : at + 2]:
            twin = dataclasses.replace(best, **{axis: value})
            if twin.id in by_id and twin.id not in measured and twin.id != best.id:
                out.append(by_id[twin.id])
    return out


@dataclass(frozen=True)
class TuneRequest:
    """One `--bench-tune` item: every case of one model's grid, tuned as one pytest test."""

    model: str
    cases: tuple[Case, ...]  # the ones that can run here
    skipped: tuple[Skip, ...] = ()  # the ones the sweep skips at collection (plan.case.skip_reason)

    @property
    def id(self) -> str:
        return f"tune-{self.model.replace('/', '_').replace(':', '_')}"


COMPILE_ON_CPU = (
    "torch.compile is tuned on a GPU only: on CPU every case pays its compilation (~30 s, "
    "analysis.duration.COMPILE_S) for kernels that say nothing of a GPU's"
)


def tune_skip_reason(case: Case) -> str | None:
    """Why the tuner does not launch a case: the sweep's reason (plan.case.skip_reason), or a
    compiled case on CPU (COMPILE_ON_CPU)."""
    return skip_reason(case) or (COMPILE_ON_CPU if case.compile and case.device == "cpu" else None)


def tune_requests(cases: Sequence[Case]) -> list[TuneRequest]:
    """One request per model, its cases in grid order; a case the sweep would skip at collection
    (offload or accelerate on CPU, fp16 on CPU...) is never launched, as in the sweep: it is named
    with the sweep's reason instead."""
    requests = []
    for model in dict.fromkeys(c.model for c in cases):
        mine = [c for c in cases if c.model == model]
        skipped = tuple(Skip(c.id, reason) for c in mine if (reason := tune_skip_reason(c)))
        runnable = tuple(c for c in mine if not tune_skip_reason(c))
        requests.append(TuneRequest(model, runnable, skipped))
    return requests


@dataclass
class TuneLog:
    """What the driving loop has done so far: rounds, the prediction each case had when it was
    scheduled, and the measurements (the answer is computed from this)."""

    rounds: list[TuneRound] = field(default_factory=list)
    predicted_step_s: dict[str, float] = field(default_factory=dict)
    measured: dict[str, Measured] = field(default_factory=dict)

    def spent_s(self) -> float:
        return sum(m.case_seconds for m in self.measured.values())


def full_grid_seconds(cases: Sequence[Case], measured: Mapping[str, Measured], repeats: int) -> float:
    """The full grid's case-seconds at `repeats`: a measured case at its measured seconds per
    repeat, the others at analysis.duration's estimate scaled by the median measured/estimated
    ratio of this run (the estimate's constants are a loaded 2-core VM's; this machine's differ)."""
    from fsdp_bench.analysis.duration import case_seconds

    by_id = {c.id: c for c in cases}
    per_repeat = {i: m.case_seconds / max(1, m.repeats) for i, m in measured.items() if m.case_seconds > 0}
    ratios = sorted(per_repeat[i] / case_seconds(by_id[i]) for i in per_repeat if i in by_id)
    scale = ratios[len(ratios) // 2] if ratios else 1.0
    return repeats * sum(per_repeat.get(c.id, case_seconds(c) * scale) for c in cases)


def drift_record(drift: Drift) -> TuneDrift:
    """The drift measured during the tuning, for the answer (analysis.drift)."""
    return {"sd_log": drift.sd_log, "dof": drift.dof, "pooled_cases": drift.cases, "one_run_band_pct": drift.pct}


def _measured_row(case_id: str, m, predicted: float | None, budget_gib: float | None) -> TuneMeasured:
    """One measured case of the answer: predicted vs measured step time, speed, peak, cost."""
    return {
        "case_id": case_id,
        "status": m.status,
        "repeat_count": m.repeats,
        "case_seconds": m.case_seconds,
        "predicted_step_s": predicted,
        "measured_step_s": m.step_s,
        "error_pct": 100 * (predicted - m.step_s) / m.step_s if predicted and m.step_s else None,
        "speed_tokens_per_s": m.tokens_per_s,
        "speed_low_tokens_per_s": m.tokens_per_s_low,
        "speed_high_tokens_per_s": m.tokens_per_s_high,
        "peak_gib": m.peak_gib,
        "fits_budget": fits_budget(m, budget_gib),
    }


def tune_answer(
    request: TuneRequest,
    log: TuneLog,
    model: StepModel,
    skipped: Sequence[Skip],
    *,
    budget_gib: float | None,
    max_repeats: int,
    stopped: str,
    boundary: Prediction | None = None,
    ranked: Sequence[Prediction] = (),
) -> TuneAnswer:
    """The tuning's answer as JSON: the pick, its ties, what was skipped, predicted vs measured
    step time of every measured case, the rounds and the cost against the full grid."""
    tied = survivors(log.measured, budget_gib)
    rows = [
        _measured_row(case_id, m, log.predicted_step_s.get(case_id), budget_gib) for case_id, m in log.measured.items()
    ]
    full = full_grid_seconds(request.cases, log.measured, max_repeats)
    check = None
    if boundary is not None and boundary.case.id in log.measured:
        peak = log.measured[boundary.case.id].peak_gib
        check = {
            "case_id": boundary.case.id,
            "predicted_peak_in_gib": boundary.peak_bytes / GIB,
            "measured_peak_in_gib": peak,
            "over_budget_when_measured": None if peak is None else peak > (budget_gib or math.inf),
        }
    best = leader(log.measured, budget_gib)
    drift = tuning_drift(log.measured)
    unreached = unmeasured_within_noise(ranked, log.measured, model, best)
    alone = len(tied) == 1 and best is not None and lone_winner_allowed(log.measured, best) and not unreached
    return {
        "schema_version": TUNE_SCHEMA_VERSION,
        "model": request.model,
        "single_winner": alone,
        "unmeasured_within_noise": unreached,
        "drift": None if drift is None else drift_record(drift),
        "budget_gib": budget_gib,
        "max_repeats": max_repeats,
        "stopped": stopped,
        "pick": tied[0].case_id if tied else None,
        "tied": [m.case_id for m in tied[1:]],
        "skipped": [vars(s) for s in (*request.skipped, *skipped)],
        "boundary_check": check,
        "measured": rows,
        "rounds": log.rounds,
        "step_model": model.describe(),
        "cost": {
            "spent_case_s": log.spent_s(),
            "full_grid_case_s": full,
            "ratio": log.spent_s() / full if full > 0 else None,
            "grid_cases": len(request.cases),
            "measured_cases": len(log.measured),
        },
    }
