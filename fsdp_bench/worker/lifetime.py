"""A rank dies with its parent (no torch): if torchrun is SIGKILLed, the kernel sends each rank
SIGTERM (Linux `prctl(PR_SET_PDEATHSIG)`), which the rank turns into its final record, instead
of leaving it orphaned and holding its GPU."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask for `sig` when the parent exits; True when set. A parent already gone ends us now."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except OSError:
        return False
    if parent == 1 or os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)
    return True
