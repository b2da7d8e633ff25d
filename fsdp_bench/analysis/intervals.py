"""Interval arithmetic for profiler timelines (pure, no torch).

Exposed communication is the time some collective is in flight while no compute runs:
    |union(comm) - union(compute)|
Summing self-times double counts overlapping collectives and hides overlap with compute.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same points; empty and inverted ones dropped."""
    merged: list[list[float]] = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def total_length(intervals: Iterable[Interval]) -> float:
    return sum(e - s for s, e in union(intervals))


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """Points covered by both sets (each may overlap itself)."""
    ua, ub = union(a), union(b)
    out, i, j = [], 0, 0
    while i < len(ua) and j < len(ub):
        start, end = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        if end > start:
            out.append((start, end))
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return out


def clip(intervals: Iterable[Interval], windows: Sequence[Interval]) -> list[Interval]:
    """The parts of `intervals` inside any of `windows` (e.g. the profiled steps)."""
    return intersect(intervals, windows)


def exposed_length(comm: Iterable[Interval], compute: Iterable[Interval]) -> float:
    """Length of the communication union not overlapped by any compute interval."""
    comm_u = union(comm)
    return total_length(comm_u) - total_length(intersect(comm_u, compute))
