"""scripts/measure_autotune.py itself (issue 40): its judgement of a tuner's answer against a
ground truth (pick, true best, gap, within noise, tied set holding the best, cost), the ground
truth read from a run folder, and its bad input (one line, non-zero exit, no traceback)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "measure_autotune.py"
_spec = importlib.util.spec_from_file_location("measure_autotune", SCRIPT)
measure_autotune = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(measure_autotune)


def _case(case_id: str, speed: float, *, spread: float = 4.0, status: str = "ok", seconds: float = 10.0) -> dict:
    """A ground-truth case measured twice: tokens/s, its step-time interval +-1%, its repeats'
    medians `spread` % apart."""
    step = 1000 / speed
    return {
        "case_id": case_id,
        "status": status,
        "duration_s": seconds,
        "repeats": 2,
        "tokens_per_s_per_device": speed,
        "step_time_s_median": step,
        "step_time_s_median_ci_low": 0.99 * step,
        "step_time_s_median_ci_high": 1.01 * step,
        "step_time_median_ci_level_pct": 95.0,
        "repeat_spread_pct": spread,
    }


TRUTH = {
    "grid": "gpt_tiny",
    "run": "truth-run",
    "load": {"min": 1.0, "mean": 2.0, "max": 3.0, "samples": 4},
    "wall_s": 50.0,
    "cases": [
        _case("best", 1000.0),
        _case("close", 980.0),  # within the best's noise: 2% slower, bands +-3%
        _case("slow", 700.0),  # beyond it
        _case("broken", 1.0, status="failed"),
    ],
}


def _answer(pick: str | None, tied: list[str], single: bool, spent: float = 4.0) -> dict:
    return {
        "pick": pick,
        "tied": tied,
        "single_winner": single,
        "drift": None,
        "stopped": "why",
        "cost": {"spent_case_s": spent},
        "measured": [{"repeat_count": 2}, {"repeat_count": 1}],
    }


def test_a_pick_within_the_truths_noise_of_its_best_is_judged_within_noise():
    row = measure_autotune.judge(TRUTH, _answer("close", [], True))
    assert row["true_best"] == "best" and row["cases"] == 4
    assert row["gap_pct"] == pytest.approx(2.0)
    assert row["within_noise"] and not row["tied_set_holds_best"]
    assert row["truth_tied_with_best"] == ["best", "close"]
    assert row["grid_case_s"] == 40.0 and row["ratio"] == pytest.approx(0.1) and row["tune_runs"] == 3


def test_a_single_winner_outside_the_noise_is_judged_so_and_a_tie_holding_the_best_is_not():
    wrong = measure_autotune.judge(TRUTH, _answer("slow", [], True))
    assert not wrong["within_noise"] and wrong["gap_pct"] == pytest.approx(30.0)
    tie = measure_autotune.judge(TRUTH, _answer("slow", ["best"], False))
    assert tie["tied_set_holds_best"] and not tie["within_noise"]
    nothing = measure_autotune.judge(TRUTH, _answer(None, [], False))
    assert nothing["gap_pct"] is None and not nothing["within_noise"] and not nothing["tied_set_holds_best"]


def test_the_runs_are_counted_by_what_they_were_for():
    rounds = [
        {"round": 0, "kind": "probe", "runs": [{"repeat_count": 1}, {"repeat_count": 1}]},
        {"round": 1, "kind": "explore", "runs": [{"repeat_count": 1}, {"repeat_count": 2}]},  # a new case, the control
        {"round": 2, "kind": "repeat", "runs": [{"repeat_count": 2}]},
    ]
    row = measure_autotune.judge(TRUTH, {**_answer("best", [], False), "rounds": rounds})
    assert row["runs_by_purpose"] == {"probe": 2, "explore": 1, "control": 1, "repeat": 1}


def test_the_tuners_runs_are_also_priced_at_the_truths_seconds_per_run():
    answer = {**_answer("best", [], False, spent=9.0), "measured": [{"case_id": "best", "repeat_count": 3}]}
    row = measure_autotune.judge(TRUTH, answer)  # the truth ran "best" twice in 10 s
    assert row["tune_case_s_truth_priced"] == pytest.approx(15.0) and row["ratio_truth_priced"] == pytest.approx(0.375)
    assert row["ratio"] == pytest.approx(9.0 / 40.0)
    unknown = {**answer, "measured": [{"case_id": "elsewhere", "repeat_count": 1}]}
    assert measure_autotune.judge(TRUTH, unknown)["ratio_truth_priced"] is None


def test_the_ground_truth_is_read_from_a_run_folders_case_files(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    result = {
        "case_id": "a",
        "status": "ok",
        "duration_s": 12.5,
        "repeats": [{"repeat": 1}, {"repeat": 2}],
        "metrics": {"tokens_per_s_per_device": 10.0, "step_time_s_median": 0.1, "peak_rss_gib": 1.0},
    }
    (cases / "a.json").write_text(json.dumps(result))
    (cases / "b.json").write_text(json.dumps({"case_id": "b", "status": "oom", "duration_s": None, "metrics": None}))
    a, b = measure_autotune.truth_cases(tmp_path)
    assert a == {
        "case_id": "a",
        "status": "ok",
        "duration_s": 12.5,
        "repeats": 2,
        "tokens_per_s_per_device": 10.0,
        "step_time_s_median": 0.1,
    }
    assert b == {"case_id": "b", "status": "oom", "duration_s": 0, "repeats": 1}


def _repeat_file(n: int, times: list[float]) -> dict:
    case = {"strategy": "ddp", "model": "gpt_tiny", "nproc": 1, "batch_size": 2, "grad_accum": 1, "seq_len": 32}
    case["steps"], case["warmup"] = len(times), 1
    ranks = [{"rank": 0, "step_times_s": times}]
    return {"case_id": "a", "case": case, "status": "ok", "repeat": n, "duration_s": 5.0, "ranks": ranks}


def test_rescore_merges_a_truths_repeats_again_and_keeps_its_load(monkeypatch, tmp_path):
    """A truth whose folder was written when pooled steps outvoted a loaded repeat (50 quiet steps
    against 11): --rescore reads its repeat files again, each repeat weighted alike."""
    cases = tmp_path / "results" / "truth-run" / "cases"
    (cases / "a").mkdir(parents=True)
    quiet, loaded = _repeat_file(1, [0.0243] * 50), _repeat_file(2, [0.1448] * 11)
    for n, data in ((1, quiet), (2, loaded)):
        (cases / "a" / f"repeat-{n}.json").write_text(json.dumps(data))
    pooled = {**quiet, "repeats": [{"repeat": 1}, {"repeat": 2}], "metrics": {"step_time_s_median": 0.0243}}
    (cases / "a.json").write_text(json.dumps(pooled))
    kept = tmp_path / "truth.json"
    kept.write_text(json.dumps({"command": ["x"], "burn": 0, "repeats": 2, "options": [], "truths": [TRUTH]}))
    out = tmp_path / "rescored.json"
    args = ["--truth-only", "--rescore", str(kept), "--results-dir", str(tmp_path / "results"), "--out", str(out)]
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args])
    measure_autotune.main()
    (truth,) = json.loads(out.read_text())["truths"]
    assert truth["load"] == TRUTH["load"] and truth["wall_s"] == TRUTH["wall_s"]
    (case,) = truth["cases"]
    assert case["step_time_s_median"] == pytest.approx((0.0243 + 0.1448) / 2) and case["repeats"] == 2
    missing = _main(monkeypatch, "--truth-only", "--rescore", str(kept), "--out", str(out))
    assert missing.startswith("measure_autotune: --rescore: no run folder") and "\n" not in missing


def _main(monkeypatch, *args: str) -> str:
    """The script's main() in this process; its SystemExit message (main exits on bad input)."""
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args])
    with pytest.raises(SystemExit) as exit_:
        measure_autotune.main()
    return str(exit_.value.code)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--truth-only"], "measure_autotune: --truth-only needs --out FILE"),
        (["--repeats", "0"], "measure_autotune: --repeats must be at least 1"),
        (["--resume", "/nonexistent/run"], "measure_autotune: --resume needs --truth-only and a run folder"),
        (["--truth-only", "--out", "x.json", "--resume", "/nonexistent/run"], "measure_autotune: --resume needs"),
        (["--truth", "/nonexistent/truth.json"], "measure_autotune: --truth /nonexistent/truth.json: "),
    ],
)
def test_bad_input_is_one_line(monkeypatch, args, says):
    message = _main(monkeypatch, *args)
    assert message.startswith(says) and "\n" not in message


def test_a_file_that_is_not_a_ground_truth_is_refused_in_one_line(monkeypatch, tmp_path):
    other = tmp_path / "rows.json"
    other.write_text(json.dumps({"command": [], "burn": 0, "rows": []}))
    message = _main(monkeypatch, "--truth", str(other))
    assert "not a --truth-only file" in message and "\n" not in message


def test_the_script_exits_non_zero_on_bad_input_without_a_traceback():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--truth", "/nonexistent/truth.json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("measure_autotune: --truth /nonexistent/truth.json: ")
    assert done.stderr.strip().count("\n") == 0
