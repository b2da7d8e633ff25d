"""docs/beyond-one-machine.md's sentences on `fit`'s answers for held-out generated configs (issue
35: no answer over its budget) are the committed runs': docs/fit_answers_holdout.json and
docs/fit_answers_holdout_<first seed>.json, each written by scripts/measure_fit_answers.py --seeds ... --out,
and the totals over all of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_bench.plan.generated_configs import FRESH_HOLDOUT_SEEDS

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "docs" / "fit_answers_holdout.json"
RUNS = [RUN] + [
    ROOT / "docs" / f"fit_answers_holdout_{s}.json"
    for s in (200004, 200007, 200010, 200013, 200015, 200018, 200021, 200024, 200027, 200030)
]


def _run(path: Path = RUN) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_the_summary_is_the_answers_and_they_are_of_held_out_seeds(path):
    run = _run(path)
    answered = [a for a in run["answers"] if a["batch"]]
    assert all(int(a["model"].removeprefix("generated:")) in FRESH_HOLDOUT_SEEDS for a in run["answers"])
    for a in answered:
        assert a["used_pct"] == round(100 * a["measured_bytes"] / a["budget_bytes"], 2)
    s = run["summary"]
    assert s["answers"] == len(answered)
    assert s["over_budget"] == sum(a["used_pct"] > 100 for a in answered)
    assert s["most_used_pct"] == max(a["used_pct"] for a in answered)
    assert s["least_used_pct"] == min(a["used_pct"] for a in answered)
    assert s["under_85_pct"] == sum(a["used_pct"] < 85 for a in answered)


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_the_docs_state_the_committed_figures(path):
    s, doc = _run(path)["summary"], " ".join((ROOT / "docs" / "beyond-one-machine.md").read_text().split())
    seeds = sorted({int(a["model"].removeprefix("generated:")) for a in _run(path)["answers"]})
    assert f"--out docs/{path.name}" in doc
    assert f"held-out seeds {seeds[0]}-{seeds[-1]}" in doc
    assert f"{s['answers']} answers, {s['over_budget']} over its budget" in doc
    assert f"the fullest at {s['most_used_pct']:.1f}%" in doc
    assert f"the least used at {s['least_used_pct']:.1f}%" in doc
    assert f"{s['under_85_pct']} leave more than 15% unused" in doc


def test_the_docs_state_the_totals_over_every_committed_run():
    runs, doc = [_run(p) for p in RUNS], " ".join((ROOT / "docs" / "beyond-one-machine.md").read_text().split())
    assert sorted(p.name for p in RUNS) == sorted(p.name for p in (ROOT / "docs").glob("fit_answers_holdout*.json"))
    summaries = [r["summary"] for r in runs]
    configs = {a["model"] for r in runs for a in r["answers"]}
    most, least = max(s["most_used_pct"] for s in summaries), min(s["least_used_pct"] for s in summaries)
    total = sum(s["answers"] for s in summaries)
    over, under = sum(s["over_budget"] for s in summaries), sum(s["under_85_pct"] for s in summaries)
    assert (
        f"{len(configs)} configs): {total} answers, {over} over its budget, the fullest at {most:.1f}%, "
        f"the least used at {least:.1f}%; {under} leave more than 15% unused"
    ) in doc


def test_the_unused_budget_figures_are_the_answers():
    answers, doc = _run()["answers"], " ".join((ROOT / "docs" / "beyond-one-machine.md").read_text().split())
    ones = [a["next_batch_pct"] for a in answers if a["batch"] == 1]
    assert f"(predicted {min(ones):.0f}-{max(ones):.0f}% with the margin)" in doc
    under = max(answers, key=lambda a: a["used_pct"] - a["predicted_pct"])
    assert f"largest under-prediction among them is {under['used_pct'] - under['predicted_pct']:.1f} point" in doc
    assert f"measured {under['used_pct']:.1f}%, predicted {under['predicted_pct']:.1f}%" in doc
    ddp = [a["predicted_pct"] - a["used_pct"] for a in answers if a["strategy"] == "ddp"]
    assert f"DDP's answers measure {min(ddp):.0f}-{max(ddp):.0f} points under their prediction" in doc
