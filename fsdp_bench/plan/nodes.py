"""Multi-node launch settings and their validation (no torch).

The same `pytest benchmarks ... --bench-nnodes N --bench-node-rank R --bench-rdzv-endpoint H:P
--bench-run-id NAME` runs on every node. Each node collects the same cases in the same order and
launches one torchrun per case; the torchruns of one case meet in a c10d rendezvous whose id is
derived from the run id and the case id, so the nodes move through the sweep in lockstep and a
late node can never join a neighbouring case.

Where each node writes is `fsdp_bench.results.layout.RunLayout`; with a shared filesystem (the usual
cluster setup) node 0 merges every node's rank files into the case result; without one the result
holds node 0's ranks and says so.

The rendezvous store lives for the whole sweep in one small process on node 0
(`python -m fsdp_bench.worker.store`, started by `fsdp_bench.launch.rendezvous`): a store hosted by each case's torchrun would close when
that case ends, while a faster node may already be dialling it for the next case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_RDZV_PORT = 29400  # torchrun's own default c10d port
# Seconds after which a case's torchrun stops itself (timeout + kill grace), even if the sweep
# that should have stopped it is gone (set by launch.runner, read by worker.torchrun).
CASE_DEADLINE_ENV = "FSDP_BENCH_CASE_DEADLINE_S"
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
    """ "HOST:PORT" (or "HOST", torchrun's default port) -> (host, port)."""
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
        raise LaunchError(
            "--bench-run-id: required with --bench-nnodes > 1 so every node names the "
            "same run folder (under Slurm it defaults to slurm-$SLURM_JOB_ID)"
        )
    return Launch(nnodes=launch.nnodes, node_rank=launch.node_rank, rdzv_endpoint=launch.rdzv_endpoint, run_id=run_id)
