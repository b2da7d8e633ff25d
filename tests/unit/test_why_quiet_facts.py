"""docs/why.md's quiet-machine figures for the probe that runs first (its plain steps right after the
timed loop, the parts scaled to them), held to results/reference/cpu-why-quiet/: two default sweeps
and one interleaved before/after of the probe's cost, 2026-11-26 21:50-22:12 UTC."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
QUIET = ROOT / "results" / "reference" / "cpu-why-quiet"
PARTS = ("compute", "comm_exposed", "optimizer", "data", "host")


def _sweep(n: int) -> pd.DataFrame:
    d = pd.read_csv(QUIET / f"sweep{n}" / "comparison.csv")
    return d[d.status == "ok"]


def _blocks_within(n: int, pct: float = 15.0, k: int = 5) -> tuple[int, int]:
    """(blocks of k consecutive timed steps whose median is within pct of the case's median, blocks)."""
    hits = total = 0
    for times in json.loads((QUIET / f"sweep{n}" / "step_times.json").read_text()).values():
        median = statistics.median(times)
        for i in range(0, len(times) - k + 1, k):
            total += 1
            hits += abs(statistics.median(times[i : i + k]) / median - 1) <= pct / 100
    return hits, total


def test_the_probe_step_against_the_median_on_two_quiet_sweeps():
    counts = []
    for n in (1, 2):
        d = _sweep(n)
        assert len(d) == 24
        parts = d[[f"part_{p}_s_per_step" for p in PARTS]].sum(axis=1)
        assert ((parts / d.probe_step_s - 1).abs() < 1e-9).all()  # the parts sum to the probe step
        counts.append(int((d.probe_vs_median_pct.abs() <= 15).sum()))
    assert counts == [12, 20]
    assert [round(_sweep(n).probe_vs_median_pct.median(), 1) for n in (1, 2)] == [12.4, 2.1]
    assert [round(_sweep(n).step_time_cv_pct.median(), 1) for n in (1, 2)] == [23.5, 15.6]
    assert [round(_sweep(n).probe_profiler_overhead_pct.median(), 1) for n in (1, 2)] == [7.2, 15.1]
    assert [_blocks_within(n) for n in (1, 2)] == [(673, 1058), (851, 1107)]


def test_longer_blocks_of_the_loop_are_no_closer_to_its_median():
    """docs/why.md: why the probe keeps five plain steps (a longer probe would not meet the bound)."""
    doc = " ".join((ROOT / "docs" / "why.md").read_text().split())
    for k in (9, 15, 25):
        shares = [round(100 * hits / total) for hits, total in (_blocks_within(n, k=k) for n in (1, 2))]
        assert f"{k} steps: {shares[0]}% and {shares[1]}%" in doc, (k, shares)


def test_the_probe_cost_interleaved_on_a_quiet_machine():
    log = (QUIET / "cost.log").read_text()
    walls = {
        side: [float(w) for w in re.findall(rf"round \d {side}: 4 cases, mean wall ([\d.]+) s", log)]
        for side in ("before", "after")
    }
    assert [len(w) for w in walls.values()] == [4, 4]
    assert "case wall time +2.6%; probes +0.37 s per case (+2.9% of a case)" in log
    assert round(100 * (statistics.fmean(walls["after"]) / statistics.fmean(walls["before"]) - 1), 1) == 2.6
    loads = [float(v) for pair in re.findall(r"load ([\d.]+) -> ([\d.]+)", log) for v in pair]
    assert min(loads) == 1.34 and max(loads) == 2.88
    close = [int(p) for p in re.findall(r"vs median [\d.]+ ms \(([+-]\d+)%\)", log)]
    assert len(close) == 16 and sum(abs(p) <= 15 for p in close) == 12


def test_the_readme_quiet_sweep_time_is_these_sweeps():
    took = [
        re.search(
            r"24 passed, 46 deselected in [\d.]+s \((\d):(\d\d):(\d\d)\)",
            (QUIET / f"sweep{n}" / "sweep.log").read_text(),
        )
        for n in (1, 2)
    ]
    minutes = sorted(f"{int(m[2])}m{m[3]}s" for m in took)
    assert (
        f"| `pytest benchmarks` (24 cases) | {minutes[0]}-{minutes[1]} on a quiet machine"
        in (ROOT / "README.md").read_text()
    )
