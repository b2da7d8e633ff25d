"""Node 0's sweep-long c10d store process, where the torchruns of every case meet (no torch here;
the store itself is `fsdp_bench.worker.store`; torchrun's rendezvous flags are built in
`fsdp_bench.launch.commands`)."""

from __future__ import annotations

import subprocess
import time

from fsdp_bench.launch.commands import store_command
from fsdp_bench.launch.processes import build_env
from fsdp_bench.plan.nodes import Launch


def start_rendezvous_store(
    launch: Launch, *, env: dict[str, str] | None = None, timeout_s: float = 120.0
) -> subprocess.Popen:
    """Node 0's sweep-long rendezvous store (`fsdp_bench.worker.store`). It exits when the
    returned process's stdin is closed; `stop_rendezvous_store` does that."""
    _host, port = launch.rdzv_host_port()
    proc = subprocess.Popen(
        store_command(port),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=build_env(env),
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    line = b""
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        if line.strip() == b"ready":
            return proc
    rest = proc.stdout.read() if proc.poll() is not None else b""
    stop_rendezvous_store(proc)
    raise RuntimeError(
        f"--bench-rdzv-endpoint: could not host the rendezvous store on port {port}: "
        f"{(line + rest).decode(errors='replace').strip()[-500:]}"
    )


def stop_rendezvous_store(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
