"""Memory readings on CUDA (the caching allocator's counters) and CPU (tensor tracking, RSS).

On CUDA the peak comes from `torch.cuda.max_memory_allocated`, reset before the measured steps.
CPU has no allocator counters, so the CPU peak is measured on one extra, untimed training step
run under `torch.distributed._tools.mem_tracker.MemTracker`, which follows every tensor's
storage as it is created and freed: that is the peak of live tensor bytes, not of the heap.
"""

from __future__ import annotations

import gc
import resource
from typing import Any, Callable

import torch

try:  # RSS of this process right now; ru_maxrss only gives the peak.
    import psutil

    _PROCESS = psutil.Process()
except ImportError:  # pragma: no cover - psutil is a declared dependency
    _PROCESS = None


def rss_bytes() -> int | None:
    return _PROCESS.memory_info().rss if _PROCESS is not None else None


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def read_memory(device: torch.device) -> dict[str, Any]:
    """Current and peak allocator readings (CUDA) plus process RSS, in bytes."""
    reading: dict[str, Any] = {"rss_bytes": rss_bytes()}
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


def track_step_memory(step: Callable[[Any], Any], modules: list[torch.nn.Module],
                      optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Run `step(tracker)` once under MemTracker; the peak live tensor bytes, total and per category."""
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(*modules, optimizer)
    # Without the cycle collector, tensors are freed by reference counting alone, at the same
    # points in every run; otherwise when a collection happens to run shifts the peak's makeup.
    gc.collect()
    gc.disable()
    try:
        with tracker:
            step(tracker)
    finally:
        gc.enable()
    snapshot = tracker.get_tracker_snapshot("peak")
    per_device = next(iter(snapshot.values()), {})
    categories = {
        (k.name.lower() if hasattr(k, "name") else str(k)): v for k, v in per_device.items() if k != "Total"
    }
    return {"peak_bytes": per_device.get("Total", 0), "by_category_bytes": categories}
