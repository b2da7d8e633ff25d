"""Where one case's wall time went, from the stage start times rank 0 records (no torch).

A sweep's cost is mostly what surrounds the measured steps; this splits each case into:

- launch: runner start -> rank 0's first stage (torchrun, interpreters, `import torch`);
- setup: process group, data, model, sharding, optimizer (torch's first optimizer or DDP/FSDP
  construction imports torch._dynamo, about 1 s on a CPU);
- train: first step, warmup and measured steps;
- probes: checkpoint benchmark and the untimed probe steps (FLOPs, MemTracker, profiler);
- exit: final barrier, records written, processes gone (as the runner saw it).

The parts add up to the case's wall time as the runner measured it (`launched_unix` to
`finished_unix`). On several nodes rank 0 may run on another host than node 0's runner: launch
and exit then mix two hosts' clocks and are only as good as their synchronization.

Within train, `measure_timed_share_pct` says how much of the measured stretch the timed steps
themselves fill: what is left is bookkeeping between and after them, during which a GPU idles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsdp_bench.results.records import CaseResult, RankRecord

TIME_PARTS = ("launch", "setup", "train", "probes", "exit")
PART_OF_STAGE = {
    "init": "setup",
    "data": "setup",
    "model": "setup",
    "shard": "setup",
    "optimizer": "setup",
    "first_step": "train",
    "warmup": "train",
    "measure": "train",
    "checkpoint": "probes",
    "memory_probe": "probes",
    "end": "exit",
}


# The stage the first measured step runs in: "measure" after warmup steps, else "first_step"
# (warmup 0: step 0 is measured). The stretch ends where the first later part begins.
_AFTER_TRAIN = frozenset(stage for stage, part in PART_OF_STAGE.items() if part in ("probes", "exit"))


def measure_timed_share_pct(rank: RankRecord) -> float | None:
    """Percent of one rank's measured stretch spent inside its timed steps: the sum of its
    `step_times_s` over the wall time from the start of the stage its first measured step ran in
    to the start of the stage after training (checkpoint, probes or end). The rest is what runs
    between and after the timed steps (update norms, loss reads, the stop decision, the records
    of the steps). None for a record without stage times (files from before them), without
    measured steps, or that never left training."""
    starts = rank.get("stage_started_unix")
    times = rank.get("step_times_s")
    if not isinstance(starts, Mapping) or not times:
        return None
    first = "measure" if rank.get("warmup_step_times_s") else "first_step"
    begin = starts.get(first)
    if not isinstance(begin, (int, float)):
        return None
    after = [t for stage, t in starts.items() if stage in _AFTER_TRAIN and isinstance(t, (int, float)) and t >= begin]
    if not after or min(after) <= begin:
        return None
    # Step times come from perf_counter, stage starts from the wall clock: a share a hair above
    # 100 is the two clocks' disagreement, not time found.
    return min(100.0, 100.0 * sum(times) / (min(after) - begin))


def time_split_columns() -> list[str]:
    return [f"time_{part}_s" for part in TIME_PARTS]


def case_time_split(result: CaseResult) -> dict[str, float]:
    """`time_<part>_s` for each part, or {} when the result lacks the timestamps (an old run, a
    case whose rank 0 never started). A case run as several repeats carries the sum of theirs."""
    if "time_split_s" in result:
        return dict(result["time_split_s"] or {})
    launched, finished = result.get("launched_unix"), result.get("finished_unix")
    ranks = result.get("ranks") or []
    starts = next((r.get("stage_started_unix") for r in ranks if r.get("rank") == 0), None)
    if not isinstance(launched, (int, float)) or not isinstance(finished, (int, float)) or not starts:
        return {}
    ordered = sorted(
        (t, stage) for stage, t in starts.items() if stage in PART_OF_STAGE and isinstance(t, (int, float))
    )
    if not ordered:
        return {}
    split = dict.fromkeys(TIME_PARTS, 0.0)
    split["launch"] = ordered[0][0] - launched
    ends = [t for t, _ in ordered[1:]] + [finished]
    for (start, stage), end in zip(ordered, ends):
        split[PART_OF_STAGE[stage]] += end - start
    return {f"time_{part}_s": max(seconds, 0.0) for part, seconds in split.items()}


def summed_time_split(results) -> dict[str, float]:
    """The split of several runs of one case (its repeats), part by part; {} if one lacks it."""
    splits = [case_time_split(r) for r in results]
    if not splits or not all(splits):
        return {}
    return {key: sum(split[key] for split in splits) for key in splits[0]}


def sweep_time_split(rows: list[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds per part summed over cases (rows holding `time_<part>_s`)."""
    return {part: sum(float(r.get(f"time_{part}_s") or 0.0) for r in rows) for part in TIME_PARTS}
