"""scripts/replay_autotune.py: the grid options it reads off a --truth-only file, the run folder it
rebuilds from one (when the truth's own folder is lost), and its bad input (one line)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "replay_autotune.py"
_spec = importlib.util.spec_from_file_location("replay_autotune", SCRIPT)
replay_autotune = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay_autotune)
TRUTH = ROOT / "results" / "reference" / "cpu-autotune" / "gpt_tiny-96-truth-repeats2.json"


def test_a_truth_files_options_are_read_as_the_sweep_reads_them():
    data = {"repeats": 2, "options": ["--bench-seq-len", "32", "--bench-no-probes", "--bench-act-ckpt", "off,on"]}
    raw = replay_autotune.truth_options(data, "gpt_tiny")
    assert raw == {"model": "gpt_tiny", "repeats": "2", "seq-len": "32", "no-probes": "on", "act-ckpt": "off,on"}


def test_the_rebuilt_folder_holds_every_case_with_two_repeats_around_its_median(tmp_path):
    run = replay_autotune.rebuild_folder(TRUTH, tmp_path / "run")
    (truth,) = json.loads(TRUTH.read_text())["truths"]
    files = sorted((run / "cases").glob("*.json"))
    assert len(files) == len(truth["cases"]) == 96
    row = truth["cases"][0]
    result = json.loads((run / "cases" / f"{row['case_id']}.json").read_text())
    low, high = (r["step_time_s_median"] for r in result["repeats"])
    assert (high - low) / row["step_time_s_median"] == pytest.approx(row["repeat_spread_pct"] / 100)
    assert sum(r["duration_s"] for r in result["repeats"]) == pytest.approx(row["duration_s"])


def test_no_folder_and_no_truth_is_one_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT)])
    with pytest.raises(SystemExit) as exit_:
        replay_autotune.main()
    assert str(exit_.value.code) == "replay_autotune: give a run folder or --from-truth FILE, not both"
