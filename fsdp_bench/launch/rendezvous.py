"""Where the torchruns of one case meet: torchrun's node and rendezvous flags, and node 0's
sweep-long c10d store process (no torch here; the store itself is `fsdp_bench.worker.store`)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time

from fsdp_bench.launch.processes import build_env
from fsdp_bench.plan.nodes import Launch, LaunchError


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


def start_rendezvous_store(launch: Launch, *, env: dict[str, str] | None = None,
                           timeout_s: float = 120.0) -> subprocess.Popen:
    """Node 0's sweep-long rendezvous store (`fsdp_bench.worker.store`). It exits when the
    returned process's stdin is closed; `stop_rendezvous_store` does that."""
    _host, port = launch.rdzv_host_port()
    proc = subprocess.Popen([sys.executable, "-m", "fsdp_bench.worker.store", "--port", str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=build_env(env), start_new_session=True)
    deadline = time.monotonic() + timeout_s
    line = b""
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        if line.strip() == b"ready":
            return proc
    rest = proc.stdout.read() if proc.poll() is not None else b""
    stop_rendezvous_store(proc)
    raise RuntimeError(f"--bench-rdzv-endpoint: could not host the rendezvous store on port {port}: "
                       f"{(line + rest).decode(errors='replace').strip()[-500:]}")


def stop_rendezvous_store(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()


