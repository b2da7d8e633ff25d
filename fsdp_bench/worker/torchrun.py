"""torchrun without its interpreter teardown, for one case on one or more nodes, bound to the
sweep's life.

    python -m fsdp_bench.worker.torchrun ARGS   ==   python -m torch.distributed.run ARGS

The same torchrun (`torch.distributed.run.main`, same flags, same agent, rendezvous and error
files); only a successful launch leaves with `os._exit` instead of unloading torch, which costs
each case about 0.3 s of nothing. A failed launch raises as torchrun does, with its traceback and
exit code.

Before torch is imported it binds itself to the sweep: it records its pid in the case folder
(`--out DIR`, `CaseDir.launcher_pid_file`), asks for SIGTERM when its parent (the sweep's
pytest) dies, and sends itself SIGTERM once `FSDP_BENCH_CASE_DEADLINE_S` has passed. SIGTERM is
torchrun's own stop: it stops its workers (SIGKILL after TORCH_ELASTIC_SHUTDOWN_TIMEOUT) and
exits, and its ranks die with it. So a SIGKILLed pytest never leaves a case running.
"""

import os
import signal
import sys
import threading
from pathlib import Path

from fsdp_bench.plan.nodes import CASE_DEADLINE_ENV
from fsdp_bench.results.layout import CaseDir
from fsdp_bench.worker.lifetime import die_with_parent, exit_now


def _out_dir(argv: list[str]) -> Path | None:
    for flag, value in zip(argv, argv[1:]):
        if flag == "--out":
            return Path(value)
    return None


def bind_to_sweep(argv: list[str]) -> None:
    """Pid file, parent-death signal and deadline (see the module doc)."""
    out = _out_dir(argv)
    if out is not None:
        CaseDir(out).launcher_pid_file.write_text(str(os.getpid()))
    die_with_parent(signal.SIGTERM)
    try:
        deadline_s = float(os.environ.get(CASE_DEADLINE_ENV, ""))
    except ValueError:
        return
    if deadline_s > 0:
        timer = threading.Timer(deadline_s, os.kill, (os.getpid(), signal.SIGTERM))
        timer.daemon = True
        timer.start()


if __name__ == "__main__":
    bind_to_sweep(sys.argv[1:])
    from torch.distributed.run import main

    main()
    exit_now(0)
