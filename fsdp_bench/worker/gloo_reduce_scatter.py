"""What gloo's collectives allocate and hold, for the three readers of a CPU peak.

torch's ProcessGroupGloo has no reduce-scatter of its own: it clones the whole input, all-reduces
the clone and copies the rank's chunk out. MemTracker on a real gloo rank counts the clone (a
4 MiB reduce-scatter between 2 gloo ranks peaks 4 MiB above its input and output; on the fake
process group, at them), and in FSDP2's backward it is one FSDP group's unsharded gradients again.
NCCL has a reduce-scatter of its own, without the copy; gloo's all-gather copies nothing the
tracker sees (the same 2-rank check).

- The estimator's fake process group allocates nothing, so `copy_held_across_call` adds the clone
  for the length of the call.
- A real gloo rank frees the clone when gloo's worker thread drops its work, and that thread
  races the caller: after a synchronous all-reduce returned, gloo still held the tensor in 46,
  58 and 40 of 300 calls (2 ranks; torch 2.13.0, 2.15.0, 2.11.0). A dev case's measured CPU peak
  (dev seed 371, fsdp2 at 2 ranks) read 13,987,508 B instead of 13,460,468 B in 2 of 17 runs, a
  clone still alive at a later allocation. `settled_on_gloo` makes the measured step's
  reduce-scatter do what gloo does, on a clone of its own that it frees itself before returning:
  none of 6,000 calls left it alive (2 ranks x 3,000, torch 2.13.0 and 2.15.0), and the dev case
  read 13,460,468 B in 12 of 12 runs.
- The profiler's memory events (worker.profiled_peak, FSDP1's CPU peak) see a free
  only on a thread they follow, and gloo's thread drops its work outside the part they follow:
  a tensor whose last reference went with it was never seen freed. 2 of 4 FSDP1 runs of a toy
  read one or two 1 MiB reduce-scatter clones high; fsdp1_no_shard, whose gradients gloo
  all-reduces in place, lost one 197,120 B gradient on one or both ranks in 3 of 8 gpt_tiny
  runs. So every synchronous all-reduce (the reduce-scatter's too) lends gloo a view, and
  returns once the storage's reference count says gloo has dropped it; the last reference, and
  the free, are then the caller's. A tensor's own count cannot tell: gloo keeps the lent tensor
  itself, which holds one storage reference however many hold it. 0 drifts in 24 rank readings
  since (FULL_SHARD and NO_SHARD, 6 runs each, 2 ranks); the longest wait was 0.9 ms.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist

# how long a settled reduce-scatter waits for gloo's thread to let go of its buffer; it took
# microseconds in every call seen, so reaching this is a hang elsewhere, and the step goes on
RELEASE_WAIT_S = 5.0


def fsdp2_reduce_scatter_name() -> str:
    """The c10d function FSDP2 reduce-scatters with: reduce_scatter_single where torch has it
    (2.13 on), reduce_scatter_tensor in 2.11."""
    return "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"


@contextlib.contextmanager
def _replaced(wrap: Callable[[Callable], Callable], name: str | None = None) -> Iterator[None]:
    name = name or fsdp2_reduce_scatter_name()
    original = getattr(dist, name)
    setattr(dist, name, wrap(original))
    try:
        yield
    finally:
        setattr(dist, name, original)


@contextlib.contextmanager
def copy_held_across_call(on: bool) -> Iterator[None]:
    """Inside (when `on`): every reduce-scatter holds a clone of its input across the call, as
    gloo's does. FSDP2 calls it synchronously, so the clone is freed as the call returns."""
    if not on:
        yield
        return

    def wrap(original: Callable) -> Callable:
        def reduce_scatter(output, input, *args, **kwargs):
            copy = input.clone()
            try:
                return original(output, input, *args, **kwargs)
            finally:
                del copy

        return reduce_scatter

    with _replaced(wrap):
        yield


@contextlib.contextmanager
def settled_on_gloo() -> Iterator[None]:
    """Inside, on a gloo default group: every synchronous all-reduce returns once gloo's thread has
    let go of its tensor, and every synchronous reduce-scatter all-reduces a clone of its input
    that way and copies this rank's chunk out (gloo's own algorithm, the same bytes), freeing the
    clone before the call returns. Anything else (another backend, the fake process group, an
    async call) is left as it is."""
    if not (dist.is_initialized() and dist.get_backend() == "gloo"):
        yield
        return

    all_reduce = dist.all_reduce

    def settled_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if async_op:
            return all_reduce(tensor, op=op, group=group, async_op=True)
        ours = _storage_refs(tensor)
        lent = tensor.view_as(tensor)  # gloo's work keeps this tensor, and through it the storage
        all_reduce(lent, op=op, group=group)
        del lent
        _wait_given_back(tensor, ours)
        return None

    def wrap(original: Callable) -> Callable:
        def reduce_scatter(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
            if async_op:
                return original(output, input, op=op, group=group, async_op=True)
            clone = input.clone(memory_format=torch.contiguous_format)
            settled_all_reduce(clone, op=op, group=group)
            chunks = clone.view(dist.get_world_size(group), -1)
            output.copy_(chunks[dist.get_rank(group)].view_as(output))
            del chunks, clone  # the last reference: freed here, on the caller's thread
            return None

        return reduce_scatter

    with _replaced(wrap), _replaced(lambda _: settled_all_reduce, "all_reduce"):
        yield


def _storage_refs(tensor: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)


def _wait_given_back(tensor: torch.Tensor, ours: int) -> None:
    """Until the references to `tensor`'s storage are down to `ours` (gloo's worker thread drops
    its work, and with it the view it was lent, a moment after the caller wakes), or
    RELEASE_WAIT_S."""
    deadline = time.monotonic() + RELEASE_WAIT_S
    while _storage_refs(tensor) > ours and time.monotonic() < deadline:
        time.sleep(0)
