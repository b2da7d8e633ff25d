"""FSDP1's CPU peak and its breakdown, which MemTracker refuses: the live tensor bytes of a step
counted from the CPU allocator's side, through the profiler's memory events (each allocation and
free with its address and size, on every thread the profiler follows).

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

The breakdown follows MemTracker's rules (docs/metrics.md, "FSDP1's CPU peak"): the resident state
by what it is, every other block alive at the peak by the span that allocated it (_site_category),
and a block holding a gradient at a backward's end as a gradient, wherever it was made.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import Any

from fsdp_bench.plan.case import PROFILED_PEAK_STEPS
from fsdp_bench.results.readings import BREAKDOWN_PARTS, ProfiledPeak

_STEP = "fsdp_bench.profiled_peak.step"
_SECOND_STEP = "fsdp_bench.profiled_peak.second_step"
_AFTER_BACKWARD = "fsdp_bench.profiled_peak.after_backward"
_FORWARD = "fsdp_bench.profiled_peak.module_forward"
_FSDP1 = "FullyShardedDataParallel."
_ALLOC, _MARK_SECOND, _MARK_GRADS = range(3)  # the kinds of event the replay reads
# A missed free is a whole tensor (a gradient, a gathered unit: hundreds of KB and more); a few
# scalars (a loss, a step counter) may differ between two steps without meaning that.
PROFILED_DRIFT_TOLERANCE_BYTES = 4096


def profiled_step_peak(step: Callable[..., Any], *, model, resident: dict[str, int]) -> ProfiledPeak:
    """Run `step(on_phase)` PROFILED_PEAK_STEPS (2) times under the profiler's memory events; the
    peak live bytes of the last and their breakdown (see the module's docstring), or a null reason
    when a free was missed. `resident`: the model's state between steps by category
    (worker.probes.resident_state_by_category)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from fsdp_bench.worker.gloo_reduce_scatter import settled_on_gloo

    grad_sets: list[set[int]] = []  # storages holding gradients at each backward's end, in order

    def on_phase(phase: str) -> None:
        if phase == "after_backward":
            with record_function(_AFTER_BACKWARD):
                grad_sets.append(gradient_addresses(model))

    gc.collect()
    gc.disable()  # frees by reference counting alone, at the same points in both steps
    try:
        with (
            settled_on_gloo(),
            _forward_spans(model),
            profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        ):
            for i in range(PROFILED_PEAK_STEPS):
                with record_function(_SECOND_STEP if i == PROFILED_PEAK_STEPS - 1 else _STEP):
                    step(on_phase)
    finally:
        gc.enable()
    events = _events(prof.profiler.kineto_results.experimental_event_tree(), grad_sets)
    return _peak_of_second_step(events, resident)


def gradient_addresses(model) -> set[int]:
    """The storages holding gradients now: each parameter's, and FSDP1's flat parameters' own
    (a unit's gradient between micro-batches, `_saved_grad_shard`, is on no parameter)."""
    from fsdp_bench.worker.training import local_tensor

    grads = [p.grad for p in model.parameters()]
    for module in model.modules():
        flat = getattr(getattr(module, "_handle", None), "flat_param", None)
        if flat is not None:
            grads += [flat.grad, getattr(flat, "_saved_grad_shard", None)]
    return {local_tensor(g).untyped_storage().data_ptr() for g in grads if g is not None}


@contextlib.contextmanager
def _forward_spans(model) -> Iterator[None]:
    """Each module's forward as a span (_FORWARD): a forward run again in the backward (activation
    checkpointing's recomputation) makes activations, as MemTracker counts it, not temporaries."""
    from torch.profiler import record_function

    open_spans = []

    def enter(module, args) -> None:
        open_spans.append(record_function(_FORWARD))
        open_spans[-1].__enter__()

    def leave(module, args, output) -> None:
        open_spans.pop().__exit__(None, None, None)

    # always_call: checkpointing stops a recomputation by raising inside the forward once it has
    # what the backward needs; a span left open would take in the rest of the backward
    handles = [
        h
        for m in model.modules()
        for h in (m.register_forward_pre_hook(enter), m.register_forward_hook(leave, always_call=True))
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _site_category(name: str, inherited: str) -> str:
    """The category of a block allocated inside the span `name`, MemTracker's where it has one:
    a step's forward makes activations (a module's forward too, recomputed in the backward), its
    backward temporaries (other), its optimizer step optimizer state; FSDP1's unsharding gathers
    parameters (MemTracker would call a unit prefetched in the backward `other` until the unit's
    own backward begins). Gradients are found by address instead (_MARK_GRADS), as MemTracker's
    gradient hooks find them."""
    if name in (_STEP, _SECOND_STEP, _FORWARD):
        return "activations"
    if name.startswith("Optimizer.step"):
        return "optimizer"
    if name.startswith("autograd::engine::evaluate_function"):
        return "other"
    if name.startswith(_FSDP1) and ("._pre_" in name or "prefetch" in name):
        return "params"
    return inherited


def _events(roots, grad_sets: list[set[int]]) -> list[tuple]:
    """(start ns, kind, address or addresses, bytes, category) for every CPU allocation (+bytes)
    and free (-bytes), the second step's start, and each backward's end with its gradients."""
    from torch._C._profiler import _EventType

    events, grad_marks = [], []
    stack = [(node, "other") for node in roots]  # outside a step: another thread's work
    while stack:
        node, inherited = stack.pop()
        if node.tag == _EventType.Allocation:
            fields = node.extra_fields
            if fields.device.type == "cpu":
                events.append((node.start_time_ns, _ALLOC, fields.ptr, fields.alloc_size, inherited))
            continue
        if node.name == _SECOND_STEP:
            events.append((node.start_time_ns, _MARK_SECOND, None, 0, None))
        elif node.name == _AFTER_BACKWARD:
            grad_marks.append(node.start_time_ns)
        category = _site_category(node.name, inherited)
        stack.extend((child, category) for child in node.children)
    if len(grad_marks) != len(grad_sets):
        raise RuntimeError(f"{len(grad_sets)} backward(s) ran but the profiler recorded {len(grad_marks)}")
    events += [(t, _MARK_GRADS, grads, 0, None) for t, grads in zip(sorted(grad_marks), grad_sets, strict=True)]
    return sorted(events, key=lambda e: e[0])


def _peak_of_second_step(events: list[tuple], resident: dict[str, int]) -> ProfiledPeak:
    """Replay the events in time order: the counted bytes live at the second step's start, end
    (a difference is a missed free) and peak, and the blocks live at the peak by category."""
    blocks: list[list] = []  # [bytes, category, allocated at event index, freed at event index]
    counted: dict[int, list] = {}  # address -> the live counted block there
    live, first_end, peak, peak_at, missed = 0, None, 0, -1, 0
    for index, (_, kind, address, size, category) in enumerate(events):
        if kind == _MARK_SECOND:
            first_end = peak = live
            peak_at = index
        elif kind == _MARK_GRADS:  # a live block holding a gradient now is one (MemTracker's hook)
            for block in filter(None, map(counted.get, address)):
                block[1] = "grads"
        elif size > 0:
            if address in counted:  # allocated again where a counted block was never freed
                missed += 1
                live -= _free(counted.pop(address), index)
            counted[address] = [size, category, index, None]
            blocks.append(counted[address])
            live += size
        elif address in counted:
            live -= _free(counted.pop(address), index)
        if first_end is not None and live > peak:
            peak, peak_at = live, index
    if first_end is None:
        raise RuntimeError(f"the profiler recorded no {_SECOND_STEP!r} span")
    out: ProfiledPeak = {
        "resident_bytes": sum(resident.values()),
        "drift_bytes": live - first_end,
        "missed_frees": missed,
    }
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
        out["peak_bytes"] = out["resident_bytes"] + peak
        breakdown = dict.fromkeys(BREAKDOWN_PARTS, 0) | resident
        for size, category, allocated, freed in blocks:
            if allocated <= peak_at and (freed is None or freed > peak_at):
                breakdown[category] += size
        out["breakdown_bytes"] = breakdown
    return out


def _free(block: list, index: int) -> int:
    block[3] = index
    return block[0]
