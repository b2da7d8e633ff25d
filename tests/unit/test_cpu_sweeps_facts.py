"""The numbers docs/verdicts.md, docs/why.md and the README state about this session's CPU sweeps,
held to their files in results/reference/cpu-sweeps/ (runs of 2026-11-26 on the shared 2-core
machine; NOTES.md there says how each was made)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "results" / "reference" / "cpu-sweeps"
HISTORY = SWEEPS / "history"


def _seconds(text: str) -> int:
    m = re.fullmatch(r"(\d+)m(\d\d)s", text)
    return 60 * int(m[1]) + int(m[2])


def _estimate_s(log: Path) -> int:
    return _seconds(re.search(r"estimated duration (\d+m\d\ds)", log.read_text())[1])


def test_history_flags_the_slowed_run_and_only_it():
    h = pd.read_csv(HISTORY / "history.csv")
    runs = sorted(h.run.unique(), key=lambda r: h[h.run == r].run_order.iloc[0])
    assert len(runs) == 5
    flagged = sorted(h[h.flagged.astype(str) == "True"].run.unique())
    assert flagged == [runs[2]]  # the third: FSDP_BENCH_FAULTS=slow@measure:0:0.5 (NOTES.md)
    slowed = h[h.run == runs[2]]
    assert (slowed.verdict == "regression").sum() == 20 and (slowed.verdict == "within noise").sum() == 4
    regressions = slowed[slowed.verdict == "regression"].step_time_change_pct
    assert round(regressions.min(), 1) == 30.4 and round(regressions.max(), 1) == 78.8
    assert (
        round(slowed.step_time_change_pct.min(), 1) == 13.8 and round(slowed.step_time_change_pct.median(), 1) == 42.6
    )
    others = h[h.run.isin([runs[1], runs[3], runs[4]])]
    assert set(others.verdict) == {"within noise"}
    assert round(others.step_time_change_pct.min(), 1) == -16.5 and round(others.step_time_change_pct.max(), 1) == 18.3
    detectable = h.step_time_detectable_change_pct.dropna()
    assert round(detectable.min()) == 30 and round(detectable.max()) == 32
    assert h[h.run == runs[3]].reference_run.iloc[0] == runs[1]  # the flagged run is never a reference


def test_history_runs_were_quiet_and_their_estimates():
    block = (HISTORY / "block.log").read_text()
    walls = [int(w) for w in re.findall(r"== history\d rc 0 wall (\d+) s", block)]
    assert walls == [651, 671, 684, 697, 691]
    estimates = [_estimate_s(HISTORY / f"sweep{i}.log") for i in range(1, 6)]
    errors = [round(100 * (e / w - 1)) for e, w in zip(estimates, walls)]
    assert errors == [-5, -8, -10, -11, -11]
    assert _load_range(HISTORY) == (1.26, 2.88)


def _load_range(folder: Path) -> tuple[float, float]:
    """The 1-minute load average's lowest and highest sample while the sweep(s) ran."""
    block = (folder / "block.log").read_text()
    start, end = re.findall(r"start (\d\d:\d\d:\d\d)", block)[0], re.findall(r"end (\d\d:\d\d:\d\d)", block)[-1]
    loads = [
        float(x.split()[1]) for x in (folder / "load.log").read_text().splitlines() if start <= x.split()[0] <= end
    ]
    return min(loads), max(loads)


@pytest.mark.parametrize("name", ["quiet-plain", "loaded-steady", "loaded-helpers"])
def test_estimate_rows_are_their_logs(name):
    folder = SWEEPS / name
    wall = int(re.search(r"wall (\d+) s", (folder / "block.log").read_text())[1])
    estimate = _estimate_s(folder / "sweep.log")
    assert (estimate, wall, _load_range(folder)) == ESTIMATES[name]


# (estimate, took) in seconds and the load average's range, as the README's estimate table states them
ESTIMATES = {
    "quiet-plain": (310, 309, (0.94, 2.88)),
    "loaded-steady": (657, 716, (4.28, 10.9)),
    "loaded-helpers": (448, 677, (7.37, 11.07)),
}


def _quiet_rows() -> pd.DataFrame:
    """Every row of the six quiet sweeps' comparison.csv (the plain one and the five history runs)."""
    tables = [SWEEPS / "quiet-plain" / "comparison.csv", *sorted((HISTORY / "runs").glob("*/comparison.csv"))]
    return pd.concat([pd.read_csv(t) for t in tables])


def test_probe_against_the_median_on_the_quiet_sweeps():
    d = _quiet_rows()
    d = d[d.status == "ok"]
    assert len(d) == 144
    plain = d.probe_plain_vs_median_pct
    assert (plain.abs() <= 15).sum() == 79 and round(plain.median(), 1) == 0.2
    window = d.probe_vs_median_pct
    assert (window.abs() <= 15).sum() == 66 and round(window.median(), 1) == 11.4
    parts = d[[f"part_{p}_s_per_step" for p in ("compute", "comm_exposed", "optimizer", "data", "host")]].sum(axis=1)
    assert ((parts / d.probe_step_s - 1).abs() < 1e-6).all()  # the parts sum to the probe step


def test_the_readme_rows_are_these_runs():
    from fsdp_bench.analysis.duration import format_duration

    readme = (ROOT / "README.md").read_text()
    for estimate, took, _ in ESTIMATES.values():
        error = round(100 * (estimate / took - 1))
        assert f"| {format_duration(estimate)} | {format_duration(took)} | {error:+d}% |" in readme


def test_the_timed_steps_spread_on_the_quiet_sweeps():
    cv = _quiet_rows().step_time_cv_pct.dropna()
    assert (round(cv.min()), round(cv.median()), round(cv.max())) == (9, 17, 27)
