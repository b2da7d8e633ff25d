"""Every field of every file the report reads, broken five ways (wrong type, null, huge, negative,
missing), at every schema version: the report is written every time, and each broken file is
either drawn or named in one note (issue 37)."""

from __future__ import annotations

import copy
import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from fsdp_bench.analysis.step_model import prior_model
from fsdp_bench.analysis.tune import Measured, Skip, TuneLog, TuneRequest, tune_answer
from fsdp_bench.plan.case import Case
from fsdp_bench.report.charts.style import RunData
from fsdp_bench.report.charts.tuning import chart_tune_rounds
from fsdp_bench.report.page import Page, render_markdown
from fsdp_bench.report.writer import write_report
from fsdp_bench.results.load import load_environment_file, load_tune_answer
from fsdp_bench.results.schema import READABLE_SCHEMA_VERSIONS, ResultError
from tests.sweep_helpers import PROJECT_ROOT

GOLDEN = PROJECT_ROOT / "tests" / "data" / "golden" / "base"
GOLDEN_CASE = GOLDEN / "cases" / "ddp-gpt_tiny-ws2-bs1-ga1-opt_after-sl32.json"
BREAKS = {
    "type": lambda v: 7 if isinstance(v, str) else "x",
    "null": lambda v: None,
    "huge": lambda v: 1e308,
    "negative": lambda v: -1,
    "missing": None,
}


def _paths(obj: Any, prefix: tuple = (), depth: int = 0):
    """Every field down to four levels (a list stands for its first item)."""
    if depth > 3:
        return
    items = obj.items() if isinstance(obj, dict) else ([(0, obj[0])] if isinstance(obj, list) and obj else [])
    for key, value in items:
        yield prefix + (key,)
        yield from _paths(value, prefix + (key,), depth + 1)


def _broken(data: dict, path: tuple, kind: str) -> dict:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    if kind == "missing":
        node.pop(path[-1])
    else:
        node[path[-1]] = BREAKS[kind](node[path[-1]])
    return out


def _variants(data: dict, skip: tuple = (), within=lambda path: True):
    for path in _paths(data):
        if path not in skip and within(path):
            for kind in BREAKS:
                yield f"{'.'.join(map(str, path))}-{kind}", _broken(data, path, kind)


def _migrated(path: tuple) -> bool:
    """What migration steps read: the status, the metrics, each rank's fields, its step times and
    peak. Older versions break these (the current one every field): a few hundred cases a report."""
    deep = (("ranks", 0, "step_times_s", 0), ("ranks", 0, "memory", "peak_allocated_bytes"))
    return (path[0] in ("ranks", "metrics", "status") and len(path) <= 3) or path in deep


@pytest.mark.parametrize("version", [*READABLE_SCHEMA_VERSIONS, "2-without-interval"])
def test_every_broken_case_field_is_drawn_or_one_note_and_the_report_is_written(tmp_path, version):
    good = json.loads(GOLDEN_CASE.read_text())
    within = (lambda path: True) if version == READABLE_SCHEMA_VERSIONS[-1] else _migrated
    good["schema_version"] = int(str(version)[0])
    if version == "2-without-interval":  # migrate.py computes the interval from the step times
        del good["metrics"]["step_time_s_median_ci_low"]
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    names = {}
    for n, (name, data) in enumerate(_variants(good, skip=(("schema_version",),), within=within)):
        if isinstance(data.get("case_id"), str):
            data["case_id"] += f"-fuzz{n}"
        names[f"fuzz{n}.json"] = (name, data.get("case_id"))
        (run / "cases" / f"fuzz{n}.json").write_text(json.dumps(data))
    # Charts read records migrated to the current version, and the current version's run breaks
    # every field and draws them: an older version's broken fields reach the charts as that run's
    # do, so drawing them again cost ~15 s of CPU each for nothing. The migration that computes a
    # field (the interval) from broken step times makes new values: that run draws them too.
    charts = version in (READABLE_SCHEMA_VERSIONS[-1], "2-without-interval")
    written, notes = write_report(run, charts=charts)
    assert run / "report.md" in written and run / "comparison.csv" in written
    drawn = {row["case_id"] for row in csv.DictReader((run / "comparison.csv").open())}
    noted = "\n".join(notes)
    for file, (name, case_id) in names.items():
        assert case_id in drawn or f"{file}: " in noted, name
    assert len(drawn) > len(list(GOLDEN.glob("cases/*.json")))  # many broken files are still drawn


def _tune_answer() -> dict:
    """An answer as --bench-tune writes it, from the tuner's own functions."""
    cases = tuple(
        Case(strategy=s, batch_size=b, seq_len=32, steps=3, warmup=1) for s in ("ddp", "fsdp2") for b in (1, 2)
    )
    log = TuneLog()
    for i, case in enumerate(cases[:3]):
        log.predicted_step_s[case.id] = 0.01 * (i + 1)
        log.measured[case.id] = Measured(case.id, "ok", 0.01 * (i + 1), 1000.0 / (i + 1), 950.0, 1050.0, 0.1, 1, 2.0)
    log.rounds = [
        {"round": 0, "kind": "probe", "runs": [{"case_id": cases[0].id, "speed_tokens_per_s": 1000.0}]},
        {"round": 1, "kind": "explore", "runs": [{"case_id": c.id, "speed_tokens_per_s": 500.0} for c in cases[1:3]]},
    ]
    answer = tune_answer(
        TuneRequest("gpt_tiny", cases),
        log,
        prior_model(cases[0]),
        [Skip(cases[3].id, "predicted not to fit", 9.0)],
        budget_gib=4.0,
        max_repeats=2,
        stopped="converged",
    )
    answer["boundary_check"] = {"case_id": cases[0].id, "predicted_peak_in_gib": 0.1, "measured_peak_in_gib": 0.1}
    return json.loads(json.dumps(answer))


def _render(tmp_path: Path, *, env=None, tuning=()) -> None:
    """What the report does with an env.json and a tune answer: its page, and the rounds chart."""
    import pandas as pd

    render_markdown(Page(run_name="r", env=env, df=pd.DataFrame(), summary=[], charts=[], tuning=list(tuning)))
    if tuning and tuning[0].get("rounds"):
        chart_tune_rounds(RunData(df=pd.DataFrame(), tuning=list(tuning)), tmp_path / "tune.png")


def test_every_broken_tune_answer_field_is_drawn_or_one_error(tmp_path):
    good = _tune_answer()
    load_tune_answer(_write(tmp_path / "good.json", good))
    _render(tmp_path, tuning=[good])
    refused = 0
    for name, data in _variants(good):
        try:
            answer = load_tune_answer(_write(tmp_path / "t.json", data))
        except ResultError as exc:
            assert str(exc).count("\n") == 0 and "t.json: " in str(exc), name
            refused += 1
            continue
        _render(tmp_path, tuning=[answer])
    assert refused > 50


def test_every_broken_environment_field_is_shown_or_one_error(tmp_path):
    good = json.loads((GOLDEN / "env.json").read_text())
    good["gpu_names"] = ["NVIDIA H100"]
    for name, data in _variants(good):
        try:
            env = load_environment_file(_write(tmp_path / "env.json", data))
        except ResultError as exc:
            assert "env.json: " in str(exc), name
            continue
        _render(tmp_path, env=env)


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path
