import json
import os
from typing import Any

import pytest

from fsdp_bench.results.io import write_json_atomic
from fsdp_bench.results.layout import create_run_dir, newest_run
from fsdp_bench.results.load import load_case_result, load_run
from fsdp_bench.results.schema import ResultError


def test_atomic_write_refuses_to_overwrite(tmp_path):
    path = tmp_path / "a.json"
    write_json_atomic(path, {"x": 1}, shape=Any)
    with pytest.raises(FileExistsError):
        write_json_atomic(path, {"x": 2}, shape=Any)
    assert json.loads(path.read_text()) == {"x": 1}
    write_json_atomic(path, {"x": 3}, shape=Any, overwrite=True)
    assert json.loads(path.read_text()) == {"x": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]  # no temp file left behind


def test_run_dirs_are_never_reused(tmp_path):
    runs = {create_run_dir(tmp_path) for _ in range(5)}
    assert len(runs) == 5
    assert newest_run(tmp_path) == max(runs, key=lambda p: p.name)


def _result(case_id="ddp-x", status="ok", **extra):
    return {
        "schema_version": 1,
        "case_id": case_id,
        "case": {
            "strategy": "ddp",
            "model": "gpt_tiny",
            "batch_size": 2,
            "grad_accum": 1,
            "optimizer_timing": "after_shard",
        },
        "status": status,
        "metrics": {"tokens_per_s": 10.0, "step_time_s_median": 0.1},
        **extra,
    }


def test_load_reports_bad_files_by_name(tmp_path):
    run = create_run_dir(tmp_path)
    write_json_atomic(run / "cases" / "good.json", _result(), shape=Any)
    (run / "cases" / "torn.json").write_text('{"schema_version": 1, "case')
    write_json_atomic(run / "cases" / "future.json", {**_result(), "schema_version": 99}, shape=Any)
    results, problems = load_run(run)
    assert [r["case_id"] for r in results] == ["ddp-x"]
    assert any("torn.json: not valid JSON" in p for p in problems)
    assert any("future.json: schema_version 99 is not supported" in p for p in problems)


def test_unknown_status_is_rejected(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic(path, _result(status="meh"), shape=Any)
    with pytest.raises(ResultError, match="unknown status 'meh'"):
        load_case_result(path)


def test_table_flattens_and_sorts():
    from fsdp_bench.report.table import build_table

    rows = build_table([_result("b"), _result("a")]).to_dict("records")
    assert rows[0]["tokens_per_s"] == 10.0 and rows[0]["status"] == "ok" and rows[0]["strategy"] == "ddp"
    big = {**_result("c"), "case": {**_result()["case"], "batch_size": 16}}
    small = _result("d")
    assert list(build_table([big, small])["case_id"]) == ["d", "c"]  # numeric, not lexical


def test_newest_run_errors(tmp_path):
    with pytest.raises(ResultError, match="holds no runs"):
        newest_run(tmp_path)
    with pytest.raises(ResultError, match="no results folder"):
        newest_run(tmp_path / "missing")
    os.mkdir(tmp_path / "not-a-run")
    with pytest.raises(ResultError):
        newest_run(tmp_path)


def test_results_are_readable_by_others_like_any_file(tmp_path):
    import stat

    from fsdp_bench.results.io import readable_mode

    path = tmp_path / "r.json"
    write_json_atomic(path, {"x": 1}, shape=Any)
    assert stat.S_IMODE(path.stat().st_mode) == readable_mode()
    assert readable_mode() & 0o044  # group/others can read under the usual umask (022)


def test_case_fields_record_declares_every_case_field_with_its_type():
    """results/ may not import plan: records.CaseFields repeats plan.case.Case's fields, held here."""
    import dataclasses
    from typing import get_type_hints

    from fsdp_bench.plan.case import Case
    from fsdp_bench.results.checks import record_problem
    from fsdp_bench.results.records import CaseFields

    assert set(get_type_hints(CaseFields)) == {f.name for f in dataclasses.fields(Case)}
    assert record_problem(Case(strategy="fsdp2").to_dict(), CaseFields) is None


def test_a_bad_item_deep_in_a_record_is_named_by_where_it_is():
    from fsdp_bench.results.checks import record_problem
    from fsdp_bench.results.records import CaseResult

    data = {"case_id": "c", "status": "ok", "case": {}, "ranks": [{"stages": [{"stage": "data"}, {"stage": 3}]}]}
    data["case"] = {
        "strategy": "ddp",
        "model": "gpt_tiny",
        "nproc": 2,
        "batch_size": 1,
        "grad_accum": 1,
        "optimizer_timing": "after_shard",
        "seq_len": 32,
        "steps": 3,
        "warmup": 1,
    }
    assert record_problem(data, CaseResult) == "field ranks[0].stages[1].stage should be text, got an integer"
    data["ranks"][0]["stages"][1]["stage"] = "model"
    data["ranks"][0]["step_times_s"] = [0.1, 10**400]
    assert "ranks[0].step_times_s[1] is 1000000000...(401 digits), beyond" in record_problem(data, CaseResult)


@pytest.mark.parametrize(
    ("value", "hint", "problem"),
    [
        ([1, 2.5], list[int], "field x[1] should be an integer, got a number"),
        ([0.1, True], list[float], "field x[1] should be a number, got true/false"),
        ([0.1, float("inf")], list[float], "field x[1] is inf, beyond the +-1e+30 any measurement has"),
        ([3, float("nan"), "a"], list[int | float], "field x[2] should be a number, got text"),
        ([-(10**31)], list[int], "field x[0] is -100000000...(33 digits), beyond the +-1e+30 any measurement has"),
        (True, int | float, "field x should be a number, got true/false"),
        (1e308, int | float, "field x is 1e+308, beyond the +-1e+30 any measurement has"),
        (2.5, int | float | None, None),
        (None, list[float] | None, None),
        ([0.5, float("nan"), 7], list[int | float], None),
    ],
)
def test_numbers_in_lists_and_unions_are_each_checked(value, hint, problem):
    """The check's fast paths (a list of numbers in one loop, `int | float` as a float) refuse what
    the field-by-field check refuses, naming the same item."""
    from fsdp_bench.results.checks import record_problem

    assert record_problem(value, hint, "x") == problem
