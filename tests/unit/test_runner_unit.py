import sys
from pathlib import Path

from fsdp_bench.launch.commands import build_command
from fsdp_bench.launch.outcome import classify_outcome
from fsdp_bench.launch.processes import PROJECT_ROOT, build_env
from fsdp_bench.plan.case import Case


def test_command_is_standalone_torchrun_of_the_worker(tmp_path):
    case = Case(strategy="fsdp2", nproc=3)
    cmd = build_command(case, tmp_path / "case.json", tmp_path)
    assert cmd[:3] == [sys.executable, "-m", "fsdp_bench.worker.torchrun"]
    assert "--standalone" in cmd
    assert cmd[cmd.index("--nproc-per-node") + 1] == "3"
    assert cmd[cmd.index("--max-restarts") + 1] == "0"
    # no port is picked by the parent: the c10d rendezvous binds localhost:0 itself
    assert not any("port" in part for part in cmd)
    assert cmd[-6:] == ["-m", "fsdp_bench.worker", "--case", str(tmp_path / "case.json"), "--out", str(tmp_path)]


def test_env_puts_this_checkout_first():
    env = build_env({"PYTHONPATH": "/elsewhere", "PATH": "/bin"})
    assert env["PYTHONPATH"].split(":")[0] == str(PROJECT_ROOT)
    assert env["PYTHONPATH"].endswith("/elsewhere")
    assert (Path(env["PYTHONPATH"].split(":")[0]) / "fsdp_bench" / "worker" / "entry.py").exists()
    assert build_env({"OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "4"


def _rank(rank, status="ok", stage="end", err_time=None, err_type="RuntimeError", msg="boom"):
    error = None if err_time is None else {"type": err_type, "message": msg, "time_unix": err_time}
    return {"rank": rank, "status": status, "stage": stage, "error": error}


def classify(**kw):
    defaults = dict(returncode=0, timed_out=False, ranks=[_rank(0), _rank(1)], world_size=2, log_tail="")
    return classify_outcome(**{**defaults, **kw})


def test_ok():
    assert classify().status == "ok"


def test_first_raising_rank_is_blamed_not_torchruns_root_cause():
    ranks = [
        _rank(0, "failed", "measure", err_time=20.0, msg="killed by torchrun"),
        _rank(1, "failed", "shard", err_time=10.0, msg="real cause"),
    ]
    out = classify(returncode=1, ranks=ranks)
    assert out.status == "failed"
    assert out.reason.startswith("rank 1 raised RuntimeError at stage shard: real cause")


def test_oom_wins_over_failures_it_caused():
    ranks = [_rank(0, "failed", err_time=1.0), _rank(1, "oom", "first_step", err_time=2.0, err_type="OutOfMemoryError")]
    out = classify(returncode=1, ranks=ranks)
    assert out.status == "oom" and "rank 1 ran out of memory at stage first_step" in out.reason


def test_timeout_names_the_stages_reached():
    out = classify(returncode=-15, timed_out=True, ranks=[_rank(0, "running", "measure")])
    assert out.status == "timeout" and "measure" in out.reason


def test_killed_rank_is_reported_with_its_signal():
    tail = "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 4242)\n"
    out = classify(returncode=1, ranks=[_rank(0, "failed", err_time=5.0, err_type="SystemExit")][:0], log_tail=tail)
    assert out.status == "failed" and "SIGKILL" in out.reason


def test_missing_rank_files_fail():
    out = classify(returncode=1, ranks=[_rank(0)], log_tail="")
    assert out.status == "failed" and "rank 1 died without a result" in out.reason


def test_skipped_when_ranks_say_so():
    ranks = [_rank(r, "skipped", err_time=1.0, msg="fsdp2_offload on cpu: no accelerator") for r in (0, 1)]
    out = classify(ranks=ranks)
    assert out.status == "skipped" and "no accelerator" in out.reason


def test_torchrun_killed_by_signal():
    assert "SIGKILL" in classify(returncode=-9, ranks=[]).reason


def test_a_node_judges_the_ranks_it_ran_whatever_their_numbers():
    # On a second node the c10d rendezvous may hand this node global rank 1, not 0.
    ranks = [_rank(1)]
    assert classify(ranks=ranks, world_size=1, expected_ranks=[1]).status == "ok"
    assert classify(ranks=ranks, world_size=1).status == "failed"  # rank 0 would be missing


def test_a_sigkilled_torchrun_is_the_cause_not_the_ranks_it_took_with_it():
    """Its ranks get SIGTERM through PR_SET_PDEATHSIG and record 'terminated': a consequence (#37)."""
    ranks = [_rank(0, "terminated", "measure", err_time=1.0, err_type="Terminated", msg="SIGTERM"), _rank(1)]
    out = classify(returncode=-9, ranks=ranks)
    assert out.status == "failed"
    assert out.reason == "torchrun itself was killed by SIGKILL; rank 0 was then terminated at stage measure"
    assert classify(returncode=1, ranks=ranks).reason.startswith("rank 0 terminated at stage measure")
