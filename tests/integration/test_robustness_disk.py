"""Issue 23, item 10, on real filesystems: a run folder that turns read-only mid-sweep and a disk
that is 100% full. We run as root, which ignores chmod, so tests/mounts.py makes them with mounts
(a read-only bind mount, a filled tmpfs); where mounting is not allowed those tests skip."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsdp_bench.results.load import load_case_result
from tests.mounts import full_tmpfs, read_only_bind, require_mounts
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


def test_a_run_folder_made_read_only_mid_tune_is_one_stop_line(tmp_path):
    """The tuner's loop stops the same way (it used to answer with a usage error)."""
    require_mounts(tmp_path / "scratch")
    results, log = tmp_path / "results", tmp_path / "sweep.log"
    options = ("--bench-tune", "--bench-batch-sizes", "1,2,3", "--bench-strategies", "ddp,fsdp2")
    sweep = _start_sweep(tmp_path / "project", results, *options, log=log)
    try:
        first = _first_result(results, sweep, timeout_s=240)
        with read_only_bind(first.parent.parent):
            code = sweep.wait(timeout=300)
            text = log.read_text(errors="replace")
    finally:
        if sweep.poll() is None:
            sweep.send_signal(signal.SIGKILL)
            sweep.wait()
    assert code == 4, text
    assert "Traceback" not in text and "INTERNALERROR" not in text and "UsageError" not in text, text
    stops = [ln for ln in text.splitlines() if all(w in ln for w in STOP_WORDS)]
    assert len(stops) == 1, text
    assert "warnings summary" not in text, text


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


def test_a_full_disk_when_locking_is_one_line_and_leaves_no_lock(tmp_path):
    from fsdp_bench.launch.session import SessionError, SweepSession
    from fsdp_bench.plan.options import parse_sweep
    from fsdp_bench.results.layout import create_run_dir

    results = tmp_path / "results"
    with full_tmpfs(results):
        run_dir = create_run_dir(results)  # a folder is an inode, not a block: it still fits
        session = SweepSession(parse_sweep({"device": "cpu", "results-dir": str(results)}))
        with pytest.raises(SessionError, match=r"writing .*\.lock failed \(No space left on device\)"):
            session.lock_run_dir(run_dir)
        (results / "filler").unlink()  # room again: the failed attempt left the folder unlocked
        other = SweepSession(parse_sweep({"device": "cpu", "results-dir": str(results)}))
        other.lock_run_dir(run_dir)
        other.close()


def test_a_sweep_on_a_full_disk_is_one_line_and_launches_nothing(tmp_path):
    results, log = tmp_path / "results", tmp_path / "sweep.log"
    with full_tmpfs(results):
        sweep = _start_sweep(tmp_path / "project", results, "--bench-batch-sizes", "1,2", log=log)
        code = sweep.wait(timeout=300)
        text = log.read_text(errors="replace")
        made = sorted(p.relative_to(results) for p in results.rglob("*"))
    assert code == 4, text
    assert "Traceback" not in text and "INTERNALERROR" not in text, text
    lines = [ln for ln in text.splitlines() if "No space left on device" in ln]
    assert len(lines) == 1 and "fsdp-bench" in lines[0], text
    assert not [p for p in made if "cases" in p.parts and len(p.parts) > 2], made  # no case launched
    # #37: a folder that was never set up is no run: nothing names it or offers to resume it, and
    # the empty husk is gone again (before: a separator, "interrupted; ... --bench-resume RUN",
    # "results: RUN" after the one line)
    assert "--bench-resume" not in text and "results:" not in text and "interrupted" not in text, text
    assert made == [Path("filler")], made


def test_a_file_size_limit_when_locking_is_one_line(tmp_path):
    """Without mounts, RLIMIT_FSIZE (`ulimit -f 0`) is the unprivileged way to make a real write
    fail: EFBIG ("File too large") instead of ENOSPC, through the same lock write."""
    code = (
        "import sys; from fsdp_bench.launch.session import SessionError, SweepSession\n"
        "from fsdp_bench.plan.options import parse_sweep\n"
        "from fsdp_bench.results.layout import create_run_dir\n"
        f"run = create_run_dir({str(tmp_path)!r})\n"
        f"s = SweepSession(parse_sweep({{'device': 'cpu', 'results-dir': {str(tmp_path)!r}}}))\n"
        "try:\n    s.lock_run_dir(run)\nexcept SessionError as exc:\n    sys.exit(str(exc))\n"
    )

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the writer
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(),
        preexec_fn=limit_file_size,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().endswith(".lock failed (File too large)"), proc.stderr
    assert "Traceback" not in proc.stderr
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert os.path.getsize(run / ".lock") == 0
