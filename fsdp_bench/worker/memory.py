"""Memory readings on CUDA (the caching allocator's counters) and CPU (tensor tracking, RSS).

On CUDA the peak comes from `torch.cuda.max_memory_allocated`, reset before the measured steps.
CPU has no allocator counters, so the CPU peak is measured on one extra, untimed training step
run under `torch.distributed._tools.mem_tracker.MemTracker`, which follows every tensor's
storage as it is created and freed: that is the peak of live tensor bytes, not of the heap.
MemTracker refuses FSDP1; its peak comes from the profiler's memory events instead
(worker.profiled_peak), the same live bytes counted from the allocator's side.
"""

from __future__ import annotations

import gc
import resource
from collections.abc import Callable
from typing import Any

import torch

from fsdp_bench.results.readings import AllocatorHealth, MemoryReading, MemorySample, TrackedPeak

try:  # RSS of this process right now; ru_maxrss only gives the peak.
    import psutil

    _PROCESS = psutil.Process()
except ImportError:  # pragma: no cover - psutil is a declared dependency
    _PROCESS = None


def rss_bytes() -> int | None:
    return _PROCESS.memory_info().rss if _PROCESS is not None else None


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def read_memory(device: torch.device) -> MemoryReading:
    """Current and peak allocator readings (CUDA) plus process RSS, in bytes."""
    reading: MemoryReading = {"rss_bytes": rss_bytes()}
    if device.type == "cuda":
        reading.update(
            allocated_bytes=torch.cuda.memory_allocated(device),
            max_allocated_bytes=torch.cuda.max_memory_allocated(device),
            reserved_bytes=torch.cuda.memory_reserved(device),
            max_reserved_bytes=torch.cuda.max_memory_reserved(device),
        )
    return reading


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def track_step_memory(
    step: Callable[[Callable[[str], None]], Any],
    modules: list[torch.nn.Module],
    optimizer: torch.optim.Optimizer,
    *,
    device: torch.device,
) -> TrackedPeak:
    """Run `step(on_phase)` once under MemTracker; the peak live tensor bytes on `device` (the
    rank's), total and per category.

    MemTracker keeps one peak per device it saw, in the order it first saw them. A CUDA rank with
    host tensors (CPU offload's sharded parameters, gradients and optimizer state, tracked before
    anything on the GPU) has two: the first was the host's, so fsdp2_offload's H100 breakdown read
    0 activations beside a 29.7 GB allocator peak. The rank's device is the one its peak is of.

    On gloo, each reduce-scatter's copy of its input is freed before the call returns
    (worker.gloo_reduce_scatter.settled_on_gloo); gloo's own thread frees it a moment later in
    some runs, and the peak would then read one FSDP group's gradients higher by chance.

    MemTracker refuses a second forward of a module in one session (gradient accumulation), so
    its per-module statistics are cleared after each backward; the global peak it keeps is not.
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    from fsdp_bench.worker.gloo_reduce_scatter import settled_on_gloo

    tracker = MemTracker()
    tracker.track_external(*modules, optimizer)

    def on_phase(phase: str) -> None:
        if phase == "after_backward":
            tracker.reset_mod_stats()

    # Without the cycle collector, tensors are freed by reference counting alone, at the same
    # points in every run; otherwise when a collection happens to run shifts the peak's makeup.
    gc.collect()
    gc.disable()
    try:
        with tracker, settled_on_gloo():
            step(on_phase)
    finally:
        gc.enable()
    peak, categories = peak_on(tracker, device)
    return {"peak_bytes": peak, "by_category_bytes": categories}


def peak_on(tracker, device: torch.device) -> tuple[int, dict[str, int]]:
    """A MemTracker's peak on `device`: its total bytes and bytes per category (lower-case names).

    Raises LookupError when the tracker saw other devices but not this one: a zero would read as
    a measured empty peak (a probe records the error as its null reason instead)."""
    snapshot = tracker.get_tracker_snapshot("peak")
    per_device = snapshot.get(torch.device(device))
    if per_device is None:
        if snapshot:
            raise LookupError(f"MemTracker saw {', '.join(map(str, snapshot))} but not {device}")
        per_device = {}
    categories = {(k.name.lower() if hasattr(k, "name") else str(k)): v for k, v in per_device.items() if k != "Total"}
    return int(per_device.get("Total", 0)), categories


# --- CUDA-only: timeline, allocator health, snapshots ---------------------------------------------


class MemoryTimeline:
    """Allocated/reserved bytes at step and phase boundaries, read from the CUDA caching allocator.

    Reading the allocator's counters does not synchronize the device, so sampling costs
    microseconds inside the timed step; `t_s` is host time since the first sample (the device may
    still be running earlier work). On CPU there is no allocator to read: no timeline is recorded.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.enabled = device.type == "cuda"
        self.samples: list[MemorySample] = []
        self.step = 0
        self._t0: float | None = None

    def sample(self, phase: str) -> None:
        if not self.enabled:
            return
        import time

        now = time.perf_counter()
        if self._t0 is None:
            self._t0 = now
        self.samples.append(
            {
                "step": self.step,
                "phase": phase,
                "t_s": now - self._t0,
                "allocated_bytes": torch.cuda.memory_allocated(self.device),
                "reserved_bytes": torch.cuda.memory_reserved(self.device),
            }
        )


ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"


def allocator_health(device: torch.device) -> AllocatorHealth | None:
    """Retries, OOMs and the reserved-minus-allocated gap of the CUDA caching allocator."""
    if device.type != "cuda":
        return None
    import os

    stats = torch.cuda.memory_stats(device)
    return {
        "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "num_ooms": stats.get("num_ooms", 0),
        "reserved_minus_allocated_bytes": torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device),
        "peak_reserved_minus_peak_allocated_bytes": torch.cuda.max_memory_reserved(device)
        - torch.cuda.max_memory_allocated(device),
        "inactive_split_bytes": stats.get("inactive_split_bytes.all.current", 0),
        "alloc_conf": os.environ.get(ALLOC_CONF_ENV) or os.environ.get("PYTORCH_ALLOC_CONF"),
    }


def start_memory_history(device: torch.device, max_entries: int = 100_000) -> bool:
    """Record allocation stack traces for a snapshot (CUDA only); True when recording started."""
    if device.type != "cuda":
        return False
    torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
    return True


def dump_memory_snapshot(path) -> str | None:
    """Write the allocator snapshot pickle (open it at https://pytorch.org/memory_viz)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    torch.cuda.memory._dump_snapshot(str(path))
    return str(path)


def stop_memory_history() -> None:
    """Stop recording: the probe steps after the snapshot should not pay for it."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.memory._record_memory_history(enabled=None)
