"""Issue 23, item 10, on real filesystems: a run folder that turns read-only mid-sweep and a disk
that is 100% full. We run as root, which ignores chmod, so tests/mounts.py makes them with mounts
(a read-only bind mount, a filled tmpfs); where mounting is not allowed those tests skip."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from fsdp_bench.results.load import load_case_result
from tests.mounts import read_only_bind, require_mounts
from tests.sweep_helpers import SMALL, case_results, child_env, processes_of, pytest_cmd, write_sweep_project

STOP_WORDS = ("Read-only file system", "stopping (resume later with --bench-resume")


def _start_sweep(project: Path, results: Path, *args: str, log: Path) -> subprocess.Popen:
    project.mkdir()
    write_sweep_project(project)
    with open(log, "wb") as out:  # a file, not a pipe: nothing blocks on an unread buffer
        return subprocess.Popen(
            pytest_cmd("test_sweep.py", "-q", *SMALL, "--bench-results-dir", str(results), *args),
            cwd=project,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _first_result(results: Path, sweep: subprocess.Popen, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and sweep.poll() is None:
        done = list(results.glob("*/cases/*.json"))
        if done:
            return done[0]
        time.sleep(0.05)
    pytest.fail(f"no case finished in {timeout_s:.0f} s (sweep exit {sweep.poll()})")


def test_a_run_folder_made_read_only_mid_sweep_is_one_stop_line(tmp_path):
    require_mounts(tmp_path / "scratch")
    results, log = tmp_path / "results", tmp_path / "sweep.log"
    sweep = _start_sweep(tmp_path / "project", results, "--bench-batch-sizes", "1,2,3", log=log)
    try:
        first = _first_result(results, sweep, timeout_s=240)
        kept = first.read_bytes()
        run = first.parent.parent
        with read_only_bind(run):
            code = sweep.wait(timeout=300)
            text = log.read_text(errors="replace")
            left = processes_of(run)
    finally:
        if sweep.poll() is None:
            sweep.send_signal(signal.SIGKILL)
            sweep.wait()
    assert code == 4, text
    assert "Traceback" not in text and "INTERNALERROR" not in text, text
    stops = [ln for ln in text.splitlines() if all(w in ln for w in STOP_WORDS)]
    assert len(stops) == 1 and f"fsdp-bench: {run}: Read-only file system" in stops[0], text
    assert "1 passed" in text and " failed" not in text and "warnings summary" not in text, text
    assert first.read_bytes() == kept and load_case_result(first)["status"] == "ok"
    done = case_results(run)
    assert first.stem in done and len(done) < 3 and not any("bs3" in name for name in done), sorted(done)
    assert left == []
