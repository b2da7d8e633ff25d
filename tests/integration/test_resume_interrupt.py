"""Acceptance: a sweep interrupted with SIGINT part-way, then resumed with --bench-resume.

Case bs2 hangs (fault injected only in the first run) so the interrupt surely lands while a
case is running. Afterwards: bs1's result untouched, bs2's attempt set aside, no process left;
the resumed run re-runs bs2, runs bs3, and every case is in the run folder exactly once.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.sweep_helpers import (
    SMALL,
    case_results,
    child_env,
    processes_of,
    pytest_cmd,
    run_dirs,
    start_sweep,
    wait_for,
    write_sweep_project,
)

pytestmark = pytest.mark.slow

OPTIONS = [*SMALL, "--bench-batch-sizes", "1,2,3", "--bench-timeout", "120", "--bench-kill-grace", "10"]
IDS = [f"ddp-gpt_tiny-ws2-bs{bs}-ga1-opt_after-sl32" for bs in (1, 2, 3)]


def _rank_stage(work: Path, rank: int) -> str | None:
    try:
        return json.loads((work / f"rank-{rank}.json").read_text()).get("stage")
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    write_sweep_project(root)
    results = root / "results"
    proc = start_sweep(
        root, "-q", *OPTIONS, "--bench-results-dir", str(results), FSDP_BENCH_FAULTS="hang@measure:0/-bs2-"
    )
    try:
        wait_for(lambda: len(run_dirs(results)) == 1, 60, "the run folder")
        (run,) = run_dirs(results)
        work = run / "cases" / IDS[1]
        wait_for(lambda: _rank_stage(work, 0) == "measure", 120, "bs2 to hang in its measured steps")
        bs1_before = (run / "cases" / f"{IDS[0]}.json").read_bytes()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return {
        "root": root,
        "run": run,
        "proc": proc,
        "out": out,
        "bs1_before": bs1_before,
        "left_after_interrupt": processes_of(run),
        "results_after_interrupt": case_results(run),
    }


def test_interrupt_kills_the_running_case_and_keeps_finished_results(interrupted):
    assert interrupted["proc"].returncode == 2, interrupted["out"][-3000:]  # pytest: interrupted
    assert interrupted["left_after_interrupt"] == []
    assert list(interrupted["results_after_interrupt"]) == [IDS[0]]
    assert interrupted["results_after_interrupt"][IDS[0]]["status"] == "ok"
    assert f"--bench-resume {interrupted['run']}" in interrupted["out"]
    # seen on an H100 run stopped by `timeout`: pytest-benchmark's warning around the stop lines
    assert "Benchmark fixture was not used" not in interrupted["out"]


@pytest.fixture(scope="module")
def resumed(interrupted):
    proc = subprocess.run(
        pytest_cmd("test_sweep.py", "-q", *OPTIONS, "--bench-resume", str(interrupted["run"])),
        cwd=interrupted["root"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    return {"proc": proc, "results": case_results(interrupted["run"])}


def test_resume_runs_the_rest_and_every_case_is_there_once(interrupted, resumed):
    assert resumed["proc"].returncode == 0, resumed["proc"].stdout[-3000:]
    run = interrupted["run"]
    assert sorted(resumed["results"]) == IDS  # one file per case: none lost, none duplicated
    assert all(r["status"] == "ok" for r in resumed["results"].values())
    assert sorted(p.name for p in (run / "cases").iterdir() if p.is_dir() and not p.name.startswith(".")) == IDS
    # the ok case was not re-run: its file is byte for byte the one written before the interrupt
    assert (run / "cases" / f"{IDS[0]}.json").read_bytes() == interrupted["bs1_before"]
    # the interrupted attempt is kept aside, not overwritten
    assert (run / "cases" / ".attempts" / f"{IDS[1]}.1" / IDS[1] / "log.txt").exists()
    assert len(list(run.parent.iterdir())) == 1  # no new run folder
    assert processes_of(run) == []


def test_resume_of_a_run_in_use_is_refused(interrupted, tmp_path):
    """A second sweep may not resume a run while another holds it (flock on RUN/.lock)."""
    import fcntl
    import os

    fd = os.open(interrupted["run"] / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = subprocess.run(
            pytest_cmd("test_sweep.py", "-q", *OPTIONS, "--bench-resume", str(interrupted["run"])),
            cwd=interrupted["root"],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.close(fd)
    assert proc.returncode == 4
    assert "--bench-resume:" in proc.stderr and "in use by another running sweep" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_resume_reruns_a_case_an_older_loop_measured(interrupted, resumed):
    """A run measured partly by an older timed loop (results.schema.MEASUREMENT_VERSION) would mix
    two harnesses: the resume sets that case aside and measures it again; the others are kept."""
    from fsdp_bench.results.schema import MEASUREMENT_VERSION

    run = interrupted["run"]
    old = run / "cases" / f"{IDS[2]}.json"
    data = json.loads(old.read_text())
    assert all(r["measurement_version"] == MEASUREMENT_VERSION for r in data["ranks"])
    data["schema_version"] = 3  # as the first loop's files read: no version, a norm every step
    for rank in data["ranks"]:
        del rank["measurement_version"], rank["update_norm_steps"]
    old.write_text(json.dumps(data))
    kept = (run / "cases" / f"{IDS[0]}.json").read_bytes()
    proc = subprocess.run(
        pytest_cmd("test_sweep.py", "-q", *OPTIONS, "--bench-resume", str(run)),
        cwd=interrupted["root"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "(2 kept from the resumed run)" in proc.stdout
    assert (run / "cases" / f"{IDS[0]}.json").read_bytes() == kept
    again = json.loads(old.read_text())
    assert again["status"] == "ok" and all(r["measurement_version"] == MEASUREMENT_VERSION for r in again["ranks"])
    set_aside = json.loads((run / "cases" / ".attempts" / f"{IDS[2]}.1" / f"{IDS[2]}.json").read_text())
    assert set_aside["schema_version"] == 3 and all("measurement_version" not in r for r in set_aside["ranks"])
