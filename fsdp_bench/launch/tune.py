"""The tuner's driving loop (`--bench-tune`): predict, probe, measure in rounds through the
sweep session, write the answer. Every decision is a pure function of `analysis.tune`; this
module only runs cases (`SweepSession.run_round`, so each is an ordinary result in the run
folder, and a round's repeats run round-robin over its cases, never one case's back to back:
launch.rounds says why) and records what happened. No torch, no pytest.

Resumable like any sweep: the plan is a function of the measurements, so a resumed tuning
replays the same rounds from the results already on disk (their cases are not run again) and
goes on where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable

from fsdp_bench.analysis.tune import (
    TuneLog,
    TuneRequest,
    choose_probe,
    fit_step_model,
    leader,
    measured_from_result,
    plan_round,
    predict_case,
    prior_model,
    rank_predictions,
    split_by_budget,
    survivors,
    tune_answer,
)
from fsdp_bench.launch.session import SweepSession
from fsdp_bench.plan.case import Case
from fsdp_bench.results.io import write_json_atomic
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import CaseResult, TuneAnswer

MAX_ROUNDS = 20  # a bound the schedule never reaches on a sane grid; guards a loop that would not end

OnResult = Callable[[Case, CaseResult], None]


class TuneError(RuntimeError):
    """The grid cannot be tuned (a model without shapes); one line for the user."""


def _measure(
    session: SweepSession,
    log: TuneLog,
    batch: list[tuple[Case, int]],
    kind: str,
    model,
    on_result: OnResult,
    predictions,
) -> None:
    by_id = {p.case.id: p for p in predictions}
    entry = {"round": len(log.rounds), "kind": kind, "runs": []}
    for case, _ in batch:
        if case.id not in log.predicted_step_s and case.id in by_id:
            log.predicted_step_s[case.id] = model.step_s(by_id[case.id])  # the prediction it was chosen on
    for case, result in session.run_round(batch):
        on_result(case, result)
        log.measured[case.id] = measured_from_result(result)
        m = log.measured[case.id]
        entry["runs"].append(
            {
                "case_id": case.id,
                "repeat_count": m.repeats,
                "status": m.status,
                "predicted_step_s": log.predicted_step_s.get(case.id),
                "speed_tokens_per_s": m.tokens_per_s,
                "speed_low_tokens_per_s": m.tokens_per_s_low,
                "speed_high_tokens_per_s": m.tokens_per_s_high,
            }
        )
    log.rounds.append(entry)


def _refit(prior, predictions, log: TuneLog):
    by_id = {p.case.id: p for p in predictions}
    pairs = [(by_id[i], m.step_s) for i, m in log.measured.items() if i in by_id and m.step_s]
    return fit_step_model(prior, pairs)


def run_tune(
    session: SweepSession,
    request: TuneRequest,
    *,
    budget_gib: float | None,
    max_repeats: int,
    time_budget_s: float | None,
    on_result: OnResult,
) -> TuneAnswer:
    """Tune one model's grid; returns the answer, also written to RUN/tune/<request id>.json."""
    try:
        predictions = [predict_case(c) for c in request.cases]
    except (ValueError, KeyError, OSError) as exc:
        raise TuneError(f"--bench-tune: cannot predict {request.model}: {exc}") from None
    fitting, skipped, boundary = split_by_budget(predictions, budget_gib)
    prior = prior_model(request.cases[0])
    model, log = prior, TuneLog()
    stopped = "no configuration is predicted to fit the budget" if not fitting else ""
    if fitting:
        _measure(
            session, log, [(p.case, 1) for p in choose_probe(fitting, prior)], "probe", model, on_result, predictions
        )
    if boundary is not None:
        _measure(session, log, [(boundary.case, 1)], "boundary", model, on_result, predictions)
    while fitting and not stopped:
        model = _refit(prior, predictions, log)
        if time_budget_s is not None and log.spent_s() >= time_budget_s:
            stopped = f"time budget spent ({log.spent_s():.0f} of {time_budget_s:g} case-seconds)"
            break
        batch = plan_round(
            rank_predictions(fitting, model), log.measured, model, budget_gib=budget_gib, max_repeats=max_repeats
        )
        if not batch or len(log.rounds) >= MAX_ROUNDS:
            stopped = _why_done(log, budget_gib, max_repeats)
            break
        kind = "repeat" if all(case.id in log.measured for case, _ in batch) else "explore"
        _measure(session, log, batch, kind, model, on_result, predictions)
    answer = tune_answer(
        request, log, model, skipped, budget_gib=budget_gib, max_repeats=max_repeats, stopped=stopped, boundary=boundary
    )
    write_json_atomic(session.layout.tune_file(request.id), answer, shape=TuneAnswer, overwrite=True)
    return answer


def _why_done(log: TuneLog, budget_gib: float | None, max_repeats: int) -> str:
    if leader(log.measured, budget_gib) is None:
        return "no measured configuration trained within the budget"
    tied = survivors(log.measured, budget_gib)
    if len(tied) < 2:
        return "the leader is separated from every other measured case beyond noise, and no unmeasured case is predicted to reach it"
    return f"{len(tied)} configurations still tied within noise after {max_repeats} repeat(s); no unmeasured case is predicted to reach them"


def answer_lines(answer: TuneAnswer) -> list[str]:
    """The tuning's answer for the terminal."""
    cost = answer["cost"]
    ratio = f"{100 * cost['ratio']:.0f}%" if cost["ratio"] is not None else "?"
    lines = [
        f"tune {answer['model']}: pick {answer['pick'] or 'none'}"
        + (f"; tied within noise: {', '.join(answer['tied'])}" if answer["tied"] else ""),
        f"  stopped: {answer['stopped']}",
        f"  cost: {cost['spent_case_s']:.0f} case-seconds on {cost['measured_cases']} of {cost['grid_cases']} cases, "
        f"{ratio} of the full grid's estimated {cost['full_grid_case_s']:.0f} at {answer['max_repeats']} repeat(s)",
    ]
    over = [s for s in answer["skipped"] if s.get(M.predicted_peak_gib) is not None]  # Skip's field, the metric's name
    if over:
        lines.append(f"  skipped {len(over)} case(s) predicted not to fit {answer['budget_gib']:g} GiB")
    for s in answer["skipped"]:
        if s.get(M.predicted_peak_gib) is None:
            lines.append(f"  skipped {s['case_id']}: {s['reason']}")
    check = answer.get("boundary_check")
    if check:
        lines.append(
            f"  boundary check {check['case_id']}: predicted {check['predicted_peak_in_gib']:.4g} GiB, measured "
            f"{check['measured_peak_in_gib']} GiB, over the budget when measured: {check['over_budget_when_measured']}"
        )
    return lines


def tune_item(state, request, write_live) -> dict:
    """One `--bench-tune` test: the tuning of `request`'s grid through the sweep's session (`state`,
    a launch.progress.BenchState), each measured case's live line and then the answer written with
    `write_live`. Raises DiskFull, SessionError or TuneError for the plugin to turn into a stop."""

    def on_result(case, result) -> None:
        line = state.progress.finish_case(f"{request.id}::{case.id}", case.id, result)
        if line:
            write_live(line)

    sweep = state.sweep
    answer = run_tune(
        state.session,
        request,
        budget_gib=sweep.budget_gib,
        max_repeats=sweep.repeats,
        time_budget_s=sweep.tune_time_s,
        on_result=on_result,
    )
    for line in answer_lines(answer):
        write_live(line)
    return answer
