"""Make a rank fail the way a contributor's fault asks (`fsdp_bench.plan.faults` parses them)."""

from __future__ import annotations

import os
import signal
import time

import torch


def inject(kind: str, stage: str, device=None) -> None:
    """Make this rank fail at `stage` the way `kind` says; `device` is the rank's torch device."""
    if kind == "raise":
        raise RuntimeError(f"injected fault at stage {stage}")
    if kind == "oom":
        if device is not None and device.type == "cuda":
            # A real OOM through the caching allocator: twice the device's memory cannot fit.
            total = torch.cuda.get_device_properties(device).total_memory
            torch.empty(2 * total, dtype=torch.uint8, device=device)
        raise torch.OutOfMemoryError(f"out of memory (injected fault at stage {stage}, no CUDA allocator on {device})")
    if kind == "stuck":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kind = "hang"
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
