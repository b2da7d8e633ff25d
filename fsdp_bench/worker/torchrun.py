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
torchrun's own stop: it stops its workers (SIGKILL after TORCH_ELASTIC_SHUTDOWN_TIMEOUT, half the
user's --bench-kill-grace) and exits, and its ranks die with it. With nobody left to wait for
their records (the sweep is gone, or past its deadline) that grace is not owed: ORPHAN_STOP_S
later every process below torchrun, and torchrun, are SIGKILLed, whatever grace was chosen. So
a SIGKILLed pytest never leaves a case running for longer than that.
"""

import os
import signal
import sys
import threading
import time
from pathlib import Path

from fsdp_bench.plan.nodes import CASE_DEADLINE_ENV
from fsdp_bench.results.layout import CaseDir
from fsdp_bench.worker.lifetime import descendants, die_with_parent, exit_now


def _out_dir(argv: list[str]) -> Path | None:
    for flag, value in zip(argv, argv[1:]):
        if flag == "--out":
            return Path(value)
    return None


# How long an orphaned or overdue torchrun's ranks get to write their records after SIGTERM: enough
# for a rank's except-handler (well under a second on CPU), and not the user's graceful-stop grace.
ORPHAN_STOP_S = 5.0
_POLL_S = 0.2


def _watch(parent: int, deadline_s: float) -> None:
    """Wait for the parent's death or the deadline; then SIGTERM (torchrun's stop) and, ORPHAN_STOP_S
    later, SIGKILL for everything below torchrun (a rank stuck in native code ignores SIGTERM) and
    torchrun itself."""
    start = time.monotonic()
    while os.getppid() == parent and not (deadline_s > 0 and time.monotonic() - start >= deadline_s):
        time.sleep(_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)  # the parent's death signal did this already, if it died
    time.sleep(ORPHAN_STOP_S)
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # already gone
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def bind_to_sweep(argv: list[str]) -> None:
    """Pid file, parent-death signal and deadline (see the module doc)."""
    out = _out_dir(argv)
    if out is not None:
        CaseDir(out).launcher_pid_file.write_text(str(os.getpid()))
    parent = os.getppid()
    die_with_parent(signal.SIGTERM)
    try:
        deadline_s = float(os.environ.get(CASE_DEADLINE_ENV, ""))
    except ValueError:
        deadline_s = 0.0
    threading.Thread(target=_watch, args=(parent, deadline_s), daemon=True, name="fsdp-bench-watch").start()


if __name__ == "__main__":
    bind_to_sweep(sys.argv[1:])
    from torch.distributed.run import main

    main()
    exit_now(0)
