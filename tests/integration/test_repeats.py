"""Issue #16: `--bench-repeats N` runs each case N times, each in a fresh torchrun, in its own
folder; the step times of all repeats make the case's statistics, the spread between repeats is
reported, case ids stay the same, and a resume keeps the repeats that finished ok."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess

import pytest

from fsdp_bench.analysis.repeats import merge_repeats, pooled_step_times
from tests.sweep_helpers import SMALL, case_results, child_env, pytest_cmd, run_dirs, write_sweep_project

CASE = "ddp-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"
OPTIONS = [*SMALL, "--bench-batch-sizes", "2", "--bench-repeats", "2", "--bench-timeout", "120"]


def _repeat(n: int, times: list[float], status: str = "ok") -> dict:
    case = {
        "strategy": "ddp",
        "model": "gpt_tiny",
        "nproc": 2,
        "batch_size": 2,
        "grad_accum": 1,
        "seq_len": 32,
        "steps": len(times),
        "warmup": 1,
    }
    return {
        "case_id": CASE,
        "case": case,
        "status": status,
        "reason": "" if status == "ok" else "rank 1 died",
        "repeat": n,
        "duration_s": 5.0,
        "metrics": {"step_time_s_median": sorted(times)[len(times) // 2]} if times else {},
        "ranks": [{"rank": 0, "step_times_s": times}, {"rank": 1, "step_times_s": [t / 2 for t in times]}],
    }


def test_merge_pools_the_step_times_and_measures_the_spread():
    merged = merge_repeats([_repeat(1, [1.0, 1.0, 1.0]), _repeat(2, [2.0, 2.0, 2.0])])
    m = merged["metrics"]
    assert m["repeats"] == 2 and m["steps_measured"] == 6
    assert m["repeat_step_time_s_medians"] == [1.0, 2.0]
    assert m["repeat_spread_pct"] == pytest.approx(100 * (2.0 - 1.0) / 1.5)
    assert m["step_time_s_median"] == 1.5
    assert pooled_step_times(merged) == [1.0] * 3 + [2.0] * 3
    assert merged["duration_s"] == 10.0 and "repeat" not in merged


def test_each_repeat_weighs_alike_however_many_steps_it_measured():
    """A time-capped loop measures more steps on a quiet machine: gpt2_small_odd ddp bs4 accum 2
    measured 50 steps at 0.0243 s in one repeat and 11 at 0.1448 s in the other, and the pooled
    median (0.0321 s) was the quiet repeat's alone."""
    quiet, loaded = [0.0243] * 50, [0.1448] * 11
    merged = merge_repeats([_repeat(1, quiet), _repeat(2, loaded)])
    m = merged["metrics"]
    assert m["steps_measured"] == 61
    assert m["step_time_s_median"] == pytest.approx((0.0243 + 0.1448) / 2)  # 11 steps from each
    assert pooled_step_times(merged) == quiet + loaded  # the raw record keeps every step
    alike = merge_repeats([_repeat(1, [1.0, 3.0] * 5), _repeat(2, [2.0] * 10)])
    assert alike["metrics"]["step_time_s_median"] == 2.0


def test_a_failed_repeat_fails_the_case_and_says_which():
    merged = merge_repeats([_repeat(1, [1.0, 1.0]), _repeat(2, [], status="failed")])
    assert merged["status"] == "failed"
    assert merged["reason"] == "repeat 2 of 2: rank 1 died"
    early = merge_repeats([_repeat(1, [], status="failed")], planned=3)  # the first failure ends the case
    assert early["reason"] == "repeat 1 of 3: rank 1 died"
    assert [r["status"] for r in merged["repeats"]] == ["ok", "failed"]


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    root = tmp_path_factory.mktemp("repeats")
    write_sweep_project(root)
    proc = subprocess.run(
        pytest_cmd("test_sweep.py", "-q", *OPTIONS, "--bench-results-dir", "results", "--benchmark-json=bench.json"),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = run_dirs(root / "results")
    return root, run, proc.stdout


@pytest.mark.slow
def test_two_repeats_in_their_own_folders_feed_one_result(repeated):
    root, run, out = repeated
    assert list(case_results(run)) == [CASE]  # the id is the case's, not a repeat's
    work = run / "cases" / CASE
    for n in (1, 2):
        assert (work / f"repeat-{n}" / "rank-0.json").is_file()
        assert json.loads((work / f"repeat-{n}.json").read_text())["status"] == "ok"
    launched = {json.loads((work / f"repeat-{n}.json").read_text())["launched_unix"] for n in (1, 2)}
    assert len(launched) == 2  # two launches, not one result copied
    result = case_results(run)[CASE]
    assert result["metrics"]["repeats"] == 2 and result["metrics"]["steps_measured"] == 4
    assert len(result["metrics"]["repeat_step_time_s_medians"]) == 2
    assert "2 repeats, medians spread" in out
    bench = json.loads((root / "bench.json").read_text())["benchmarks"][0]
    assert bench["stats"]["rounds"] == 4  # pytest-benchmark sees both repeats' steps
    from fsdp_bench.report.writer import write_report

    write_report(run)
    assert "spread between repeats (%)" in (run / "report.md").read_text()
    # what the case cost the sweep counts both repeats
    (row,) = list(csv.DictReader((run / "comparison.csv").open()))
    parts = sum(float(row[f"time_{p}_s"]) for p in ("launch", "setup", "train", "probes", "exit"))
    assert parts == pytest.approx(result["duration_s"], abs=0.1)


@pytest.mark.slow
def test_resume_keeps_the_ok_repeat_and_reruns_the_unfinished_one(repeated):
    """The state a sweep interrupted during repeat 2 leaves: repeat 2's folder without its
    result, and no merged result."""
    root, run, _ = repeated
    resumed_run = root / "resumed"
    shutil.copytree(run, resumed_run, ignore=shutil.ignore_patterns(".lock"))
    work = resumed_run / "cases" / CASE
    first = json.loads((work / "repeat-1.json").read_text())
    (work / "repeat-2.json").unlink()
    (resumed_run / "cases" / f"{CASE}.json").unlink()
    proc = subprocess.run(
        pytest_cmd("test_sweep.py", "-q", *OPTIONS, "--bench-resume", str(resumed_run)),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads((work / "repeat-1.json").read_text())["launched_unix"] == first["launched_unix"]
    assert json.loads((work / "repeat-2.json").read_text())["status"] == "ok"
    assert (resumed_run / "cases" / ".attempts" / f"{CASE}-repeat2.1" / "repeat-2").is_dir()
    result = case_results(resumed_run)[CASE]
    assert result["status"] == "ok" and result["metrics"]["steps_measured"] == 4
