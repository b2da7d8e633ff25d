"""Every command line the parent starts a worker-side process with: a case (torchrun or a
simulated rank), the torch-environment reader and the multi-node rendezvous store. The worker's
side of the case command is parsed once, by `fsdp_bench.worker.args`."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from fsdp_bench.plan.case import Case
from fsdp_bench.plan.nodes import Launch, LaunchError
from fsdp_bench.plan.sweep import CASE_TIMEOUT_S


def ranks_per_node(world_size: int, nnodes: int) -> int:
    if world_size % nnodes:
        raise LaunchError(f"--bench-nnodes: a world of {world_size} ranks does not split over {nnodes} nodes")
    return world_size // nnodes


def rendezvous_id(run_id: str, case_id: str) -> str:
    """The c10d rendezvous id of one case of one run: identical on every node, different for
    every case, so consecutive cases can never mix. Hashed: torch uses it in store keys."""
    digest = hashlib.sha1(f"{run_id}/{case_id}".encode()).hexdigest()[:16]
    return f"fsdpb-{digest}"


def torchrun_rendezvous_args(launch: Launch, *, case_id: str, world_size: int, join_timeout_s: float) -> list[str]:
    """torchrun's node and rendezvous flags for one case on this node."""
    if not launch.multi_node:
        # --standalone binds localhost:0 itself, so concurrent single-node sweeps never race.
        return ["--standalone", "--nnodes", "1", "--nproc-per-node", str(world_size)]
    host, port = launch.rdzv_host_port()
    return [
        "--nnodes",
        str(launch.nnodes),
        "--node-rank",
        str(launch.node_rank),
        "--nproc-per-node",
        str(ranks_per_node(world_size, launch.nnodes)),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{host}:{port}",
        "--rdzv-id",
        rendezvous_id(launch.run_id or "", case_id),
        # is_host=0: the store is the sweep-long one on node 0 (fsdp_bench.rendezvous), never
        # one of these torchruns. join_timeout: a node may wait for the others' previous case.
        "--rdzv-conf",
        f"is_host=0,join_timeout={int(join_timeout_s)}",
    ]


def case_args(case_file: Path, out_dir: Path) -> list[str]:
    return ["--case", str(case_file), "--out", str(out_dir)]


def build_command(
    case: Case,
    case_file: Path,
    out_dir: Path,
    *,
    python: str = sys.executable,
    launch: Launch = Launch(),
    join_timeout_s: float = CASE_TIMEOUT_S,
    repeat: int | None = None,
) -> list[str]:
    """The command line for one case on this node.

    One node: `--standalone` lets the c10d rendezvous bind localhost:0 itself, so concurrent
    sweeps never race for a port. Several nodes: see `fsdp_bench.plan.nodes`. A simulated case
    is one process, rank 0 of its world, without torchrun. `--max-restarts 0` because a
    benchmark must not silently retry. Each repeat of a case meets in a rendezvous of its own:
    a successful torchrun closes its rendezvous for good.
    """
    if case.simulate:
        return [python, "-m", "fsdp_bench.worker.simulate", *case_args(case_file, out_dir)]
    return [
        python,
        "-m",
        "fsdp_bench.worker.torchrun",
        *torchrun_rendezvous_args(
            launch,
            case_id=case.id if repeat is None else f"{case.id}/repeat-{repeat}",
            world_size=case.nproc,
            join_timeout_s=join_timeout_s,
        ),
        "--max-restarts",
        "0",
        "--monitor-interval",
        "0.1",
        "-m",
        "fsdp_bench.worker",
        *case_args(case_file, out_dir),
    ]


def environment_command(out_file: Path, *, python: str = sys.executable) -> list[str]:
    """The torch half of env.json, read in a process of its own (see launch.environment)."""
    return [python, "-m", "fsdp_bench.worker.environment", str(out_file)]


def store_command(port: int, *, python: str = sys.executable) -> list[str]:
    """Node 0's sweep-long rendezvous store (see launch.rendezvous)."""
    return [python, "-m", "fsdp_bench.worker.store", "--port", str(port)]
