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

import time
from collections import Counter
from collections.abc import Callable

from fsdp_bench.analysis.duration import format_duration
from fsdp_bench.analysis.step_model import fit_step_model, predict_case, prior_model
from fsdp_bench.analysis.tune import (
    Skip,
    TuneLog,
    TuneRequest,
    choose_probe,
    leader,
    lone_winner_allowed,
    measured_from_result,
    plan_round,
    rank_predictions,
    runs_left,
    split_by_budget,
    survivors,
    tune_answer,
    tuning_drift,
    unmeasured_within_noise,
)
from fsdp_bench.analysis.tune_ties import separating_line
from fsdp_bench.launch.memory_guard import memory_skip_reason
from fsdp_bench.launch.session import SweepSession
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.devices import available_host_bytes
from fsdp_bench.results.io import write_json_atomic
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import CaseResult, TuneAnswer

MAX_ROUNDS = 20  # a bound the schedule never reaches on a sane grid; guards a loop that would not end

OnResult = Callable[[Case, CaseResult], None]
OnLine = Callable[[str], None]


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
    on_round: OnLine | None = None,
    available_bytes: int | None = None,
    nnodes: int = 1,
    on_plan: Callable[[int], None] | None = None,
) -> TuneAnswer:
    """Tune one model's grid; returns the answer, also written to RUN/tune/<request id>.json.
    `on_round` hears one progress line per round (launch.tune.round_line); `on_plan`, before the
    first case, the most cases the tuning can measure (those predicted to fit, and the boundary
    case). A candidate the sweep's host-memory guard would not launch with `available_bytes` of
    host memory (None: no guard, as with --bench-allow-memory-overcommit) is never a candidate: it
    is skipped with the guard's line before the probe, so no round spends a slot on a case that
    would end `skipped`."""
    over, refused, predictions = _predict(session, request, available_bytes, nnodes)
    fitting, skipped, boundary = split_by_budget(predictions, budget_gib)
    skipped = over + skipped
    if on_plan is not None:
        on_plan(len(fitting) + (boundary is not None))
    prior = prior_model(request.cases[0])
    model, log, clock = prior, TuneLog(), RoundClock(request, max_repeats, budget_gib, on_round)
    stopped = "" if fitting else _why_none(predictions, refused)
    if fitting:
        probe = [(p.case, 1) for p in choose_probe(fitting, prior)]
        clock.opening(len(fitting), probe)
        _measure(session, log, probe, "probe", model, on_result, predictions)
        clock.round_done(log, _refit(prior, predictions, log), fitting)
    if boundary is not None:
        _measure(session, log, [(boundary.case, 1)], "boundary", model, on_result, predictions)
    while fitting and not stopped:
        model = _refit(prior, predictions, log)
        if time_budget_s is not None and log.spent_s() >= time_budget_s:
            stopped = f"{BUDGET_SPENT} ({log.spent_s():.0f} of {time_budget_s:g} case-seconds); " + _why_done(
                log, budget_gib, max_repeats
            )
            break
        batch = plan_round(
            rank_predictions(fitting, model), log.measured, model, budget_gib=budget_gib, max_repeats=max_repeats
        )
        if not batch or len(log.rounds) >= MAX_ROUNDS:
            stopped = _why_done(log, budget_gib, max_repeats)
            break
        kind = "repeat" if all(case.id in log.measured for case, _ in batch) else "explore"
        _measure(session, log, batch, kind, model, on_result, predictions)
        clock.round_done(log, _refit(prior, predictions, log), fitting)
    ranked = rank_predictions(fitting, model)
    stopped = _unless_unreached(stopped, ranked, log, model, budget_gib)
    kwargs = {"budget_gib": budget_gib, "max_repeats": max_repeats, "stopped": stopped, "boundary": boundary}
    answer = tune_answer(request, log, model, skipped, ranked=ranked, **kwargs)
    write_json_atomic(session.layout.tune_file(request.id), answer, shape=TuneAnswer, overwrite=True)
    return answer


def _predict(session: SweepSession, request: TuneRequest, available_bytes: int | None, nnodes: int):
    """(the cases the host-memory guard refuses, as Skips; their ids; every other case's prediction)."""
    try:
        imported = session.torch_import_bytes() if available_bytes is not None else None
        guard = {"nnodes": nnodes, "import_bytes": imported}
        over = [Skip(c.id, r) for c in request.cases if (r := memory_skip_reason(c, available_bytes, **guard))]
        refused = {s.case_id for s in over}
        return over, refused, [predict_case(c) for c in request.cases if c.id not in refused]
    except (ValueError, KeyError, OSError) as exc:
        raise TuneError(f"--bench-tune: cannot predict {request.model}: {exc}") from None


def _unless_unreached(stopped: str, ranked, log: TuneLog, model, budget_gib: float | None) -> str:
    """A "separated" stop is no single winner while unmeasured cases could still reach the leader
    (a time budget stopped the exploring): the reason says so."""
    best = leader(log.measured, budget_gib)
    unreached = unmeasured_within_noise(ranked, log.measured, model, best)
    if SEPARATED in stopped and unreached:
        return stopped[: stopped.index(SEPARATED)] + UNREACHED
    if TIED in stopped and unreached and not stopped.startswith(BUDGET_SPENT):  # the exploration bound left them
        return stopped.replace(TIED, f"{TIED}; {len(unreached)} unmeasured case(s) named beside them, {JOIN_ONLY}", 1)
    return stopped


class RoundClock:
    """The tuner's progress on the terminal (issue 39 item 3): an opening line, then one line per
    round with the elapsed wall time and the tuner's own estimate of what is left (runs still
    planned x wall seconds per run so far), never the full grid's."""

    def __init__(self, request: TuneRequest, max_repeats: int, budget_gib: float | None, on_line: OnLine | None):
        self.request, self.max_repeats, self.budget_gib, self.on_line = request, max_repeats, budget_gib, on_line
        self.started = time.monotonic()

    def opening(self, fitting: int, probe) -> None:
        from fsdp_bench.analysis.duration import case_seconds

        guess = sum(case_seconds(case) for case, _ in probe)
        self._say(
            f"tune {self.request.model}: {len(self.request.cases)} case(s) in the grid, {fitting} predicted to fit; "
            f"round 0 probes {len(probe)} (~{format_duration(guess)} by the duration estimate), "
            "then rounds of the cases that could still win"
        )

    def round_done(self, log: TuneLog, model, fitting) -> None:
        ranked = rank_predictions(fitting, model)
        left = runs_left(ranked, log.measured, model, budget_gib=self.budget_gib, max_repeats=self.max_repeats)
        self._say(round_line(self.request.model, log, time.monotonic() - self.started, left, self.budget_gib))

    def _say(self, line: str) -> None:
        if self.on_line is not None:
            self.on_line(line)


def round_line(model: str, log: TuneLog, elapsed_s: float, left: int, budget_gib: float | None) -> str:
    """`tune M round 2 (explore, 4 case(s)); 6 case(s) measured in 8 run(s); leader X 1,234 tok/s/dev;
    drift +-8% per run (dof 3); elapsed 1m02s, estimate ~0m40s more (4 run(s))`."""
    entry, runs = log.rounds[-1], sum(m.repeats for m in log.measured.values())
    best, drift = leader(log.measured, budget_gib), tuning_drift(log.measured)
    parts = [f"tune {model} round {entry['round']} ({entry['kind']}, {len(entry['runs'])} case(s))"]
    parts.append(f"{len(log.measured)} case(s) measured in {runs} run(s)")
    if best is not None:
        parts.append(f"leader {best.case_id} {best.tokens_per_s:,.0f} tok/s/dev")
    parts.append("drift not measured yet" if drift is None else f"drift {drift.describe()} (dof {drift.dof})")
    per_run = elapsed_s / max(1, runs)
    parts.append(
        f"elapsed {format_duration(elapsed_s)}, estimate ~{format_duration(per_run * left)} more ({left} run(s))"
    )
    return "; ".join(parts)


def _why_none(predictions, refused) -> str:
    if refused and not predictions:
        return f"no configuration fits this machine's host memory ({len(refused)} skipped by the guard)"
    return "no configuration is predicted to fit the budget"


SEPARATED = "the leader is separated from every other measured case beyond noise"
TIED = "they are tied; no single winner"
BUDGET_SPENT = "time budget spent"
JOIN_ONLY = (
    "predicted to reach the leader's speed within the model's error but not beyond the drift, so a "
    "run could only add them to the tie or drop them, never end it"
)
UNREACHED = (
    "the leader is separated from every measured case beyond noise, but unmeasured cases are still "
    "predicted to reach its speed within the model's error (unmeasured_within_noise): no single winner claimed"
)


def _why_done(log: TuneLog, budget_gib: float | None, max_repeats: int) -> str:
    best = leader(log.measured, budget_gib)
    if best is None:
        return "no measured configuration trained within the budget"
    tied, drift = survivors(log.measured, budget_gib), tuning_drift(log.measured)
    noise = "drift not measured" if drift is None else f"measured drift {drift.describe()}"
    if len(tied) < 2 and lone_winner_allowed(log.measured, best):
        return f"{SEPARATED} ({noise}), and no unmeasured case is predicted beyond its noise"
    if len(tied) < 2:
        return f"the leader is unconfirmed: {noise}, measured {best.repeats} time(s); no single winner claimed"
    separate = f"; {separating_line(tied, drift, max_repeats)}" if drift is not None and drift.enough else ""
    return (
        f"too noisy to separate {len(tied)} configurations ({noise}) within {max_repeats} repeat(s): {TIED}{separate}"
    )


def _verdict(answer: TuneAnswer) -> str:
    """What the pick is: the single winner, the fastest of a tie (named), or unconfirmed."""
    if answer["tied"]:
        return f" (fastest of {len(answer['tied']) + 1} tied within noise, no single winner): " + ", ".join(
            answer["tied"]
        )
    if answer["pick"] and answer.get("single_winner") is False:
        return " (unconfirmed: not separated beyond measured noise)"
    return ""


RUN_PURPOSES = ("probe", "explore", "control", "repeat", "boundary")


def runs_by_purpose(answer: TuneAnswer) -> Counter:
    """The answer's runs by what they were for: probe, explore (a case's first run), control (the
    leader re-measured in an exploring round) and repeat (a round of repeats only: a race, or the
    leader of a tie or a lone leader measured once more)."""
    kinds = Counter()
    for entry in answer.get("rounds") or []:
        for run in entry["runs"]:
            if entry["kind"] == "explore":
                kinds["explore" if run["repeat_count"] == 1 else "control"] += 1
            else:
                kinds[entry["kind"]] += 1
    return kinds


def answer_lines(answer: TuneAnswer) -> list[str]:
    """The tuning's answer for the terminal."""
    cost = answer["cost"]
    ratio = f"{100 * cost['ratio']:.0f}%" if cost["ratio"] is not None else "?"
    lines = [
        f"tune {answer['model']}: pick {answer['pick'] or 'none'}" + _verdict(answer),
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
    unreached = answer.get("unmeasured_within_noise") or []
    if unreached:
        lines.append(
            f"  not run: {len(unreached)} case(s) predicted to reach the pick's speed but not beyond its "
            f"noise, so measuring them could only tie: {', '.join(unreached)}"
        )
    check = answer.get("boundary_check")
    if check:
        lines.append(
            f"  boundary check {check['case_id']}: predicted {check['predicted_peak_in_gib']:.4g} GiB, measured "
            f"{check['measured_peak_in_gib']} GiB, over the budget when measured: {check['over_budget_when_measured']}"
        )
    return lines


class TuneCounter:
    """The tuner's live lines' counter, `[tune 3 of at most 24]`: the case's number among the
    distinct cases measured, of the most the tuning can measure (`plan`, from run_tune's
    on_plan); a case measured again in a later round keeps its number (`[tune 1 of at most 24,
    again]`). How many runs are left is the round lines' estimate, not this count's."""

    def __init__(self) -> None:
        self.bound: int | None = None
        self.numbers: dict[str, int] = {}

    def plan(self, bound: int) -> None:
        self.bound = bound

    def label(self, case_id: str) -> str:
        again = case_id in self.numbers
        number = self.numbers.setdefault(case_id, len(self.numbers) + 1)
        of = f" of at most {self.bound}" if self.bound else ""
        return f"tune {number}{of}" + (", again" if again else "")


def tune_item(state, request, write_live) -> dict:
    """One `--bench-tune` test: the tuning of `request`'s grid through the sweep's session (`state`,
    a launch.progress.BenchState), each measured case's live line and then the answer written with
    `write_live`. Raises DiskFull, SessionError or TuneError for the plugin to turn into a stop."""
    counter = TuneCounter()

    def on_result(case, result) -> None:
        kept = case.id in state.session.kept
        label = counter.label(case.id)
        line = state.progress.finish_case(f"{request.id}::{case.id}", case.id, result, kept=kept, counter=label)
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
        on_round=write_live,
        available_bytes=None if sweep.allow_memory_overcommit else available_host_bytes(),
        nnodes=state.session.launch.nnodes,
        on_plan=counter.plan,
    )
    for line in answer_lines(answer):
        write_live(line)
    return answer
