"""Issue 14, "nothing lost, nobody hurt": run-folder locks, cleanup that signals only the
sweep's own processes, and unique case ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fsdp_bench.launch.session import RunBusy, SessionError, SweepSession
from fsdp_bench.plan.options import parse_sweep
from fsdp_bench.results.layout import RunLayout
from tests.sweep_helpers import pytest_cmd


def _session(tmp_path, **raw):
    return SweepSession(parse_sweep({"device": "cpu", "results-dir": str(tmp_path), **raw}))


def test_named_run_is_locked_so_a_concurrent_resume_is_refused(tmp_path):
    named = _session(tmp_path, **{"run-id": "mine"})
    run_dir = named.ensure_run_dir()
    try:
        with pytest.raises(RunBusy, match=f"in use by another running sweep \\(pid {os.getpid()}\\)"):
            _session(tmp_path).lock_run_dir(run_dir)
    finally:
        named.close()
    other = _session(tmp_path)
    other.lock_run_dir(run_dir)  # free again once the named sweep ends
    other.close()


def test_resume_of_a_named_run_in_progress_is_a_usage_error(tmp_path):
    named = _session(tmp_path, **{"run-id": "busy"})
    run_dir = named.ensure_run_dir()
    try:
        out = subprocess.run(
            pytest_cmd("-q", "--co", "--bench-device", "cpu", "--bench-resume", str(run_dir), "benchmarks"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        named.close()
    assert out.returncode == 4, out.stdout + out.stderr
    assert "--bench-resume:" in out.stderr and "in use by another running sweep" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_symlinked_lock_file_is_refused_and_left_alone(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "cases").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    RunLayout(run_dir).lock_file.symlink_to(victim)
    with pytest.raises(SessionError, match="symlink"):
        _session(tmp_path).lock_run_dir(run_dir)
    assert victim.read_text() == "keep me"


def _spawn(*argv, **kw):
    return subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw
    )


def test_case_cleanup_signals_only_the_sweeps_processes(tmp_path):
    from fsdp_bench.launch.processes import find_case_processes, stop_case
    from fsdp_bench.results.layout import CaseDir

    work = CaseDir(tmp_path / "case-x")
    work.path.mkdir()
    work.case_file.write_text("{}")
    marker = str(work.case_file)
    sleeper = "import time; time.sleep(300)"
    bystanders = [_spawn("tail", "-f", marker), _spawn(sys.executable, "-c", sleeper, marker)]
    # a stand-in torchrun (worker entry point and case file on its command line) in its own
    # session, with a child that names the case file only (ours by session and parentage)
    torchrun = _spawn(
        sys.executable,
        "-c",
        f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {sleeper!r}, {marker!r}]); {sleeper}",
        "-m",
        "fsdp_bench.worker",
        "--case",
        marker,
        start_new_session=True,
    )
    try:
        import time

        deadline = time.monotonic() + 20
        while len(find_case_processes(marker, torchrun.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(find_case_processes(marker, torchrun.pid)) == 2
        assert stop_case(torchrun, work.path, grace_s=0.5) == []
        assert find_case_processes(marker, torchrun.pid) == []
        assert [p.poll() for p in bystanders] == [None, None]  # the user's tail and sleeper live on
    finally:
        for p in bystanders:
            p.kill()
            p.wait()


def test_a_rank_dies_with_its_parent(tmp_path):
    """The worker's parent-death signal: SIGKILL the 'torchrun', its 'rank' gets SIGTERM."""
    import signal
    import time

    pid_file = tmp_path / "child.pid"
    child = (
        "import os, time; from fsdp_bench.worker.lifetime import die_with_parent; "
        f"assert die_with_parent(); open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    )
    parent = _spawn(
        sys.executable,
        "-c",
        f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(300)",
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    rank_pid = int(pid_file.read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    while time.monotonic() < deadline:
        try:
            os.kill(rank_pid, 0)
        except ProcessLookupError:
            break
        stat = open(f"/proc/{rank_pid}/stat").read()
        if stat.rpartition(")")[2].split()[0] == "Z":
            break
        time.sleep(0.05)
    else:
        os.kill(rank_pid, signal.SIGKILL)
        pytest.fail("the rank outlived its SIGKILLed parent")


def _resume_collect(run_dir):
    return subprocess.run(
        pytest_cmd("-q", "--co", "--bench-device", "cpu", "--bench-resume", str(run_dir), "benchmarks"),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_resume_is_refused_while_an_earlier_attempts_rank_lives(tmp_path):
    from fsdp_bench.results.layout import create_run_dir

    run = RunLayout(create_run_dir(tmp_path))
    work = run.case_dir("ddp-gpt_tiny-ws2-bs1-ga1-opt_after-sl32")
    work.path.mkdir()
    work.case_file.write_text("{}")
    rank = _spawn(
        sys.executable, "-c", "import time; time.sleep(300)", "-m", "fsdp_bench.worker", "--case", str(work.case_file)
    )
    work.pid_file(1).write_text(str(rank.pid))
    work.pid_file(0).write_text(str(os.getpid()))  # a recycled pid: not a worker, ignored
    try:
        import time

        time.sleep(0.3)  # let the stand-in rank's command line settle
        out = _resume_collect(run.root)
        assert out.returncode == 4, out.stdout + out.stderr
        assert f"still has ranks running from an earlier attempt (pid {rank.pid})" in out.stderr
        assert "Traceback" not in out.stdout + out.stderr
    finally:
        rank.kill()
        rank.wait()
    _session(tmp_path).check_no_live_ranks(run.root)  # gone: resuming is allowed again


def _hf_folder(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text(
        '{"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 64}'
    )
    return f"hf:{path}"


def test_two_models_with_one_case_id_are_refused_at_collection(tmp_path):
    from fsdp_bench.plan.case import CaseError

    a, b = _hf_folder(tmp_path / "a" / "b_c"), _hf_folder(tmp_path / "a" / "b" / "c")
    with pytest.raises(CaseError, match="two different cases share the id"):
        parse_sweep({"device": "cpu", "model": f"{a},{b}"}).cases()
    out = subprocess.run(
        pytest_cmd("-q", "--co", "--bench-device", "cpu", "--bench-model", f"{a},{b}", "benchmarks"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 4, out.stdout + out.stderr
    line = next(x for x in out.stderr.splitlines() if "share the id" in x)
    assert repr(a) in line and repr(b) in line
    assert "Traceback" not in out.stdout + out.stderr
    assert len(parse_sweep({"device": "cpu", "model": a}).cases()) > 0  # one of them alone is fine


def test_resume_with_other_settings_is_refused_listing_the_differences(tmp_path):
    first = _session(tmp_path, steps="3", **{"batch-sizes": "1"})
    run_dir = first.ensure_run_dir()
    first.close()
    stored = json.loads(RunLayout(run_dir).sweep_file.read_text())
    assert stored == {"schema_version": 1, "settings": {"steps": 3, "batch_sizes": [1], "device": "cpu"}}
    same = _session(tmp_path, steps="3", **{"batch-sizes": "1", "resume": str(run_dir), "timeout": "99"})
    same.check_same_settings(run_dir)  # how long a case may take is not what it measures
    out = subprocess.run(
        pytest_cmd(
            "-q", "--co", "--bench-device", "cpu", "--bench-steps", "5", "--bench-resume", str(run_dir), "benchmarks"
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 4, out.stdout + out.stderr
    line = next(x for x in out.stderr.splitlines() if "other settings" in x)
    assert "batch_sizes: was [1], now 'default'" in line and "steps: was 3, now 5" in line
    assert "Traceback" not in out.stdout + out.stderr


def test_a_full_disk_stops_the_sweep_before_launching_with_the_resume_hint(tmp_path):
    results = tmp_path / "results"
    env = {**os.environ, "FSDP_BENCH_MIN_FREE_MIB": str(2**40)}  # more than any disk has
    out = subprocess.run(
        pytest_cmd(
            "-q",
            "benchmarks/test_strategy_sweep.py",
            "--bench-device",
            "cpu",
            "--bench-strategies",
            "ddp",
            "--bench-batch-sizes",
            "1",
            "--bench-grad-accum",
            "1",
            "--bench-no-report",
            "--bench-results-dir",
            str(results),
        ),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 3, text
    assert "MiB free under" in text and "--bench-resume" in text and "Traceback" not in text
    (run,) = list(results.iterdir())
    # pytest prints no summary after this exit: the stop line itself holds the command as run
    assert f"--bench-no-report --bench-results-dir {results} --bench-resume {run}" in text, text
    assert list(RunLayout(run).cases_dir.iterdir()) == []  # no case was launched


# Wraps the real report writer so that a real SIGINT lands while it draws the charts.
_INTERRUPT_REPORT = """
import os, signal, threading, time
import fsdp_bench.report.writer as writer
_real = writer.write_report
def _write_report_interrupted(run_dir, **options):
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    written = _real(run_dir, **options)
    time.sleep(30)  # if drawing beat the timer, the signal lands here instead
    return written
writer.write_report = _write_report_interrupted
pytest_plugins = ["fsdp_bench.pytest_plugin"]
"""


def test_ctrl_c_during_the_end_of_sweep_report_is_one_line_and_keeps_the_results(tmp_path):
    from tests.sweep_helpers import SMALL, SWEEP_TEST, child_env, only_run

    (tmp_path / "conftest.py").write_text(_INTERRUPT_REPORT)
    (tmp_path / "test_sweep.py").write_text(SWEEP_TEST)
    options = [o for o in SMALL if o != "--bench-no-report"]
    options[options.index("--bench-nproc") + 1] = "1"
    out = subprocess.run(
        pytest_cmd("-q", *options, "--bench-batch-sizes", "1", "--bench-results-dir", str(tmp_path / "results")),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
    )
    text = out.stdout + out.stderr
    assert out.returncode == 2, text  # pytest's "interrupted", not 130 with a traceback
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    run = only_run(tmp_path / "results")
    assert f"report interrupted; the results are safe. To write it: python visualize.py {run}" in text
    assert json.loads(next((run / "cases").glob("*.json")).read_text())["status"] == "ok"
    assert not list(run.glob("*.tmp*"))  # nothing half-written left behind
    again = subprocess.run(
        [sys.executable, "visualize.py", str(run)], capture_output=True, text=True, timeout=300, env=child_env()
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert (run / "report.md").is_file()


def test_a_second_sweep_with_a_named_run_in_use_is_a_usage_error(tmp_path):
    named = _session(tmp_path, **{"run-id": "busy"})
    named.ensure_run_dir()
    try:
        out = subprocess.run(
            pytest_cmd(
                "-q",
                "benchmarks/test_strategy_sweep.py",
                "--bench-device",
                "cpu",
                "--bench-strategies",
                "ddp",
                "--bench-batch-sizes",
                "1",
                "--bench-no-report",
                "--bench-results-dir",
                str(tmp_path),
                "--bench-run-id",
                "busy",
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        named.close()
    assert out.returncode == 4, out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [
        f"ERROR: --bench-run-id: {tmp_path / 'busy'} already exists and holds .lock, cases, env.json; "
        "choose a new run id"
    ]
