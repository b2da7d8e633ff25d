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


def plant(kind: str, model, optimizer) -> None:
    """Plant a cause of slowness in every later step of this rank (`plan.faults.PLANTED`), so the
    step-time attribution can be checked against a known answer."""
    from fsdp_bench.plan.faults import PLANTED_COMM_DELAY_S, PLANTED_DELAY_S

    if kind == "host_delay":  # Python time between ops: no op, no collective runs meanwhile
        model.register_forward_hook(lambda *_: time.sleep(PLANTED_DELAY_S))
    elif kind == "slow_optimizer":  # pre-hooks run inside Optimizer.step's profiler span
        inner = getattr(optimizer, "optimizer", optimizer)
        inner.register_step_pre_hook(lambda *_: time.sleep(PLANTED_DELAY_S))
    elif kind == "comm_delay":
        _delay_collectives(PLANTED_COMM_DELAY_S)


def _delay_collectives(seconds: float) -> None:
    """Hold every collective this process calls through torch.distributed's Python functions for
    `seconds`, inside a span the profiler reads as that collective (worker.profiling's
    PLANTED_COMM_PREFIX): the time a slow link would keep the collective in flight."""
    import torch.distributed as dist
    from torch.profiler import record_function

    from fsdp_bench.worker.profiling import PLANTED_COMM_PREFIX

    def delayed(fn, kind):
        def call(*args, **kwargs):
            with record_function(f"{PLANTED_COMM_PREFIX}{kind}"):
                time.sleep(seconds)
            return fn(*args, **kwargs)

        return call

    # FSDP2 looks these up at each call (torch 2.13: the *_single ones); FSDP1 keeps the function
    # it saw when it was built, and DDP's reducer calls C++, so neither is delayed.
    for name, kind in (
        ("all_gather_single", "all_gather"),
        ("all_gather_into_tensor", "all_gather"),
        ("reduce_scatter_single", "reduce_scatter"),
        ("reduce_scatter_tensor", "reduce_scatter"),
        ("all_reduce", "all_reduce"),
    ):
        if hasattr(dist, name):
            setattr(dist, name, delayed(getattr(dist, name), kind))


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
