"""A step taken apart: where one profiled probe step's time went, and why one case is slower than
another (pure, no torch).

Every point of a step's window belongs to exactly one part, decided in this order:

    optimizer      inside an `Optimizer.step` span (its ops, its launches, its hooks)
    data           inside the batch fetch (`fsdp_bench.data` span) and not the optimizer
    comm_exposed   a collective in flight, none of the above, and no compute running
                   (split by collective, in COLLECTIVE_ORDER where two overlap)
    compute        an op (CPU) or kernel (CUDA) running, none of the above
    host           the rest: Python, hooks, kernel launches, waits with nothing running
                   (on CUDA: the device idle)

so the parts sum to the probe step's window by construction. The probe step runs under the
profiler, which lengthens its host side; a comparison between two cases therefore scales each
case's parts to its measured median step (`scaled_parts`) before subtracting them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fsdp_bench.analysis.intervals import Interval, clip, total_length, union
from fsdp_bench.results.readings import StepParts

PARTS = ("compute", "comm_exposed", "optimizer", "data", "host")
PART_LABELS = {
    "compute": "compute",
    "comm_exposed": "exposed communication",
    "optimizer": "optimizer step",
    "data": "data loading",
    "host": "host time",
}
# A part that grew by more than this many times the whole gap is a trade between parts, not a
# share of the gap (reason_text).
TRADED_SHARE = 1.5
COLLECTIVE_ORDER = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "all_to_all", "send_recv", "other")


def _minus(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """Points of `a` not in `b`."""
    out: list[Interval] = []
    cut = union(b)
    for start, end in union(a):
        cursor = start
        for s, e in cut:
            if e <= cursor or s >= end:
                continue
            if s > cursor:
                out.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < end:
            out.append((cursor, end))
    return out


def step_parts(
    steps: Sequence[Interval],
    *,
    compute: Iterable[Interval],
    comm_by_kind: Mapping[str, Iterable[Interval]],
    optimizer: Iterable[Interval] = (),
    data: Iterable[Interval] = (),
) -> StepParts:
    """Seconds per step of each part (PARTS, disjoint, summing to `window_s`), averaged over the
    step windows (`steps`, one span per step: back-to-back steps may touch, so they are counted
    before their union is taken); `comm_exposed_by_kind_s` splits `comm_exposed_s`."""
    steps = list(steps)
    windows = union(steps)
    if not windows:
        return {"steps": 0, "null_reason": "no step window"}
    n = len(steps)
    taken = clip(optimizer, windows)
    parts = {"optimizer": total_length(taken)}
    data_iv = _minus(clip(data, windows), taken)
    parts["data"] = total_length(data_iv)
    taken = union(taken + data_iv)
    compute_iv = _minus(clip(compute, windows), taken)
    by_kind: dict[str, float] = {}
    for kind in sorted(comm_by_kind, key=lambda k: COLLECTIVE_ORDER.index(k) if k in COLLECTIVE_ORDER else 99):
        exposed = _minus(_minus(clip(comm_by_kind[kind], windows), taken), compute_iv)
        if exposed:
            by_kind[kind] = total_length(exposed) / n
            taken = union(taken + exposed)
    parts["comm_exposed"] = sum(by_kind.values()) * n
    parts["compute"] = total_length(compute_iv)
    window = total_length(windows)
    parts["host"] = max(0.0, window - sum(parts.values()))
    out: StepParts = {f"{p}_s": parts[p] / n for p in PARTS}
    out.update(steps=n, window_s=window / n, comm_exposed_by_kind_s=by_kind, null_reason=None)
    return out


def critical_rank(parts: Sequence[Mapping[str, Any] | None]) -> int | None:
    """The rank the others wait for: the one with the most time in its step not spent waiting in
    a collective (window minus exposed communication).

    A synchronous step ends with its slowest rank; its peers spend the difference waiting inside
    a collective, which reads as exposed communication on them and would hide the cause (a host
    delay on rank 1 is rank 0's communication wait; a slow optimizer on rank 1 makes rank 1's
    step the longest). None without any measured rank."""
    measured = [(p["window_s"] - p["comm_exposed_s"], -i) for i, p in enumerate(parts) if p and p.get("window_s")]
    return -max(measured)[1] if measured else None


def scaled_parts(parts: Mapping[str, Any], step_s: float) -> dict[str, float]:
    """The parts in seconds of a measured step of `step_s` (each keeps its share of the probe step)."""
    window = parts.get("window_s") or 0.0
    if window <= 0:
        return {}
    return {p: parts[f"{p}_s"] * step_s / window for p in PARTS if parts.get(f"{p}_s") is not None}


def part_differences(faster: Mapping[str, float], slower: Mapping[str, float]) -> list[tuple[str, float]]:
    """(part, seconds the slower case spends more in it), the largest first."""
    diffs = [(p, slower.get(p, 0.0) - faster.get(p, 0.0)) for p in PARTS if p in faster or p in slower]
    return sorted(diffs, key=lambda d: -d[1])


def reason_text(
    slower_name: str,
    faster_name: str,
    slower: Mapping[str, float],
    faster: Mapping[str, float],
    *,
    host_label: str = "host time",
    per: str = "per step",
) -> str:
    """`fsdp2 batch 8 is 47.0 ms slower per step than ddp batch 8: 45.0 ms more host time (96% of
    the difference: 50.1 against 5.1 ms); exposed communication 0.0 against 0.0 ms`.

    `slower`/`faster`: `scaled_parts` of each (seconds of its measured step, or of the time `per`
    names: cases doing different work per step are compared per 1,000 tokens). The one or two
    parts that grew most are named; exposed communication is always given, as the question is so
    often whether the strategy's communication is what costs."""
    gap = sum(slower.values()) - sum(faster.values())
    if gap <= 0:
        return f"{slower_name} is not slower {per} than {faster_name}"
    named = [(p, d) for p, d in part_differences(faster, slower)[:2] if d > 0.1 * gap]
    named = named or part_differences(faster, slower)[:1]
    labels = {**PART_LABELS, "host": host_label}
    # Parts that grew and shrank by far more than the gap (two cases within a hair of each other
    # trading compute for host time) would read "20053% of the difference": the shares are left
    # out and the part that shrank, named below, says what offset the growth.
    traded = named[0][1] > TRADED_SHARE * gap
    said = [
        f"{1e3 * d:,.1f} ms more {labels[p]} ("
        + ("" if traded else f"{100 * d / gap:.0f}% of the difference: ")
        + f"{1e3 * slower.get(p, 0.0):,.1f} against {1e3 * faster.get(p, 0.0):,.1f} ms)"
        for p, d in named
    ]
    shrunk = part_differences(faster, slower)[-1]
    if shrunk[1] < -0.1 * gap:  # a share over 100% means another part shrank: say which
        said.append(f"offset by {-1e3 * shrunk[1]:,.1f} ms less {labels[shrunk[0]]}")
    if "comm_exposed" not in {p for p, _ in named}:
        said.append(
            f"{labels['comm_exposed']} {1e3 * slower.get('comm_exposed', 0.0):,.1f} against "
            f"{1e3 * faster.get('comm_exposed', 0.0):,.1f} ms"
        )
    return f"{slower_name} is {1e3 * gap:,.1f} ms slower {per} than {faster_name}: " + "; ".join(said)


def dominant_part(parts: Mapping[str, float], baseline: Mapping[str, float] | None = None) -> str:
    """The part that grew most against `baseline` (or the largest part without one)."""
    if baseline is None:
        return max(PARTS, key=lambda p: parts.get(p, 0.0))
    return part_differences(baseline, parts)[0][0]
