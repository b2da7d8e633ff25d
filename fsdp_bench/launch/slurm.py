"""Slurm glue for scripts/slurm_bench.sbatch: each node's sweep command from Slurm's variables.

    srun --ntasks-per-node=1 python -m fsdp_bench.launch.slurm node -- [pytest args...]
    python -m fsdp_bench.launch.slurm head-node          # first host of $SLURM_JOB_NODELIST

`srun` starts one copy per node; each copy turns SLURM_NNODES / SLURM_NODEID / SLURM_JOB_ID and
the GPUs on its node into `pytest benchmarks --bench-nnodes ... --bench-node-rank ...` and
replaces itself with it (exec). pytest then launches one torchrun per case, as on one node.
Pure functions build and check everything, so tests need no Slurm.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

# Options the script sets from Slurm; a user passing them too would split the nodes.
MANAGED_OPTIONS = ("--bench-nnodes", "--bench-node-rank", "--bench-rdzv-endpoint", "--bench-run-id")
DEFAULT_PORT = 29500


class SlurmError(ValueError):
    """The job's environment cannot drive a multi-node sweep; one line for the user."""


def first_host(nodelist: str) -> str:
    """The first host of a Slurm nodelist ("gpu[03-05,09],login1" -> "gpu03"), for systems
    without `scontrol show hostnames`."""
    match = re.match(r"^([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match or not match.group(1):
        raise SlurmError(f"SLURM_JOB_NODELIST: cannot read a host from {nodelist!r}")
    prefix, ranges = match.group(1), match.group(2)
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def gpus_on_node(env: Mapping[str, str]) -> int | None:
    """GPUs Slurm gave this node: SLURM_GPUS_ON_NODE, else CUDA_VISIBLE_DEVICES, else
    SLURM_GPUS_PER_NODE (which may read "h100:8")."""
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        return int(env["SLURM_GPUS_ON_NODE"])
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return len([d for d in visible.split(",") if d.strip()])
    per_node = env.get("SLURM_GPUS_PER_NODE", "").rsplit(":", 1)[-1]
    return int(per_node) if per_node.isdigit() else None


def build_node_command(
    env: Mapping[str, str], user_args: Sequence[str], *, python: str = sys.executable
) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) of this node's sweep inside a Slurm job step."""
    missing = [k for k in ("SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NODEID") if not env.get(k)]
    if missing:
        raise SlurmError(f"not inside a Slurm job step: {', '.join(missing)} unset (run through srun)")
    for arg in user_args:
        if arg.split("=", 1)[0] in MANAGED_OPTIONS:
            raise SlurmError(f"{arg.split('=', 1)[0]}: set by the Slurm script; do not pass it")
    nnodes, node_rank = int(env["SLURM_NNODES"]), int(env["SLURM_NODEID"])
    if not 0 <= node_rank < nnodes:
        raise SlurmError(f"SLURM_NODEID {node_rank} is not in 0..{nnodes - 1}")
    head = env.get("FSDP_BENCH_RDZV_HOST") or first_host(env.get("SLURM_JOB_NODELIST", ""))
    port = int(env.get("FSDP_BENCH_RDZV_PORT", DEFAULT_PORT))
    argv = [
        python,
        "-m",
        "pytest",
        "benchmarks",
        "--bench-nnodes",
        str(nnodes),
        "--bench-node-rank",
        str(node_rank),
        "--bench-rdzv-endpoint",
        f"{head}:{port}",
        "--bench-run-id",
        env.get("FSDP_BENCH_RUN_ID") or f"slurm-{env['SLURM_JOB_ID']}",
    ]
    gpus = gpus_on_node(env)
    if gpus and not any(a.split("=", 1)[0] == "--bench-nproc" for a in user_args):
        argv += ["--bench-nproc", str(gpus)]
    argv += list(user_args)
    extra = {}
    cpus = env.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit() and gpus:
        # torchrun's ranks share this task's CPUs; without this each would start one thread per core.
        extra["OMP_NUM_THREADS"] = str(max(1, int(cpus) // gpus))
    return argv, extra


def head_node(env: Mapping[str, str]) -> str:
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if shutil.which("scontrol"):
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0]
    return first_host(nodelist)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["head-node"]:
            print(head_node(os.environ))
            return 0
        if args[:1] == ["node"]:
            rest = args[1:]
            rest = rest[1:] if rest[:1] == ["--"] else rest
            command, extra = build_node_command(os.environ, rest)
            env = {**os.environ, **extra}
            if os.environ.get("FSDP_BENCH_DRY_RUN") == "1":
                print(" ".join(command))
                return 0
            os.execvpe(command[0], command, env)
    except SlurmError as exc:
        print(f"fsdp_bench.launch.slurm: {exc}", file=sys.stderr)
        return 2
    print("usage: python -m fsdp_bench.launch.slurm {node -- [pytest args] | head-node}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
