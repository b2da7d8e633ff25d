"""Issues #16 and #25, on a real sweep (gpt_tiny, 2 gloo ranks, ddp and fsdp2, 2 repeats): each
repeat is a fresh torchrun in a folder of its own, and the step times of both make the case's
statistics (pytest-benchmark's too); the repeats run round-robin (A1 B1 A2 B2), read from the
launch times the run folder records; each launched repeat has a live line, the first case's line
an ETA; a resume launches only the missing repeat, keeps the ok one and the order of the rest, and
sets the unfinished one's folder aside. No speed is asserted: timings on this shared machine are
noise. (tests/unit/test_merge_repeats.py holds the merge's rules on made-up repeats.)"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess

import pytest

from tests.sweep_helpers import SMALL, case_results, child_env, pytest_cmd, run_dirs, write_sweep_project

pytestmark = pytest.mark.slow

DDP = "ddp-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"
FSDP2 = "fsdp2-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"
OPTIONS = [*SMALL, "--bench-strategies", "ddp,fsdp2", "--bench-batch-sizes", "2", "--bench-repeats", "2"]


def _launch_order(run) -> list[tuple[str, int]]:
    """(case id, repeat) of the repeats with a result, sorted by when their torchrun was launched."""
    files = {(case, n): run / "cases" / case / f"repeat-{n}.json" for case in (DDP, FSDP2) for n in (1, 2)}
    launched = {key: json.loads(f.read_text())["launched_unix"] for key, f in files.items() if f.exists()}
    return sorted(launched, key=launched.get)


def _sweep(root, *extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        pytest_cmd("test_sweep.py", "-q", *OPTIONS, *extra),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    root = tmp_path_factory.mktemp("interleaved")
    write_sweep_project(root)
    proc = _sweep(root, "--bench-results-dir", "results", "--benchmark-json=bench.json")
    (run,) = run_dirs(root / "results")
    return root, run, proc.stdout


def test_repeats_run_round_robin_over_the_cases(interleaved):
    _, run, out = interleaved
    assert _launch_order(run) == [(DDP, 1), (FSDP2, 1), (DDP, 2), (FSDP2, 2)]
    results = case_results(run)
    assert sorted(results) == [DDP, FSDP2]
    assert all(r["status"] == "ok" and r["metrics"]["repeats"] == 2 for r in results.values())
    lines = [line for line in out.splitlines() if line.startswith("[")]
    # one line per launched repeat, in launch order, and one per case when its result is merged
    assert [line.split("  ")[0] for line in lines] == [
        f"[repeat 1/2] {DDP}",
        f"[repeat 1/2] {FSDP2}",
        f"[repeat 2/2] {DDP}",
        f"[1/2] {DDP}",
        f"[repeat 2/2] {FSDP2}",
        f"[2/2] {FSDP2}",
    ], out
    assert re.search(r"ETA \d+m\d\ds$", lines[3]), lines[3]  # one launch left after the first case
    assert "ETA" not in lines[-1] and "ETA" not in lines[-2]


def test_two_repeats_in_their_own_folders_feed_one_result(interleaved):
    root, run, out = interleaved
    work = run / "cases" / DDP
    for n in (1, 2):
        assert (work / f"repeat-{n}" / "rank-0.json").is_file()
        assert json.loads((work / f"repeat-{n}.json").read_text())["status"] == "ok"
    result = case_results(run)[DDP]  # the id is the case's, not a repeat's
    assert result["metrics"]["steps_measured"] == 4
    assert len(result["metrics"]["repeat_step_time_s_medians"]) == 2
    assert "2 repeats, medians spread" in out
    bench = {b["param"]: b for b in json.loads((root / "bench.json").read_text())["benchmarks"]}
    assert bench[DDP]["stats"]["rounds"] == 4  # pytest-benchmark sees both repeats' steps
    from fsdp_bench.report.writer import write_report

    write_report(run)
    assert "spread between repeats (%)" in (run / "report.md").read_text()
    # what the case cost the sweep counts both repeats
    row = next(r for r in csv.DictReader((run / "comparison.csv").open()) if r["case_id"] == DDP)
    parts = sum(float(row[f"time_{p}_s"]) for p in ("launch", "setup", "train", "probes", "exit"))
    assert parts == pytest.approx(result["duration_s"], abs=0.1)


def test_resume_launches_only_the_missing_repeat(interleaved):
    """The state a sweep interrupted during the last repeat leaves: FSDP2's repeat 2 has a
    folder but no result, and FSDP2 no merged result."""
    root, run, _ = interleaved
    resumed = root / "resumed"
    shutil.copytree(run, resumed, ignore=shutil.ignore_patterns(".lock"))
    first = json.loads((resumed / "cases" / FSDP2 / "repeat-1.json").read_text())
    (resumed / "cases" / FSDP2 / "repeat-2.json").unlink()
    (resumed / "cases" / f"{FSDP2}.json").unlink()
    before = _launch_order(resumed)
    assert before == [(DDP, 1), (FSDP2, 1), (DDP, 2)]
    out = _sweep(root, "--bench-resume", str(resumed)).stdout
    assert _launch_order(resumed) == [*before, (FSDP2, 2)]
    assert [line.split("  ")[0] for line in out.splitlines() if line.startswith("[")] == [
        f"[1/2] {DDP}",
        f"[repeat 2/2] {FSDP2}",
        f"[2/2] {FSDP2}",
    ], out
    kept = next(line for line in out.splitlines() if line.startswith(f"[1/2] {DDP}"))
    assert kept.startswith(f"[1/2] {DDP}  kept from the resumed run (ok)  ") and "elapsed" not in kept, kept
    result = case_results(resumed)[FSDP2]
    assert result["status"] == "ok" and result["metrics"]["repeats"] == 2 and result["metrics"]["steps_measured"] == 4
    work = resumed / "cases" / FSDP2
    assert json.loads((work / "repeat-1.json").read_text())["launched_unix"] == first["launched_unix"]
    assert (resumed / "cases" / ".attempts" / f"{FSDP2}-repeat2.1" / "repeat-2").is_dir()
