"""Issue 37: a run folder deleted while a case runs. Its ranks and the runner used to write on as if
nothing happened, re-creating the folder (cases/ and the case's result, without .lock, env.json
or sweep.json), which a later --bench-resume with other settings then accepted. Now nothing
re-creates it: the sweep stops with one line, and a folder without sweep.json is not resumed."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.sweep_helpers import SMALL, child_env, processes_of, pytest_cmd, write_sweep_project

ONE_RANK = [*SMALL[: SMALL.index("--bench-nproc")], "--bench-nproc", "1", *SMALL[SMALL.index("--bench-nproc") + 2 :]]


def _wait_for(path_glob, root: Path, sweep: subprocess.Popen, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and sweep.poll() is None:
        found = list(root.glob(path_glob))
        if found:
            return found[0]
        time.sleep(0.05)
    pytest.fail(f"nothing matched {path_glob} in {timeout_s:.0f} s (sweep exit {sweep.poll()})")


def test_a_run_folder_deleted_mid_case_is_one_line_and_never_re_created(tmp_path):
    write_sweep_project(tmp_path)
    results, log = tmp_path / "results", tmp_path / "sweep.log"
    # the rank hangs in its measured steps until the case's timeout stops it: the folder goes meanwhile
    options = ["--bench-results-dir", str(results), "--bench-timeout", "20", "--bench-kill-grace", "3"]
    with open(log, "wb") as out:
        sweep = subprocess.Popen(
            pytest_cmd("test_sweep.py", "-q", *ONE_RANK, *options),
            cwd=tmp_path,
            env=child_env(FSDP_BENCH_FAULTS="hang@measure:0"),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        rank_file = _wait_for("*/cases/*/rank-0.json", results, sweep, timeout_s=180)
        run = rank_file.parent.parent.parent
        time.sleep(1.0)  # the rank is past its first records
        shutil.rmtree(run)
        code = sweep.wait(timeout=180)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    text = log.read_text(errors="replace")
    assert code == 4, text
    assert "Traceback" not in text and "INTERNALERROR" not in text, text
    gone = [ln for ln in text.splitlines() if "was removed or replaced" in ln]
    assert len(gone) == 1 and str(run) in gone[0], text
    assert "--bench-resume" not in text, text  # no hint to resume a folder that is gone
    assert not run.exists(), sorted(run.rglob("*"))  # before: cases/<id>.json re-created, no .lock or sweep.json
    assert processes_of(run) == []


def test_a_run_folder_without_its_settings_is_not_resumed(tmp_path):
    """What the old re-creation left (cases/ with results, no sweep.json): a resume cannot tell the
    run's settings, so it is refused in one line rather than accepted with any."""
    write_sweep_project(tmp_path)
    run = tmp_path / "results" / "made-by-hand"
    (run / "cases").mkdir(parents=True)
    out = subprocess.run(
        pytest_cmd("test_sweep.py", "-q", *ONE_RANK, "--bench-batch-sizes", "7", "--bench-resume", str(run)),
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 4, text
    assert "Traceback" not in text
    lines = [ln for ln in text.splitlines() if "sweep.json" in ln]
    assert len(lines) == 1 and "cannot tell the run's settings" in lines[0], text
    assert sorted(p.name for p in run.rglob("*")) == [".lock", "cases"]  # locked to check; nothing launched
