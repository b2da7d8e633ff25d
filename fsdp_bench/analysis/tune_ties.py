"""When measuring more cannot end a tie (issue 40; pure, no torch): the race rule and the
exploration bound of `--bench-tune` (analysis.tune), both read off the drift measured while tuning
(analysis.drift).

A tie is final when one of its cases cannot be separated from the leader even raced to
`--bench-repeats` under the measured drift (`could_separate`): the answer is then a tie whatever
is measured next, so runs that could only shorten its list are not spent. The race rule skips
racing such a tie (`worth_racing`); the exploration bound skips exploring, once the tie is final,
every unmeasured case whose prediction at the model's error could not beat the leader beyond that
same reach (`could_win_alone`): measured, it could join the tie or leave it, never end it. Those
cases are named in the answer (analysis.tune.unmeasured_within_noise) with what would separate the
tie (`separating_line`). On a loaded 2-core machine (drift +-91% per run) the tuner explored 19
cases of a 96-case grid that ended tied 16, 22.8% of the grid's case-seconds (docs/autotune.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from fsdp_bench.analysis.drift import DRIFT_Z, Drift

# The degrees of freedom the drift needs before the exploration bound may fire: more than the
# leader's own controls give (CONTROL_REPEATS 3, 2 dof) or two cases measured twice. On a loaded
# held-out run the bound fired on one case's three controls (a factor of 5.0 per run, 2 dof) and
# the tuner stopped after 10 runs, 63% behind the grid's best; chosen on replays of the gpt_tiny-96
# truth, and no better on the held-out grid's (docs/autotune.md, "More degrees of freedom before
# the bound").
MIN_BOUND_DOF = 4


class Speed(Protocol):
    """What these rules read of a measured case (analysis.tune.Measured)."""

    case_id: str
    tokens_per_s: float | None
    repeats: int


def could_separate(best: Speed, other: Speed, drift: Drift | None, max_repeats: int) -> bool:
    """Whether racing `other` and the leader to `max_repeats` could end their tie. The measured
    drift alone gives a case at r repeats a band of DRIFT_Z x sd / sqrt(r) each way, whatever its
    steps say; when the two bands at `max_repeats` still overlap at the speeds measured now, the
    race is spent for a tie. On a 24-case CPU grid at load 7-11 (drift a factor of 2 per run) the
    tuner raced 8 tied cases to 2 repeats, a third of its runs, and stopped with the same 8 tied.
    Unknown or too little drift (fewer than MIN_DRIFT_DOF degrees of freedom): race as before."""
    if drift is None or not drift.enough or other.case_id == best.case_id:
        return True
    if not best.tokens_per_s or not other.tokens_per_s:
        return True
    gap = math.log(best.tokens_per_s / other.tokens_per_s)
    reach = drift.half_width(max(max_repeats, best.repeats)) + drift.half_width(max(max_repeats, other.repeats))
    return gap > reach


def worth_racing(tied: Sequence[Speed], drift: Drift | None, max_repeats: int) -> list[Speed]:
    """The tied cases (leader first) to race to `max_repeats`: all of them when the race could
    separate every one from the leader (`could_separate`), so that it could end in a single
    winner; [] when one could not: the answer is then a tie whatever the others measure, and
    racing them would only shorten its list, a run each (replays and runs of the 96-case CPU grid:
    docs/autotune.md, "The race rule, then three more loaded runs")."""
    others = tied[1:]
    return list(tied) if others and all(could_separate(tied[0], m, drift, max_repeats) for m in others) else []


def tie_is_final(tied: Sequence[Speed], drift: Drift | None, max_repeats: int) -> bool:
    """A measured tie no race could end (`worth_racing` says so on measured drift): whatever is
    explored next, the answer is a tie unless a new case beats its leader beyond the drift."""
    return drift is not None and drift.enough and len(tied) > 1 and not worth_racing(tied, drift, max_repeats)


def drift_outweighs_model(drift: Drift, model_error: float) -> bool:
    """Whether one run's drift band is as wide as the step model's error band (log terms): a
    first measurement then places a case no closer than its prediction did, so exploring cannot
    separate candidates the model ranks alike. On a quieter machine a run is sharper than the
    model, and exploring on to the last candidate finds the best's neighbourhood. A drift measured
    at fewer than MIN_BOUND_DOF degrees of freedom is not trusted to say so."""
    return drift.dof >= MIN_BOUND_DOF and drift.half_width(1) >= math.log1p(model_error)


def could_win_alone(optimistic_tokens_per_s: float, best: Speed, drift: Drift, max_repeats: int) -> bool:
    """Whether an unmeasured case at its optimistic speed (prediction x (1 + the model's error))
    could be separated ahead of the leader, both raced to `max_repeats`: `could_separate` with the
    candidate in front. Only such a case can turn a final tie into a single winner."""
    if not best.tokens_per_s or optimistic_tokens_per_s <= 0:
        return True
    reach = drift.half_width(max(max_repeats, best.repeats)) + drift.half_width(max_repeats)
    return math.log(optimistic_tokens_per_s / best.tokens_per_s) > reach


def separating_line(tied: Sequence[Speed], drift: Drift, max_repeats: int) -> str:
    """What would separate a final tie's closest pair (the leader and the runner-up): the drift
    per run below which `max_repeats` repeats could, or the repeats it would take at this drift."""
    best, runner = tied[0], tied[1]
    if not best.tokens_per_s or not runner.tokens_per_s or best.tokens_per_s <= runner.tokens_per_s:
        return "the leader and the runner-up measured the same speed: no drift or repeats would separate them"
    gap = math.log(best.tokens_per_s / runner.tokens_per_s)
    below_pct = 100 * math.expm1(gap * math.sqrt(max_repeats) / 2)  # 2 x Z x sd / sqrt(r) = gap
    repeats = math.floor((2 * DRIFT_Z * drift.sd_log / gap) ** 2) + 1  # strictly beyond the reach
    return (
        f"separating the leader from the runner-up ({100 * math.expm1(gap):.1f}% apart) takes a drift below "
        f"+-{below_pct:.1f}% per run at {max_repeats} repeat(s), or {repeats} repeats each at the measured drift"
    )
