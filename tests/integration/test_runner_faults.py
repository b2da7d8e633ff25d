"""Pure failure classification, fault-spec parsing, and the process cleanup on a real process
tree (no torch: plain Python processes that behave like torchrun and a stuck rank)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from fsdp_bench.launch.outcome import classify_outcome, rank_signals
from fsdp_bench.launch.processes import case_marker, find_case_processes, stop_case
from fsdp_bench.plan.faults import SLOW_FRACTION, check_spec, faults_for, parse_faults, slow_fraction_for

TORCHRUN_SUMMARY = """
Failures:
[1]:
  time      : 2026-11-21_05:22:05
  host      : vm
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 5861)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 5861
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_05:22:05
  host      : vm
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 5860)  (SIGTERM)
"""


def rank(r, status, stage="measure", *, etype="RuntimeError", message="", t=0.0):
    error = None if status in ("ok", "running") else {"type": etype, "message": message, "time_unix": t}
    return {"rank": r, "status": status, "stage": stage, "error": error}


def classify(ranks, *, returncode=1, timed_out=False, log="", world_size=2):
    return classify_outcome(
        returncode=returncode, timed_out=timed_out, ranks=ranks, world_size=world_size, log_tail=log, timeout_s=30
    )


def test_first_raising_rank_wins_over_peers_that_saw_it_die():
    out = classify(
        [
            rank(0, "failed", message="Connection closed by peer [127.0.0.1]:1", t=2.0),
            rank(1, "failed", message="boom", t=1.0),
        ]
    )
    assert (out.status, out.rank) == ("failed", 1) and "rank 1 raised RuntimeError at stage measure: boom" in out.reason


def test_oom_beats_the_errors_it_caused():
    out = classify(
        [
            rank(0, "failed", message="boom", t=1.0),
            rank(1, "oom", "shard", etype="OutOfMemoryError", message="CUDA out of memory", t=2.0),
        ]
    )
    assert (out.status, out.rank, out.stage) == ("oom", 1, "shard")


def test_killed_rank_is_named_with_its_signal_not_torchruns_root_cause():
    out = classify(
        [rank(0, "failed", message="Connection closed by peer", t=1.0), rank(1, "running", "measure")],
        log=TORCHRUN_SUMMARY,
    )
    assert out.status == "failed" and out.reason == "rank 1 was killed by SIGKILL at stage measure"
    assert rank_signals(TORCHRUN_SUMMARY) == {1: "SIGKILL", 0: "SIGTERM"}
    missing = classify([rank(0, "terminated", etype="Terminated")], log=TORCHRUN_SUMMARY)
    assert missing.reason == "rank 1 was killed by SIGKILL before it started"


def test_collective_timeout_means_a_hang():
    out = classify(
        [
            rank(0, "failed", message="[gloo] Timed out waiting 8000ms for send operation", t=1.0),
            rank(1, "terminated", etype="Terminated", t=2.0),
        ]
    )
    assert (out.status, out.rank) == ("timeout", 0) and "another rank hung" in out.reason


def test_case_timeout_and_success():
    out = classify([rank(0, "running", "measure"), rank(1, "running", "warmup")], timed_out=True, returncode=-9)
    assert out.status == "timeout" and "timeout of 30s" in out.reason and "measure, warmup" in out.reason
    assert classify([rank(0, "ok"), rank(1, "ok")], returncode=0).status == "ok"
    assert classify([rank(0, "ok"), rank(1, "ok")], returncode=1).status == "failed"
    skipped = classify(
        [rank(0, "skipped", message="no accelerate"), rank(1, "skipped", message="no accelerate")], returncode=0
    )
    assert (skipped.status, skipped.reason) == ("skipped", "no accelerate")


def test_fault_spec_parsing():
    spec = "raise@model:1/-bs1-, hang@measure:0"
    assert faults_for("ddp-gpt_tiny-ws2-bs1-ga1", 1, spec) == {"model": "raise"}
    assert faults_for("ddp-gpt_tiny-ws2-bs12-ga1", 1, spec) == {}
    assert faults_for("anything", 0, spec) == {"measure": "hang"}
    assert len(check_spec("stuck@first_step:0,kill@end:1,oom@shard:0")) == 3
    for bad, words in [
        ("raise@model", "cannot parse"),
        ("nuke@model:0", "unknown fault kind"),
        ("raise@lunch:0", "unknown stage"),
        ("raise@model:-1", "rank must be >= 0"),
        ("raise@model:0:0.5", "only the 'slow' fault takes a size"),
        ("slow@measure:0:0", "above 0"),
        ("slow@measure:0:nan", "above 0"),
        ("slow@measure:0:inf", "at most 100"),
        ("slow@measure:0:half", "cannot parse"),
        ("slow@measure:0:1:2", "cannot parse"),
    ]:
        with pytest.raises(ValueError, match=words):
            check_spec(bad)
    assert parse_faults("") == []
    # the slow fault's size: the default share, or the one given, per rank and case
    spec = "slow@measure:0, slow@measure:1:1.5/-bs2-"
    assert slow_fraction_for("ddp-gpt_tiny-ws2-bs2-ga1", 0, spec) == SLOW_FRACTION
    assert slow_fraction_for("ddp-gpt_tiny-ws2-bs2-ga1", 1, spec) == 1.5
    assert slow_fraction_for("ddp-gpt_tiny-ws2-bs4-ga1", 1, spec) is None
    assert faults_for("ddp-gpt_tiny-ws2-bs2-ga1", 1, spec) == {"measure": "slow"}


STUCK_TREE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    # like torchrun (worker entry point on the command line): starts a 'rank' in its own session, which ignores SIGTERM (stuck in native code)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open(r'{ready}', 'w').close(); time.sleep(600)",
        "-m", "fsdp_bench.worker", "--case", r"{marker}"], start_new_session=True)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # and this 'torchrun' ignores SIGTERM too
    time.sleep(600)
""")


def test_stop_case_leaves_no_process_even_when_sigterm_is_ignored(tmp_path):
    work = tmp_path / "cases" / "some-case"
    work.mkdir(parents=True)
    ready = tmp_path / "ready"
    code = STUCK_TREE.format(marker=case_marker(work), ready=ready)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "-m", "fsdp_bench.worker", "--case", case_marker(work)], start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, "the fake rank never started"
        time.sleep(0.05)
    assert len(find_case_processes(case_marker(work))) == 2
    started = time.monotonic()
    left = stop_case(proc, work, grace_s=1.0)
    assert left == [] and find_case_processes(case_marker(work)) == []
    assert time.monotonic() - started < 20
    assert proc.returncode == -9


# A rank whose step raises, and whose failure handling is interrupted by the SIGTERM torchrun
# sends every rank once one failed (staged here: it arrives while the failure is classified).
_SIGTERM_DURING_FAILURE = textwrap.dedent("""
    import os, signal, sys
    os.environ["FSDP_BENCH_FAULTS"] = "raise@first_step:0"
    import fsdp_bench.worker.entry as entry
    from fsdp_bench.plan.case import Case
    from fsdp_bench.results.io import write_json_atomic
    from fsdp_bench.results.records import CaseFields

    real = entry.classify_exception
    def classify_then_sigterm(exc):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered at the next bytecode, as in the race
        return real(exc)
    entry.classify_exception = classify_then_sigterm
    out = sys.argv[1]
    write_json_atomic(os.path.join(out, "case.json"),
                      Case(strategy="ddp", nproc=1, steps=1, warmup=0, seq_len=16).to_dict(), shape=CaseFields)
    entry.main(["--case", os.path.join(out, "case.json"), "--out", out])
""")


def test_sigterm_during_a_failure_does_not_cut_the_record_short(tmp_path):
    import json

    proc = subprocess.run(
        [sys.executable, "-c", _SIGTERM_DURING_FAILURE, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0  # the injected error still ends the rank
    record = json.loads((tmp_path / "rank-0.json").read_text())
    assert record["status"] == "failed" and record["error"]["type"] == "RuntimeError", record["error"]
    assert "injected" in record["error"]["message"]
