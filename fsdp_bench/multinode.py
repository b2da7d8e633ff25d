"""Multi-node launch settings and the pure logic behind them (no torch).

The same `pytest benchmarks ... --bench-nnodes N --bench-node-rank R --bench-rdzv-endpoint H:P
--bench-run-id NAME` runs on every node. Each node collects the same cases in the same order and
launches one torchrun per case; the torchruns of one case meet in a c10d rendezvous whose id is
derived from the run id and the case id, so the nodes move through the sweep in lockstep and a
late node can never join a neighbouring case.

Where things go (under `results/<run-id>/`, a folder every node names the same way):
    env.json, cases/<case-id>.json            node 0 only: the merged results, written once
    cases/<case-id>/                          node 0's work folder: log.txt, its ranks' rank-N.json
    nodes/node-<R>/cases/<case-id>/           node R > 0: log.txt, its ranks' rank-N.json
With a shared filesystem (the usual cluster setup) node 0 merges every node's rank files into
the case result; without one the result holds node 0's ranks and says so.

The rendezvous store lives for the whole sweep in one small process on node 0
(`python -m fsdp_bench.rendezvous`): a store hosted by each case's torchrun would close when
that case ends, while a faster node may already be dialling it for the next case.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RDZV_PORT = 29400  # torchrun's own default c10d port
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class LaunchError(ValueError):
    """Bad multi-node settings; the message names the option."""


@dataclass(frozen=True, kw_only=True)
class Launch:
    """How this node takes part in each case. Not part of any case id: the same case run on one
    node or across two measures the same thing (its id carries the world size)."""

    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None  # "HOST:PORT" of node 0, where the rendezvous store listens
    run_id: str | None = None  # the run folder's name, the same on every node

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    @property
    def owns_results(self) -> bool:
        """Node 0 writes the merged results and the report; the others only their logs."""
        return self.node_rank == 0

    def rdzv_host_port(self) -> tuple[str, int]:
        return parse_endpoint(self.rdzv_endpoint or "")


def parse_endpoint(text: str) -> tuple[str, int]:
    """"HOST:PORT" (or "HOST", torchrun's default port) -> (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = text, str(DEFAULT_RDZV_PORT)
    host = host.strip("[]")
    if not host:
        raise LaunchError(f"--bench-rdzv-endpoint: {text!r} has no host; expected HOST:PORT")
    try:
        port = int(port_text)
    except ValueError:
        raise LaunchError(f"--bench-rdzv-endpoint: port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise LaunchError(f"--bench-rdzv-endpoint: port {port} is out of range")
    return host, port


def validate_launch(launch: Launch, *, env: dict[str, str] | None = None) -> Launch:
    """Check the settings together; fill the run id from Slurm's job id when it is missing."""
    if launch.nnodes < 1:
        raise LaunchError(f"--bench-nnodes: {launch.nnodes} is not a positive integer")
    if not 0 <= launch.node_rank < launch.nnodes:
        raise LaunchError(f"--bench-node-rank: {launch.node_rank} is not in 0..{launch.nnodes - 1}")
    if launch.run_id is not None and not _RUN_ID_RE.match(launch.run_id):
        raise LaunchError(f"--bench-run-id: {launch.run_id!r} must be letters, digits, '_', '.', '-' (<= 128)")
    if not launch.multi_node:
        if launch.node_rank or launch.rdzv_endpoint:
            raise LaunchError("--bench-node-rank/--bench-rdzv-endpoint: need --bench-nnodes > 1")
        return launch
    if not launch.rdzv_endpoint:
        raise LaunchError("--bench-rdzv-endpoint: required with --bench-nnodes > 1 (node 0's HOST:PORT)")
    parse_endpoint(launch.rdzv_endpoint)
    run_id = launch.run_id
    if run_id is None and (env or {}).get("SLURM_JOB_ID"):
        run_id = f"slurm-{env['SLURM_JOB_ID']}"
    if run_id is None:
        raise LaunchError("--bench-run-id: required with --bench-nnodes > 1 so every node names the "
                          "same run folder (under Slurm it defaults to slurm-$SLURM_JOB_ID)")
    return Launch(nnodes=launch.nnodes, node_rank=launch.node_rank,
                  rdzv_endpoint=launch.rdzv_endpoint, run_id=run_id)


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
        "--nnodes", str(launch.nnodes),
        "--node-rank", str(launch.node_rank),
        "--nproc-per-node", str(ranks_per_node(world_size, launch.nnodes)),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"{host}:{port}",
        "--rdzv-id", rendezvous_id(launch.run_id or "", case_id),
        # is_host=0: the store is the sweep-long one on node 0 (fsdp_bench.rendezvous), never
        # one of these torchruns. join_timeout: a node may wait for the others' previous case.
        "--rdzv-conf", f"is_host=0,join_timeout={int(join_timeout_s)}",
    ]


def node_dir(run_dir: Path, node_rank: int) -> Path:
    """Where node `node_rank` keeps its logs and rank files (node 0: the run folder itself)."""
    return Path(run_dir) if node_rank == 0 else Path(run_dir) / "nodes" / f"node-{node_rank}"


def rank_file_dirs(run_dir: Path, case_id: str, nnodes: int) -> list[Path]:
    """Every node's work folder for one case, node 0 first."""
    return [node_dir(run_dir, r) / "cases" / case_id for r in range(nnodes)]
