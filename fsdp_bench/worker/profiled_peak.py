"""FSDP1's CPU peak, which MemTracker refuses: the live tensor bytes of a step counted from the
CPU allocator's side, through the profiler's memory events (each allocation and free with its
address and size, on every thread the profiler follows).

Two steps run under the profiler and the peak is read in the second. Only blocks allocated while
it runs are counted, each until its free: a block from before (FSDP1's sharded gradients of the
previous step, freed as the next forward starts) was not allocated in the first step and does not
count, and every block the second step frees was allocated in the first or in the second. So at
any moment of the second step the live bytes are `resident_bytes` (parameters, buffers,
gradients and optimizer state by distinct storage, read between steps, the base MemTracker also
starts from) plus the counted blocks alive then. A free the profiler did not see (gloo's thread
dropping the last reference outside the part it follows; worker.gloo_reduce_scatter makes those
the caller's) would leave a block counted for good: in a steady loop both steps end with the
same bytes counted, so a difference (`drift_bytes`) refuses the reading, and so does a block
allocated at the address of one still counted (`missed_frees`).

Addresses, not the events' running sum: the CPU allocator keeps the size of a block allocated
under an earlier profiling session and reports its free in a later one (a second reading in one
process, an in-process simulated rank after another), which a running sum would subtract though
it never added it: the second of two FSDP1 readings in one process read 298-597 KB low.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

from fsdp_bench.plan.case import PROFILED_PEAK_STEPS
from fsdp_bench.results.readings import ProfiledPeak

_SECOND_STEP = "fsdp_bench.profiled_peak.second_step"
# A missed free is a whole tensor (a gradient, a gathered unit: hundreds of KB and more); a few
# scalars (a loss, a step counter) may differ between two steps without meaning that.
PROFILED_DRIFT_TOLERANCE_BYTES = 4096


def profiled_step_peak(step: Callable[[], Any], *, resident_bytes: int) -> ProfiledPeak:
    """Run `step` PROFILED_PEAK_STEPS (2) times under the profiler's memory events; the peak live
    bytes of the last (see the module's docstring), or a null reason when a free was missed."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from fsdp_bench.worker.gloo_reduce_scatter import settled_on_gloo

    gc.collect()
    gc.disable()  # frees by reference counting alone, at the same points in both steps
    try:
        with settled_on_gloo(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for _ in range(PROFILED_PEAK_STEPS - 1):
                step()
            with record_function(_SECOND_STEP):
                step()
    finally:
        gc.enable()
    second, allocations = _second_step_and_allocations(prof.profiler.kineto_results.experimental_event_tree())
    counted: dict[int, int] = {}  # address -> bytes of the blocks allocated under the profiler
    live, first_end, peak, missed = 0, None, 0, 0
    for start_ns, address, size in sorted(allocations):
        if first_end is None and start_ns >= second:
            first_end = peak = live
        if size > 0:
            missed += address in counted  # allocated again where a counted block was never freed
            live += size - counted.pop(address, 0)
            counted[address] = size
        elif address in counted:
            live -= counted.pop(address)
        if first_end is not None:
            peak = max(peak, live)
    if first_end is None:  # the second step allocated and freed nothing
        first_end = peak = live
    out: ProfiledPeak = {"resident_bytes": resident_bytes, "drift_bytes": live - first_end, "missed_frees": missed}
    if missed:
        out["null_reason"] = (
            f"the profiler missed {missed} free(s): a block was allocated again at a live one's address"
        )
    elif abs(out["drift_bytes"]) > PROFILED_DRIFT_TOLERANCE_BYTES:
        out["null_reason"] = (
            f"the profiler missed a free: two equal steps ended {out['drift_bytes']:+,} B apart "
            f"(tolerance {PROFILED_DRIFT_TOLERANCE_BYTES:,} B), so the blocks it counts are not the live ones"
        )
    else:
        out["peak_bytes"] = resident_bytes + peak
    return out


def _second_step_and_allocations(roots) -> tuple[int, list[tuple[int, int, int]]]:
    """When the second step began (ns) and every CPU allocation (+bytes) and free (-bytes) as
    (start ns, address, bytes), from the profiler's event tree."""
    from torch._C._profiler import _EventType

    second, allocations = None, []
    for node in _walk(roots):
        if node.tag == _EventType.Allocation:
            fields = node.extra_fields
            if fields.device.type == "cpu":
                allocations.append((node.start_time_ns, fields.ptr, fields.alloc_size))
        elif node.name == _SECOND_STEP:
            second = node.start_time_ns
    if second is None:
        raise RuntimeError(f"the profiler recorded no {_SECOND_STEP!r} span")
    return second, allocations


def _walk(nodes) -> Iterator[Any]:
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)
