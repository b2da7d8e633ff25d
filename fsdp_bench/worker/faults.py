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


class SlowSteps:
    """The `slow` fault's sleep inside each measured step: FRACTION of the fastest measured step
    this rank has seen so far, not of the current one. A step's own time includes waiting in its
    collectives for a slowed peer; sleeping a share of that fed each rank's sleep into the other's
    next step, and with two slowed ranks at FRACTION 4 the steps grew 0.2 s, 6 s, 93 s. The fastest
    step so far is this rank's compute with the least waiting, so the case slows by about
    FRACTION and stays there."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self.fastest_s = float("inf")

    def sleep(self, busy_s: float) -> None:
        self.fastest_s = min(self.fastest_s, busy_s)
        time.sleep(self.fraction * self.fastest_s)
