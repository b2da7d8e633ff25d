"""One case run N times (`--bench-repeats`), each repeat in a fresh process tree, merged into the
case's one result (pure, no torch).

The merged result is the first repeat's (its case, rank records, memory and model facts) with:
- status ok only when every repeat is ok; otherwise the first repeat that is not, its reason
  prefixed with the repeat, and no pooled statistics;
- the step-time statistics (median and its confidence interval, p10/p90, CV) and everything
  derived from the median (throughput, MFU) over the pooled per-step times of all repeats,
  slowest rank per step as for one run, each repeat weighted alike (`equal_weight_indices`);
- `repeats`: per repeat its status, duration and step-time median, and `step_times_s_by_repeat`
  (the slowest rank's per-step times of each repeat);
- metrics `repeats`, `repeat_step_time_s_medians` and `repeat_spread_pct` = (max - min) / median
  of the repeats' medians in percent: what a fresh process tree changes, which the CV within one
  run cannot show.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from fsdp_bench.analysis.aggregate import case_metrics
from fsdp_bench.analysis.case_time import summed_time_split
from fsdp_bench.plan.case import Case
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import CaseResult, RankRecord, RepeatSummary
from fsdp_bench.results.stats import slowest_rank_step_times


def repeat_step_times(result: CaseResult) -> list[float]:
    """The slowest rank's per-step times of one repeat ([] when some rank has none)."""
    ranks = result.get("ranks") or []
    times = [r["step_times_s"] for r in ranks if r.get("step_times_s")]
    return slowest_rank_step_times(times) if times and len(times) == len(ranks) else []


# A rank's peaks over its repeats: the median (an observed value), not the first repeat's. On CPU
# the MemTracker peak of an FSDP2 rank moved by 144 KB (+6%) between identical repeats of
# gpt_tiny (a collective's buffer alive or not at the peak), and one repeat's value made two
# identical sweeps compare as a memory regression.
_PEAK_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes")


def equal_weight_indices(count: int, keep: int) -> list[int]:
    """`keep` of a repeat's `count` step indices, evenly spaced in time. Each repeat's process
    tree is the independent unit, and a time-capped loop (--bench-measure-cap-s) measures more
    steps when the machine is quiet: pooled whole, a quiet repeat outvotes a loaded one. On a
    loaded CPU, gpt2_small_odd ddp bs4 accum 2 measured 50 steps at 0.0243 s (median) in one
    repeat and 11 at 0.1448 s in the other; the pooled median, 0.0321 s, was that one quiet repeat's."""
    return [k * count // keep for k in range(keep)] if keep < count else list(range(count))


def _pooled_ranks(results: Sequence[CaseResult], keep: int) -> list[RankRecord]:
    """The first repeat's rank records, each rank's step times those of every repeat in turn (at
    most `keep` from each, the fewest any repeat measured: `equal_weight_indices`) and its peaks
    the median over the repeats."""
    pooled = []
    for i, rank in enumerate(results[0].get("ranks") or []):
        times = []
        for r in results:
            own = r["ranks"][i].get("step_times_s") or []
            times += [own[k] for k in equal_weight_indices(len(own), keep)]
        memory = dict(rank.get("memory") or {})
        for key in _PEAK_KEYS:
            values = [(r["ranks"][i].get("memory") or {}).get(key) for r in results]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                memory[key] = statistics.median_low(values)
        pooled.append({**rank, "step_times_s": times, "memory": memory})
    return pooled


def _summary(result: CaseResult, n: int) -> RepeatSummary:
    return {
        "repeat": result.get("repeat", n),
        "status": result.get("status"),
        "reason": result.get("reason", ""),
        "duration_s": result.get("duration_s"),
        M.step_time_s_median: (result.get("metrics") or {}).get(M.step_time_s_median),
    }


def merge_repeats(results: Sequence[CaseResult], planned: int | None = None) -> CaseResult:
    """The case's result from its repeats' results, in repeat order (see the module docstring);
    `planned`: how many repeats the sweep asked for (a failed one ends the case early)."""
    if not results:
        raise ValueError("merge_repeats: no repeats")
    bad = next((r for r in results if r.get("status") != "ok"), None)
    merged = {k: v for k, v in (bad or results[0]).items() if k != "repeat"}
    merged[M.repeats] = [_summary(r, i + 1) for i, r in enumerate(results)]
    merged["duration_s"] = sum(r.get("duration_s") or 0.0 for r in results)
    merged["time_split_s"] = summed_time_split(results) or None
    if bad is not None:
        merged["reason"] = f"repeat {bad.get('repeat', '?')} of {planned or len(results)}: {bad.get('reason', '')}"
        return merged
    merged["step_times_s_by_repeat"] = [repeat_step_times(r) for r in results]
    same_ranks = len({len(r.get("ranks") or []) for r in results}) == 1
    if same_ranks and all(merged["step_times_s_by_repeat"]):
        case = Case.from_dict(results[0]["case"])
        keep = min(map(len, merged["step_times_s_by_repeat"]))
        metrics = case_metrics(case, _pooled_ranks(results, keep), results[0].get("simulation"))
        medians = [statistics.median(t) for t in merged["step_times_s_by_repeat"]]
        metrics[M.repeats] = len(results)
        metrics[M.steps_measured] = sum(map(len, merged["step_times_s_by_repeat"]))  # not only those pooled
        metrics["repeat_step_time_s_medians"] = medians
        center = statistics.median(medians)
        metrics[M.repeat_spread_pct] = 100 * (max(medians) - min(medians)) / center if center > 0 else None
        merged["metrics"] = metrics
    return merged


def pooled_step_times(result: CaseResult) -> list[float]:
    """Every measured step time of a case: all repeats' when it has several, else its one run's."""
    by_repeat = result.get("step_times_s_by_repeat")
    if by_repeat:
        return [t for times in by_repeat for t in times]
    return slowest_rank_step_times(r["step_times_s"] for r in result.get("ranks") or [] if r.get("step_times_s"))
