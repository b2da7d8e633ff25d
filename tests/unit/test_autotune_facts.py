"""Issue 40's 96-case grid: the committed ground truth (results/reference/cpu-autotune/
gpt_tiny-96-truth-repeats2.json, scripts/measure_autotune.py --truth-only) and the tuner runs
judged against it (gpt_tiny-96-tune-burn2-run*.json, --truth ... --burn 2). Each row's verdict is
re-judged from the truth's cases, and the numbers docs/autotune.md states are read off the files."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "results" / "reference" / "cpu-autotune"
TRUTH = json.loads((FOLDER / "gpt_tiny-96-truth-repeats2.json").read_text())
RUNS = sorted(FOLDER.glob("gpt_tiny-96-tune-burn2-*.json"))  # the three runs and the rejected bar's one
DOCS = (ROOT / "docs" / "autotune.md").read_text()
_spec = importlib.util.spec_from_file_location("measure_autotune", ROOT / "scripts" / "measure_autotune.py")
measure_autotune = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(measure_autotune)


def _rows() -> list[tuple[str, dict]]:
    return [(p.name, row) for p in RUNS for row in json.loads(p.read_text())["rows"]]


def test_the_ground_truth_is_the_full_96_case_grid_with_two_interleaved_repeats():
    (truth,) = TRUTH["truths"]
    assert TRUTH["repeats"] == 2 and TRUTH["burn"] == 0
    assert len(truth["cases"]) == 96 and all(c["status"] == "ok" and c["repeats"] == 2 for c in truth["cases"])
    assert {"--bench-act-ckpt", "off,on"} <= set(TRUTH["options"])
    assert truth["load"]["samples"] > 100


def test_three_loaded_tuner_runs_are_judged_against_it():
    files = [json.loads(p.read_text()) for p in RUNS if p.stem[-5:-1] == "-run"]
    assert len(files) == 3 and all(
        f["burn"] == 2 and f["truth"].endswith("gpt_tiny-96-truth-repeats2.json") for f in files
    )


@pytest.mark.parametrize(("name", "row"), _rows(), ids=lambda x: x if isinstance(x, str) else "")
def test_each_runs_verdict_is_what_the_truth_says(name, row):
    (truth,) = TRUTH["truths"]
    answer = {
        "pick": row["pick"],
        "tied": row["tied"],
        "single_winner": row["single_winner"],
        "drift": row["drift"],
        "stopped": row["stopped"],
        "cost": {"spent_case_s": row["tune_case_s"]},
        "measured": [{"repeat_count": row["tune_runs"]}],
    }
    again = measure_autotune.judge(truth, answer)
    for key in ("true_best", "gap_pct", "within_noise", "tied_set_holds_best", "grid_case_s", "ratio"):
        assert again[key] == row[key], key
    # never a single winner the repeated ground truth puts outside the noise of its best
    assert row["within_noise"] or (not row["single_winner"] and row["tied_set_holds_best"])


def _pct(x: float) -> str:
    return f"{x:.1f}%"


@pytest.mark.parametrize(("name", "row"), _rows(), ids=lambda x: x if isinstance(x, str) else "")
def test_the_docs_state_each_runs_numbers(name, row):
    if "-run" not in name:  # the rejected exploration bar's run: in prose, not in the table
        text = " ".join(DOCS.split())
        assert f"`{name}`: ddp bs8 accum 2, tied {len(row['tied']) + 1}, gap {row['gap_pct']:.1f}%" in text
        assert f"{row['tune_runs']} runs, {100 * row['ratio']:.1f}%" in text
        return
    line = next((line for line in DOCS.splitlines() if line.startswith(f"| `{name}`")), None)
    assert line is not None, f"docs/autotune.md has no table row naming {name}"
    assert f"{100 * row['ratio']:.1f}%" in line and f"{row['load_tune']['mean']:.1f}" in line
    gap = "" if row["gap_pct"] is None else _pct(row["gap_pct"])
    assert gap in line and ("yes" if row["within_noise"] else "**no**") in line
    tied = len(row["tied"]) + 1
    assert (f"tied {tied}" in line) if not row["single_winner"] else "single" in line


def test_the_docs_state_the_truths_cost_and_load():
    (truth,) = TRUTH["truths"]
    seconds = sum(c["duration_s"] for c in truth["cases"])
    load = truth["load"]
    assert re.search(rf"{seconds:,.0f} case-seconds", DOCS)
    assert f"load {load['min']:.1f}-{load['max']:.1f}, mean {load['mean']:.1f}" in DOCS


def test_the_docs_state_the_replays_as_printed():
    replays = [line for line in (FOLDER / "gpt_tiny-96-replays.txt").read_text().splitlines() if line[:1].isdigit()]
    bar, kept = (
        re.search(r"cost median ([\d.]+)% \(max ([\d.]+)%\).*pick within noise (\d+)", r).groups() for r in replays
    )
    text = " ".join(DOCS.split())
    assert f"20 replays on the 96-case truth picked within its noise in only {bar[2]} (cost {bar[0]}%)" in text
    assert f"{kept[2]} of 20 within noise, median {kept[0]}%, at most {kept[1]}%" in text


def test_the_readme_row_states_the_three_runs():
    readme = (ROOT / "README.md").read_text()
    line = next(line for line in readme.splitlines() if "**96 cases**" in line)
    rows = [json.loads(p.read_text())["rows"][0] for p in RUNS if "-run" in p.name]
    assert ", ".join(f"{100 * r['ratio']:.1f}%" for r in rows) in line
    assert ", ".join(f"{r['gap_pct']:.1f}%" for r in rows) + ", all within noise" in line
    assert all(r["within_noise"] and not r["single_winner"] for r in rows)
    low, high = min(r["load_tune"]["min"] for r in rows), max(r["load_tune"]["max"] for r in rows)
    assert f"load {low:.1f}-{high:.1f}" in line
