"""The sweep-long c10d rendezvous store on node 0 of a multi-node sweep.

    python -m fsdp_bench.worker.store --port PORT   (started by fsdp_bench.launch.rendezvous)

Hosts a `TCPStore` that every case's torchrun on every node joins as a client
(`--rdzv-conf is_host=0`). Each case uses its own rendezvous id, so the keys of consecutive
cases never mix. Prints "ready" once listening, and exits when its stdin closes (the sweep
ended or died), so it never outlives the pytest session that started it.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsdp_bench.worker.store", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="0.0.0.0")
    args = parser.parse_args(argv)
    from torch.distributed import TCPStore

    store = TCPStore(
        args.host, args.port, is_master=True, wait_for_workers=False, timeout=timedelta(hours=24), use_libuv=True
    )
    print("ready", flush=True)
    sys.stdin.read()  # returns at EOF: the parent closed the pipe or died
    del store
    return 0


if __name__ == "__main__":
    sys.exit(main())
