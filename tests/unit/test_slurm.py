"""The Slurm path without Slurm: per-node commands and environment, and the script's dry runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_bench.launch.slurm import SlurmError, build_node_command, first_host, gpus_on_node
from fsdp_bench.plan.options import parse_sweep

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_bench.sbatch"
JOB = {
    "SLURM_JOB_ID": "777",
    "SLURM_NNODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "gpu[03-04]",
    "SLURM_GPUS_ON_NODE": "8",
    "SLURM_CPUS_PER_TASK": "32",
}


def _option(argv, name):
    return argv[argv.index(name) + 1]


def test_node_command_from_slurm_variables():
    argv, extra = build_node_command(JOB, ["--bench-strategies", "fsdp2"], python="py")
    assert argv[:4] == ["py", "-m", "pytest", "benchmarks"]
    assert _option(argv, "--bench-nnodes") == "2" and _option(argv, "--bench-node-rank") == "1"
    assert _option(argv, "--bench-rdzv-endpoint") == "gpu03:29500"
    assert _option(argv, "--bench-run-id") == "slurm-777" and _option(argv, "--bench-nproc") == "8"
    assert argv[-2:] == ["--bench-strategies", "fsdp2"]
    assert extra == {"OMP_NUM_THREADS": "4"}


def test_every_node_gets_the_same_run_and_endpoint_and_its_own_rank():
    cmds = [build_node_command({**JOB, "SLURM_NODEID": str(r)}, [], python="py")[0] for r in range(2)]
    assert [_option(c, "--bench-node-rank") for c in cmds] == ["0", "1"]
    for name in ("--bench-rdzv-endpoint", "--bench-run-id", "--bench-nnodes", "--bench-nproc"):
        assert _option(cmds[0], name) == _option(cmds[1], name)


def test_the_generated_options_parse_into_a_valid_multi_node_sweep(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    argv, _ = build_node_command({**JOB, "SLURM_GPUS_ON_NODE": "2"}, ["--bench-device", "cpu"], python="py")
    raw = {}
    for name, value in zip(argv[4::2], argv[5::2]):
        raw[name.removeprefix("--bench-")] = value
    sweep = parse_sweep(raw)
    assert sweep.launch().nnodes == 2 and all(c.nproc == 4 for c in sweep.cases())


@pytest.mark.parametrize(
    "env, args, message",
    [
        ({k: v for k, v in JOB.items() if k != "SLURM_NODEID"}, [], "SLURM_NODEID"),
        (JOB, ["--bench-node-rank=0"], "--bench-node-rank: set by the Slurm script"),
        ({**JOB, "SLURM_NODEID": "2"}, [], "not in 0..1"),
    ],
)
def test_bad_job_environment_is_one_clear_error(env, args, message):
    with pytest.raises(SlurmError, match=message):
        build_node_command(env, args)


def test_nodelist_and_gpu_parsing():
    assert first_host("gpu[03-05,09],login1") == "gpu03"
    assert first_host("node7") == "node7"
    assert first_host("a-b[1,2]") == "a-b1"
    assert gpus_on_node({"SLURM_GPUS_PER_NODE": "h100:4"}) == 4
    assert gpus_on_node({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert gpus_on_node({}) is None


def _script(env, *args):
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**base, "FSDP_BENCH_DRY_RUN": "1", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_script_outside_a_job_submits_itself_with_the_chosen_shape():
    out = _script({"NODES": "4", "GPUS_PER_NODE": "2", "TIME": "00:30:00", "PARTITION": "debug"}, "--bench-steps", "5")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("sbatch --nodes=4 --gpus-per-node=2 ")
    assert "--time=00:30:00 --partition=debug" in out.stdout and out.stdout.rstrip().endswith("--bench-steps 5")


def test_script_inside_a_job_runs_one_launcher_per_node_through_srun():
    env = {
        **JOB,
        "ENV_SETUP": ":",
        "SLURM_SUBMIT_DIR": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    out = _script(env, "--bench-strategies", "ddp")
    assert out.returncode == 0, out.stderr
    assert "rendezvous gpu03:29500" in out.stdout
    assert (
        "srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 python -m fsdp_bench.launch.slurm node -- --bench-strategies ddp"
        in out.stdout
    )
    node = subprocess.run(
        [sys.executable, "-m", "fsdp_bench.launch.slurm", "node", "--", "--bench-steps", "3"],
        cwd=ROOT,
        env={**os.environ, **JOB, "FSDP_BENCH_DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert node.returncode == 0, node.stderr
    assert "-m pytest benchmarks --bench-nnodes 2 --bench-node-rank 1 --bench-rdzv-endpoint gpu03:29500" in node.stdout
