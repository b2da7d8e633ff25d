"""The exploration bound of `--bench-tune` (analysis.tune.exploring, analysis.tune_ties): once the
measured tie is final and one run's drift is as wide as the step model's error, an unmeasured case
that could not beat the leader beyond the drift is named in the answer instead of run. On real
grid cases with hand-made measurements; the replays on the gpt_tiny-96 truth are in docs/autotune.md."""

from __future__ import annotations

import math

from fsdp_bench.analysis.drift import Drift
from fsdp_bench.analysis.step_model import StepModel, predict_case
from fsdp_bench.analysis.tune import (
    Measured,
    TuneLog,
    TuneRequest,
    leader_neighbours,
    plan_round,
    rank_predictions,
    runs_left,
    tune_answer,
    unmeasured_within_noise,
)
from fsdp_bench.analysis.tune_ties import could_separate, could_win_alone, separating_line
from fsdp_bench.plan.case import Case

MODEL_ERROR = 0.1


def _ranked(error: float = MODEL_ERROR):
    cases = [
        Case(strategy=s, model="gpt_tiny", batch_size=b, grad_accum=g, seq_len=32)
        for s in ("ddp", "fsdp1_full_shard", "fsdp2")
        for b in (2, 4)
        for g in (1, 2)
    ]
    model = StepModel(1e-12, 1e-6, 0.0, error=error)
    return rank_predictions([predict_case(c) for c in cases], model), model


def _measured(case_id: str, speed: float, repeats: int = 1, medians: tuple[float, ...] = ()) -> Measured:
    return Measured(
        case_id,
        "ok",
        step_s=1.0,
        tokens_per_s=speed,
        tokens_per_s_low=speed * 0.98,
        tokens_per_s_high=speed * 1.02,
        peak_gib=0.001,
        repeats=repeats,
        case_seconds=10.0,
        repeat_step_s=medians or (1.0,) * repeats,
    )


def _final_tie(sd: float, candidate_ahead: float, pooled: int | None = None):
    """Every case measured but one, the candidate: a leader measured twice, a runner-up 1% behind
    it (a tie no race to 2 repeats ends at drift sd >= 0.01), the rest slow and measured twice with
    medians exp(+-sd) apart (the drift's pool; only the first `pooled` of them when given, the
    others once). The candidate is predicted `candidate_ahead` x the leader's measured speed, and
    is no grid neighbour of the leader (those are measured anyway)."""
    ranked, model = _ranked()
    candidate = ranked[0]
    lead = next(p for p in ranked[1:] if candidate not in leader_neighbours(ranked, {}, p.case.id))
    runner = next(p for p in ranked[1:] if p not in (lead, candidate))
    speed = model.tokens_per_s(candidate) / candidate_ahead
    spread = (math.exp(-sd), math.exp(sd))
    slow = [p for p in ranked if p not in (candidate, lead, runner)]
    twice = slow if pooled is None else slow[:pooled]
    measured = {p.case.id: _measured(p.case.id, speed / 10, *((2, spread) if p in twice else (1,))) for p in slow}
    measured[lead.case.id] = _measured(lead.case.id, speed, 2)
    measured[runner.case.id] = _measured(runner.case.id, 0.99 * speed)
    return ranked, model, measured, candidate


def test_a_final_tie_under_a_drift_wider_than_the_model_names_a_candidate_instead_of_running_it():
    """Drift sd 0.3 (one run's band +-80%, wider than the model's 10%): the leader and a runner-up
    1% behind stay tied at 2 repeats whatever is measured, and a candidate predicted at the leader's
    speed (+10% at most) could only join that tie or leave it. It is not run: the tuner stops, names
    it, and claims no single winner. Without the bound it was explored (one run, plus a control)."""
    ranked, model, measured, candidate = _final_tie(sd=0.3, candidate_ahead=1.0)
    assert plan_round(ranked, measured, model, budget_gib=None, max_repeats=2) == []
    assert runs_left(ranked, measured, model, budget_gib=None, max_repeats=2) == 0
    best = max(measured.values(), key=lambda m: m.tokens_per_s)
    assert unmeasured_within_noise(ranked, measured, model, best) == [candidate.case.id]
    request = TuneRequest("gpt_tiny", tuple(p.case for p in ranked))
    kwargs = {"budget_gib": None, "max_repeats": 2, "stopped": ""}
    answer = tune_answer(request, TuneLog(measured=measured), model, [], ranked=ranked, **kwargs)
    assert not answer["single_winner"] and answer["unmeasured_within_noise"] == [candidate.case.id]
    assert len(answer["tied"]) == 1


def test_on_a_quiet_machine_the_same_candidate_is_run():
    """Drift sd 0.02 (one run's band +-4%, narrower than the model's 10%): a run places a case
    more closely than its prediction, so a candidate is explored as before the bound, even one
    that could not beat the leader beyond the drift (predicted 6% behind it, +10% at most: 3.4%
    ahead, inside the race's reach of 2 x 1.96 x 0.02 / sqrt(2) = 5.5%)."""
    ranked, model, measured, candidate = _final_tie(sd=0.02, candidate_ahead=0.94)
    planned = plan_round(ranked, measured, model, budget_gib=None, max_repeats=2)
    assert (candidate.case, 1) in planned


def test_a_drift_of_too_few_degrees_of_freedom_does_not_bound_the_exploring():
    """The same final tie at drift sd 0.3, but the drift pooled from fewer cases: at 2 degrees of
    freedom (the fewest a tie may be final on, as many as the leader's own three controls give)
    the bound does not fire and the candidate is run; at MIN_BOUND_DOF it does. A loaded held-out
    run stopped after 10 runs, 63% behind the grid's best, on a drift of 2 dof (docs/autotune.md)."""
    from fsdp_bench.analysis.tune import tuning_drift
    from fsdp_bench.analysis.tune_ties import MIN_BOUND_DOF

    def planned_and_dof(pooled: int):
        ranked, model, measured, candidate = _final_tie(sd=0.3, candidate_ahead=1.0, pooled=pooled)
        return candidate, plan_round(ranked, measured, model, budget_gib=None, max_repeats=2), measured

    candidate, planned, measured = planned_and_dof(pooled=1)  # the leader's dof and one slow case's
    assert tuning_drift(measured).dof == 2 < MIN_BOUND_DOF and tuning_drift(measured).enough
    assert (candidate.case, 1) in planned
    _, planned, measured = planned_and_dof(pooled=MIN_BOUND_DOF - 1)
    assert tuning_drift(measured).dof == MIN_BOUND_DOF and planned == []


def test_a_candidate_that_could_beat_the_leader_beyond_the_drift_is_still_run():
    """The bound skips only what could not end the tie: a candidate predicted 3x the leader (its
    optimistic speed beyond the race's reach at sd 0.3, 2 x 1.96 x 0.3 / sqrt(2) = 0.83 in log)
    could be a single winner, so it is explored even though the measured tie is final."""
    ranked, model, measured, candidate = _final_tie(sd=0.3, candidate_ahead=3.0)
    assert (candidate.case, 1) in plan_round(ranked, measured, model, budget_gib=None, max_repeats=2)
    drift, lead = Drift(sd_log=0.3, dof=10, cases=10), _measured("lead", 1000.0, repeats=2)
    reach = 2 * 1.96 * 0.3 / math.sqrt(2)
    assert could_win_alone(1000.0 * math.exp(reach + 0.01), lead, drift, 2)
    assert not could_win_alone(1000.0 * math.exp(reach - 0.01), lead, drift, 2)


def test_what_would_separate_a_final_tie_is_stated_and_holds():
    """The leader and a runner-up 10% apart under drift sd 0.3 at 2 repeats: the line names the
    drift per run below which 2 repeats separate them, and the repeats that would at this drift;
    could_separate agrees at both."""
    drift = Drift(sd_log=0.3, dof=10, cases=10)
    lead, runner = _measured("lead", 1100.0), _measured("runner", 1000.0)
    line = separating_line([lead, runner], drift, 2)
    gap = math.log(1.1)
    below_pct = 100 * math.expm1(gap * math.sqrt(2) / 2)
    repeats = math.floor((2 * 1.96 * 0.3 / gap) ** 2) + 1
    assert "10.0% apart" in line and f"below +-{below_pct:.1f}% per run at 2 repeat(s)" in line
    assert f"or {repeats} repeats each" in line
    sd_below = math.log1p(below_pct / 100) / 1.96 * 0.999
    assert could_separate(lead, runner, Drift(sd_log=sd_below, dof=10, cases=10), 2)
    assert not could_separate(lead, runner, drift, repeats - 1)
    assert could_separate(lead, runner, drift, repeats)


def test_the_stop_line_names_the_unmeasured_cases_and_what_would_separate_the_tie():
    """The driving loop's stop reason (launch.tune) for the bounded tie above: the tie, the
    unmeasured case named beside it, and the drift or repeats that would separate its leader."""
    from fsdp_bench.launch.tune import _unless_unreached, _why_done

    ranked, model, measured, _ = _final_tie(sd=0.3, candidate_ahead=1.0)
    log = TuneLog(measured=measured)
    stopped = _unless_unreached(_why_done(log, None, 2), ranked, log, model, None)
    assert stopped.startswith("too noisy to separate 2 configurations")
    assert "they are tied; no single winner; 1 unmeasured case(s) named beside them" in stopped
    assert "separating the leader from the runner-up (1.0% apart) takes a drift below" in stopped
