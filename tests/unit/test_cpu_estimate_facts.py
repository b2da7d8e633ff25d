"""results/reference/cpu-estimate/NOTES.md's figures are this version's estimate of each run, from
its own files: the calibration its env.json recorded, its cases' case.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fsdp_bench.analysis.duration import Calibration, estimate_sweep, format_duration
from fsdp_bench.plan.case import Case

FOLDER = Path(__file__).resolve().parents[2] / "results" / "reference" / "cpu-estimate"
LOAD_BEFORE = {  # the 1-minute load average `uptime` read just before each run (NOTES.md)
    "fit-gpt_tiny-2-cases": 0.4,
    "fit-llama3_tiny-quiet": 0.7,
    "heldout-gpt2_tiny-quiet": 1.4,
    "heldout-gpt_tiny-busy-loops": 2.0,
    "heldout-qwen2_tiny-test-suite": 2.2,
}


def _cases(run: Path) -> list[Case]:
    """The run's cases, from each case's case.json as the sweep wrote it (case-json/)."""
    return [Case.from_dict(json.loads(p.read_text())) for p in sorted((run / "case-json").glob("*.json"))]


def _notes() -> dict[str, tuple[str, str]]:
    """folder -> (this version's estimate, took), from NOTES.md's table."""
    rows = {}
    for line in (FOLDER / "NOTES.md").read_text().splitlines():
        if m := re.match(r"\| `([^/]+)/` \|.*\| (\d+m\d\ds) \| (\d+m\d\ds) \|$", line):
            rows[m[1]] = (m[2], m[3])
    return rows


@pytest.mark.parametrize("name", sorted(LOAD_BEFORE))
def test_the_notes_estimate_is_this_versions_from_the_runs_files(name):
    run = FOLDER / name
    calibration = Calibration.from_facts(json.loads((run / "env.json").read_text()), LOAD_BEFORE[name], 2)
    estimate = estimate_sweep(_cases(run), calibration=calibration)
    assert (format_duration(estimate.total_s), _notes()[name][1]) == _notes()[name]
