"""Multi-node: pure launch logic, and two launchers on localhost acting as two nodes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsdp_bench.launch.commands import build_command, rendezvous_id, torchrun_rendezvous_args
from fsdp_bench.plan.case import Case, CaseError
from fsdp_bench.plan.nodes import Launch, LaunchError, parse_endpoint, validate_launch
from fsdp_bench.plan.options import parse_sweep

ROOT = Path(__file__).resolve().parents[2]


def test_rendezvous_id_is_per_run_and_case_and_the_same_on_every_node():
    a = rendezvous_id("run1", "ddp-gpt_tiny-ws2-bs2-ga1-opt_after")
    assert a == rendezvous_id("run1", "ddp-gpt_tiny-ws2-bs2-ga1-opt_after")
    assert a != rendezvous_id("run1", "fsdp2-gpt_tiny-ws2-bs2-ga1-opt_after")
    assert a != rendezvous_id("run2", "ddp-gpt_tiny-ws2-bs2-ga1-opt_after")


def test_multi_node_command_uses_c10d_rendezvous_on_the_shared_store():
    case = Case(strategy="fsdp2", nproc=4)
    launch = Launch(nnodes=2, node_rank=1, rdzv_endpoint="node0:29500", run_id="r")
    cmd = build_command(case, Path("c.json"), Path("out"), launch=launch, join_timeout_s=300)
    joined = " ".join(cmd)
    assert "--standalone" not in cmd
    assert "--nnodes 2 --node-rank 1 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint node0:29500" in joined
    assert f"--rdzv-id {rendezvous_id('r', case.id)}" in joined
    assert "--rdzv-conf is_host=0,join_timeout=300" in joined
    single = build_command(case, Path("c.json"), Path("out"))
    assert "--standalone" in single and single[single.index("--nproc-per-node") + 1] == "4"


def test_world_that_does_not_split_over_nodes_is_refused():
    with pytest.raises(LaunchError, match="--bench-nnodes"):
        torchrun_rendezvous_args(
            Launch(nnodes=2, rdzv_endpoint="h:1", run_id="r"), case_id="x", world_size=3, join_timeout_s=1
        )


def test_endpoint_parsing():
    assert parse_endpoint("host:123") == ("host", 123)
    assert parse_endpoint("host") == ("host", 29400)
    assert parse_endpoint("[::1]:5") == ("::1", 5)
    for bad in (":1", "h:x", "h:70000"):
        with pytest.raises(LaunchError, match="--bench-rdzv-endpoint"):
            parse_endpoint(bad)


def test_run_id_defaults_to_the_slurm_job_and_is_required_otherwise():
    launch = Launch(nnodes=2, node_rank=0, rdzv_endpoint="h:1")
    assert validate_launch(launch, env={"SLURM_JOB_ID": "42"}).run_id == "slurm-42"
    with pytest.raises(LaunchError, match="--bench-run-id"):
        validate_launch(launch, env={})
    with pytest.raises(LaunchError, match="--bench-run-id"):
        validate_launch(Launch(nnodes=2, rdzv_endpoint="h:1", run_id="../x"), env={})


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"nnodes": "2", "run-id": "r"}, "--bench-rdzv-endpoint"),
        ({"nnodes": "2", "node-rank": "2", "rdzv-endpoint": "h:1", "run-id": "r"}, "--bench-node-rank"),
        ({"node-rank": "1"}, "--bench-node-rank"),
        ({"nnodes": "0"}, "--bench-nnodes"),
    ],
)
def test_bad_multi_node_options_name_the_option(raw, message, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(CaseError, match=message):
        parse_sweep({"device": "cpu", **raw})


def test_node_zero_refuses_a_run_id_that_already_holds_results(tmp_path):
    (tmp_path / "taken" / "cases").mkdir(parents=True)
    raw = {"device": "cpu", "results-dir": str(tmp_path), "run-id": "taken"}
    with pytest.raises(CaseError, match="--bench-run-id: .* already exists and holds cases"):
        parse_sweep(raw)
    # another node only adds its node folder beside node 0's results
    parse_sweep({**raw, "nnodes": "2", "node-rank": "1", "rdzv-endpoint": "h:1"})


def test_world_size_is_ranks_per_node_times_nodes_and_not_in_the_id():
    sweep = parse_sweep(
        {
            "device": "cpu",
            "nproc": "2",
            "nnodes": "2",
            "rdzv-endpoint": "h:1",
            "run-id": "r",
            "strategies": "fsdp2",
            "batch-sizes": "2",
            "grad-accum": "1",
        }
    )
    (case,) = sweep.cases()
    assert case.nproc == 4 and case.id == "fsdp2-gpt_tiny-ws4-bs2-ga1-opt_after"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_launchers_on_localhost_run_each_case_across_both_nodes(tmp_path):
    port = _free_port()
    common = [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks",
        "-q",
        "-p",
        "no:randomly",
        "--bench-device",
        "cpu",
        "--bench-model",
        "gpt_tiny",
        "--bench-strategies",
        "fsdp2",  # ddp runs across the nodes in the repeats test below
        "--bench-batch-sizes",
        "2",
        "--bench-grad-accum",
        "1",
        "--bench-steps",
        "2",
        "--bench-warmup",
        "1",
        "--bench-seq-len",
        "32",
        "--bench-nproc",
        "1",
        "--bench-timeout",
        "240",
        "--bench-target-ci-pct",  # exactly the steps asked: adaptive measurement is not what this tests
        "0",
        "--bench-nnodes",
        "2",
        "--bench-rdzv-endpoint",
        f"localhost:{port}",
        "--bench-run-id",
        "two-nodes",
        "--bench-results-dir",
        str(tmp_path),
        "--benchmark-disable",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("SLURM_JOB_ID", None)
    nodes = [
        subprocess.Popen(
            common + ["--bench-node-rank", str(r)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in (1, 0)
    ]  # the follower first
    outs = []
    for proc in nodes:
        try:
            outs.append(proc.communicate(timeout=600)[0])
        except subprocess.TimeoutExpired:
            for p in nodes:
                p.kill()
            raise
    for proc, out in zip(nodes, outs):
        assert proc.returncode == 0, out[-3000:]
    run = tmp_path / "two-nodes"
    results = {p.stem: json.loads(p.read_text()) for p in (run / "cases").glob("*.json")}
    assert sorted(results) == ["fsdp2-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"]
    for case_id, result in results.items():
        assert result["status"] == "ok", result["reason"]
        assert sorted(r["rank"] for r in result["ranks"]) == [0, 1]
        assert {r["world_size"] for r in result["ranks"]} == {2}
        assert len({r["pid"] for r in result["ranks"]}) == 2
        assert result["launch"]["nnodes"] == 2 and result["launch"]["note"] == ""
        # each node kept its own log; only node 0 wrote the merged result
        assert (run / "cases" / case_id / "log.txt").is_file()
        assert (run / "nodes" / "node-1" / "cases" / case_id / "log.txt").is_file()
        follower = json.loads((run / "nodes" / "node-1" / "cases" / f"{case_id}.json").read_text())
        assert follower["status"] == "ok" and len(follower["ranks"]) == 1
        assert all(r["params_changed"] for r in result["ranks"])
    assert (run / "env.json").is_file() and (run / "nodes" / "node-1" / "env.json").is_file()


def test_repeats_across_two_nodes_each_meet_in_their_own_rendezvous(tmp_path):
    """A successful torchrun closes its rendezvous, so repeat 2 needs its own; and a follower
    that arrives late must not set node 0's live repeat folder aside."""
    port = _free_port()
    common = [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks/test_strategy_sweep.py",
        "-q",
        "-p",
        "no:randomly",
        "--bench-device",
        "cpu",
        "--bench-model",
        "gpt_tiny",
        "--bench-strategies",
        "ddp",
        "--bench-batch-sizes",
        "2",
        "--bench-grad-accum",
        "1",
        "--bench-steps",
        "2",
        "--bench-warmup",
        "1",
        "--bench-seq-len",
        "32",
        "--bench-nproc",
        "1",
        "--bench-timeout",
        "240",
        "--bench-target-ci-pct",  # exactly the steps asked: adaptive measurement is not what this tests
        "0",
        "--bench-repeats",
        "2",
        "--bench-nnodes",
        "2",
        "--bench-rdzv-endpoint",
        f"localhost:{port}",
        "--bench-run-id",
        "two-nodes",
        "--bench-results-dir",
        str(tmp_path),
        "--benchmark-disable",
        "--bench-no-report",
        "--bench-no-probes",  # the first test runs them across the nodes
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("SLURM_JOB_ID", None)
    leader = subprocess.Popen(
        common + ["--bench-node-rank", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run = tmp_path / "two-nodes"
    deadline = time.monotonic() + 60
    while not list(run.glob("cases/*/repeat-1")) and time.monotonic() < deadline:
        time.sleep(0.2)  # the follower arrives once node 0's repeat folder exists
    follower = subprocess.Popen(
        common + ["--bench-node-rank", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    outs = [p.communicate(timeout=600)[0] for p in (leader, follower)]
    for proc, out in zip((leader, follower), outs):
        assert proc.returncode == 0, out[-3000:]
    (result,) = [json.loads(p.read_text()) for p in (run / "cases").glob("*.json")]
    assert result["status"] == "ok" and [r["status"] for r in result["repeats"]] == ["ok", "ok"]
    assert result["metrics"]["repeats"] == 2
    assert not (run / "cases" / ".attempts").exists()  # nothing was set aside
