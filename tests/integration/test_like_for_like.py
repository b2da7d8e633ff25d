"""Issue #16, like for like: only cases doing the same work per optimizer step are ranked, and a
case that did not train is never "best" (comparison.csv is_best/rank_in_group, report.md bold,
summary lines). Built on a copy of the golden base run with a non-training case made fastest."""

from __future__ import annotations

import csv
import json

from fsdp_bench.report.summary import summary_lines
from fsdp_bench.report.table import build_table, did_train
from tests.test_visualize import copy_run, visualize

FROZEN = "fsdp2-gpt_tiny-ws2-bs1-ga1-opt_before-sl32"  # params_changed False in the golden run
HUGE = 1e9


def _run_with_fastest_frozen_case(tmp_path):
    run = copy_run("base", tmp_path)
    path = run / "cases" / f"{FROZEN}.json"
    data = json.loads(path.read_text())
    assert data["status"] == "ok" and data["metrics"]["params_changed"] is False
    data["metrics"]["tokens_per_s_per_device"] = HUGE
    data["metrics"]["step_time_s_median"] = 1e-9
    path.write_text(json.dumps(data))
    return run


def test_non_training_fastest_case_is_never_best(tmp_path):
    run = _run_with_fastest_frozen_case(tmp_path)
    proc = visualize(run)
    assert proc.returncode == 0, proc.stderr
    rows = {r["case_id"]: r for r in csv.DictReader((run / "comparison.csv").open())}
    frozen = rows[FROZEN]
    assert frozen["trained"] == "False" and frozen["is_best"] == "False" and frozen["rank_in_group"] == ""
    # its group still has a best case, one that trained and did the same work
    group = [r for r in rows.values() if r["compare_group"] == frozen["compare_group"]]
    best = [r for r in group if r["is_best"] == "True"]
    assert len(best) == 1 and best[0]["trained"] == "True" and best[0]["rank_in_group"] == "1"
    assert frozen["compare_group"] == "gpt_tiny sl32 tok64 fp32"
    report = (run / "report.md").read_text()
    line = next(l for l in report.splitlines() if "| fsdp2 | 1 | 1 | before_shard |" in l)
    assert "| 1,000,000,000 |" in line and "**1,000,000,000**" not in line, line
    fastest = [l for l in report.splitlines() if "Fastest strategy" in l]
    assert fastest and all("1,000,000,000" not in l and "1e+09" not in l for l in fastest), fastest


def test_groups_compare_only_same_tokens_per_step(tmp_path):
    from fsdp_bench.results.load import load_run

    run = _run_with_fastest_frozen_case(tmp_path)
    results, _ = load_run(run)
    df = build_table(results)
    ok = df[df["trained"] == True]  # noqa: E712
    # bs1 ga2 and bs2 ga1 do the same work (64 tokens x 2 ranks... per step); bs2 ga2 does twice that
    for group, part in ok.groupby("compare_group"):
        assert part["tokens_per_optimizer_step"].nunique() == 1, group
        assert (part["rank_in_group"] == 1).sum() >= 1
    assert df["is_best"].sum() == ok["compare_group"].nunique()
    assert not any(str(HUGE) in line or "1e+09" in line for _, line in summary_lines(df))


def test_did_train():
    base = {"status": "ok", "params_changed": True, "loss_first": 6.0, "loss_last": 5.0, "steps_measured": 3}
    assert did_train(base)
    assert not did_train({**base, "params_changed": False})
    assert not did_train({**base, "loss_last": 6.0})  # flat loss
    assert did_train({**base, "loss_last": 6.0, "steps_measured": 1})  # one step: flat by definition
    assert not did_train({**base, "status": "oom"})
