"""Peak memory of rank 0 of one case, at any world size, without allocating it: the real model
and strategy (`setup.build_rank`) built and trained under fake tensors and a fake process group,
with torch's memory tracker reading the peak of live tensor bytes (the method of torchtitan's
scripts/estimate/estimation.py).

    python -m fsdp_bench.worker.estimate --case CASE.json --out RESULT.json
    (started by `python -m fsdp_bench.fit --trace ...`, a subprocess that keeps the CLI torch-free)

Two steps run: the first, untracked, creates what a trained model holds at every later step
(AdamW's state is made lazily at its first step: without it the estimate was -20 % to -22 % at 2
ranks); the second runs under MemTracker, the tracker of a run's CPU probe (see `_tracker`). Its
peak (`peak_bytes`) is the measured peak's quantity (live tensor bytes over a later step), with
DDP's gradient buckets counted from the step's start, as a device allocator holds them (see
`_tracked_step`); for DDP a third step reads the peak as the measured CPU probe does, buckets
counted from their first write (`probe_peak_bytes`, equal to `peak_bytes` for every other strategy).

Run time, measured (2 CPU cores shared, torch 2.13): llama3_1b (1.24e9 parameters) fsdp2 at 512
simulated ranks, batch 1, seq 2048: 11.1 s here (8.4 s building and sharding), 13.1 s for the
process, 373 MiB resident (20.1 s under a load average of 5); see docs/beyond-one-machine.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

from fsdp_bench.plan.case import Case
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.results.io import read_json, write_json_atomic
from fsdp_bench.results.records import PeakEstimate
from fsdp_bench.worker.simulate import fake_rank0

METHOD = "fake tensors and a fake process group; one untracked step, then one tracked (fsdp_bench.worker.estimate)"


def refusal(case: Case) -> str | None:
    """Why this case cannot be estimated under fake tensors (None: it can)."""
    row = catalog_strategy(case.strategy)
    if row.memtracker_refuses:
        return (
            "FSDP1 cannot be traced: torch's MemTracker cannot follow its flat-parameter views "
            "(post-accumulate-grad hooks need leaf tensors), and the profiler's memory events, which "
            "measure FSDP1's CPU peak instead, see no allocation of a fake tensor"
        )
    if row.prepares_optimizer:
        return (
            "accelerate's prepare() moves the model with Module.to(), which cannot swap its parameters "
            "under fake tensors ('_apply(): Couldn't swap Embedding.weight'); it would then re-point the "
            "optimizer by data_ptr, which fake tensors do not have"
        )
    if case.device != "cpu":
        return f"the estimator runs the {case.device} case's step on CPU fake tensors only (device='cpu')"
    return None


def estimate_peak(case: Case) -> dict[str, Any]:
    """Rank 0's peak live tensor bytes over a later training step of `case` at world size
    case.nproc, on fake tensors (nothing of the model's size is allocated)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fsdp_bench.worker.gloo_reduce_scatter import copy_held_across_call
    from fsdp_bench.worker.setup import build_rank

    started = time.perf_counter()
    buckets: dict[int, Any] = {}  # DDP's gradient buckets by index, as its comm hook sees them
    ready: list[int] = []  # DDP's parameters in the order their gradients became ready
    collectives = _collectives_of(case)
    with (
        _simulated_world(case),
        FakeTensorMode(allow_non_fake_inputs=True),
        _fake_step_patches(buckets, ready),
        copy_held_across_call(collectives == GLOO_COLLECTIVES),
    ):
        if catalog_strategy(case.strategy).rebuilds_buckets:
            ready += ddp_ready_order(case)
        setup = build_rank(case, device=torch.device("cpu"), rank=0, world_size=case.nproc)
        built_s = time.perf_counter() - started
        if hasattr(setup.model, "reducer"):
            setup.model.reducer = _NoBucketRebuild(setup.model.reducer)
        setup.train_step(0)  # AdamW's state and DDP's first-iteration bookkeeping, untracked
        peak, categories, tracker = _tracked_step(setup, 1, *buckets.values())
        # As the measured CPU probe reads it: buckets counted only from backward's first write.
        probe_peak = _tracked_step(setup, 2)[0] if buckets else peak
    return {
        "peak_bytes": peak,
        "by_category_bytes": categories,
        "probe_peak_bytes": probe_peak,
        "ddp_bucket_bytes": sum(t.untyped_storage().nbytes() for t in buckets.values()),
        "world_size": case.nproc,
        "collectives": collectives,
        "tracker": tracker,
        "build_s": built_s,
        "estimate_s": time.perf_counter() - started,
        "method": METHOD,
    }


GLOO_COLLECTIVES = "gloo: each reduce-scatter holds a copy of its whole input"
FAKE_COLLECTIVES = "the fake process group: collectives allocate nothing"


def _collectives_of(case: Case) -> str:
    """What the case's collectives allocate, as the estimate counts it: a case on real ranks of
    the CPU runs gloo, a simulated one the fake process group (as the estimator itself does)."""
    return GLOO_COLLECTIVES if case.runs_gloo() else FAKE_COLLECTIVES


def _tracked_step(setup, step: int, *tensors) -> tuple[int, dict[str, int], str]:
    """Step `step` under the tracker: its peak, the peak's categories and the tracker's name. It
    frees by reference counting only, as the measured probe step does.

    DDP's buckets are allocated by its C++ reducer when it wraps the model; a tracker started later
    sees each only when backward first writes into it (the measured CPU peak counts them from
    there), while a device allocator holds them from the start: passed as `tensors`, they are
    registered with the tracker before the step, so the forward's and backward's peaks count them."""
    from fsdp_bench.worker.memory import peak_on

    tracker = _tracker(setup.model, setup.optimizer, *tensors)
    gc.collect()
    gc.disable()
    try:
        with tracker:
            setup.train_step(step, on_phase=lambda phase: phase == "after_backward" and tracker.reset_mod_stats())
    finally:
        gc.enable()
    peak, categories = peak_on(tracker, setup.device)
    return peak, categories, type(tracker).__name__


@contextlib.contextmanager
def _simulated_world(case: Case):
    """torchrun's variables for rank 0 of case.nproc, the fake process group (worker.simulate)
    and FSDP2's default mesh; all undone on the way out."""
    with fake_rank0(case):
        restore_mesh = _default_mesh_outside_fake_mode()
        try:
            yield
        finally:
            restore_mesh()


def _default_mesh_outside_fake_mode():
    """fully_shard builds its default device mesh from a rank tensor it reads back (.tolist()),
    which fake tensors cannot do: build that mesh before fake mode, as torchtitan's estimator
    does, and hand it to fully_shard. Returns the call that restores torch's own."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp._fully_shard import _fully_shard as module

    original = module._init_default_mesh
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    module._init_default_mesh = lambda: mesh

    def restore() -> None:
        module._init_default_mesh = original

    return restore


@contextlib.contextmanager
def _fake_step_patches(buckets: dict[int, Any], ready: list[int]):
    """The decisions the real step takes from tensor values, taken here without them.

    Transformers decides from the position ids' values whether a batch is packed: on real tensors
    it finds it is not and lets SDPA run causal with no mask; fake tensors have no values, so it
    would build a [batch, 1, seq, seq] mask per layer that SDPA saves for backward (+0.8 % on the
    Llama-style case at 2 ranks). The worker's models never pass position ids, so they count
    0..seq-1 in every row: never packed. DDP's constructor compares parameter shapes across ranks
    and broadcasts rank 0's weights, both reading values; with one simulated rank and fake values
    there is nothing to compare or send. DDP's simulation comm hook also keeps the buckets it is
    handed, for the tracker (`buckets`, by bucket index), and, once `ready` holds the order its
    gradients became ready (`ddp_ready_order`), DDP starts from the bucket layout a real DDP
    rebuilds to after its first step (`rebuilt_bucket_assignment`)."""
    import torch.distributed as dist
    from torch.nn.parallel import distributed as ddp_module

    from fsdp_bench.worker import strategies

    hand_back = strategies._bucket_unchanged

    def keep_bucket(state, bucket):
        buckets.setdefault(bucket.index(), bucket.buffer())
        return hand_back(state, bucket)

    patches = [
        (ddp_module, "_verify_param_shape_across_processes", lambda *a, **k: None),
        (ddp_module, "_sync_module_states", lambda *a, **k: None),
        (strategies, "_bucket_unchanged", keep_bucket),
        (dist, "_compute_bucket_assignment_by_size", rebuilt_bucket_assignment(ready)),
    ]
    with contextlib.suppress(ImportError):
        from transformers import masking_utils

        patches.append((masking_utils, "find_packed_sequence_indices", lambda position_ids: None))
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def ddp_ready_order(case: Case) -> list[int]:
    """DDP's parameters (their indices in registration order, those with gradients, as DDP lists
    them) in the order backward made their gradients ready, recorded with post-accumulate-grad
    hooks over a throwaway build's first step: it fires where DDP's reducer hooks fire, so it is
    the order the reducer rebuilds its buckets in. Reverse registration order was assumed before:
    held-out seed 200005 (tied qwen2, ddp at 3 real ranks, reduced last) read -4.55 %, since the
    first block's input norm is ready after its attention, beside the tied embedding, and opened
    a 641,280 B bucket before the embedding's backward. Call inside the fake world and patches."""
    import torch

    from fsdp_bench.worker.setup import build_rank

    setup = build_rank(case, device=torch.device("cpu"), rank=0, world_size=case.nproc)
    setup.model.reducer = _NoBucketRebuild(setup.model.reducer)
    params = [p for p in setup.model.module.parameters() if p.requires_grad]
    order: dict[int, None] = {}  # insertion-ordered; later micro-steps fire again, the first counts
    for i, p in enumerate(params):
        p.register_post_accumulate_grad_hook(lambda _, i=i: order.setdefault(i))
    setup.train_step(0)
    return list(order)


def rebuilt_bucket_assignment(ready: list[int]):
    """torch's bucket assignment as DDP's constructor calls it, made to give the layout its
    reducer rebuilds to after the first step (which the estimator cannot run: `_NoBucketRebuild`):
    the parameters taken in the order their gradients became ready (`ready`), the first bucket
    capped at 1 MiB and the rest at 25 MiB, as the rebuild calls it. On CPU the measured peak
    counts a bucket from its first write, so with the reduction in the last micro-step only
    (`--bench-grad-sync last`) one bucket of everything read up to +3.3 % over a real run's
    rebuilt buckets (dev seed 14, 2 gloo ranks). A rebuilt bucket need not be contiguous in
    registration order (seed 200005's second: the tied embedding and block 0's input norm), which
    per-bucket caps (`bucket_cap_mb_list`) cannot express; so the assignment itself is replaced.
    Without `ready` (before it is recorded, or another parameter list) torch's own runs."""
    import torch.distributed as dist

    from fsdp_bench.analysis.peak_moments import DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES

    original = dist._compute_bucket_assignment_by_size

    def assign(params, limits, expect_sparse_gradient=(), *rest):
        if rest or sorted(ready) != list(range(len(params))):
            return original(params, limits, expect_sparse_gradient, *rest)
        sparse = [expect_sparse_gradient[i] for i in ready] if expect_sparse_gradient else [False] * len(ready)
        limits = [DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_CAP_BYTES]  # torch's defaults, as the peak model counts them
        buckets, caps = original([params[i] for i in ready], limits, sparse, ready)
        # DDP reverses the constructor's assignment (registration order) into its reducer's order,
        # which here is already the ready order
        return list(reversed(buckets)), list(reversed(caps))

    return assign


class _NoBucketRebuild:
    """DDP's reducer, minus the bucket rebuild at the second forward: it broadcasts the bucket
    order from rank 0 by value (impossible on fake tensors) and reallocates buckets of the same
    total size, so the steps after it hold the same bytes as before."""

    def __init__(self, reducer) -> None:
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name: str):
        return getattr(self._reducer, name)


def _tracker(model, optimizer, *tensors):
    """MemTracker following the model, its optimizer and `tensors`: the tracker of a run's CPU
    probe (worker.memory), so both read the same moments. torch's FSDPMemTracker names FSDP2's
    buffers, but its post-backward wrapper keeps the group's last unsharded gradient referenced
    across the reduce-scatter; torch 2.15's FSDP2 frees it before, and FSDPMemTracker read the real
    2.15 gloo ranks' peaks +2.8 %, +3.1 % and +9.3 % high (dev seeds 371, 16, 7 at 2-3 ranks), where
    MemTracker read them to the byte. Under 2.13 the two gave the same bytes on those three and on
    seeds 16 and 83 at 64 and 512 simulated ranks."""
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(model, optimizer, *tensors)
    return tracker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsdp_bench.worker.estimate", description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, type=Path, help="case JSON (fsdp_bench.plan.case.Case)")
    parser.add_argument("--out", required=True, type=Path, help="where the estimate's JSON goes (must not exist)")
    args = parser.parse_args(argv)
    case = Case.from_dict(read_json(args.case))
    reason = refusal(case)
    result = {"status": "refused", "reason": reason} if reason else {"status": "ok", **estimate_peak(case)}
    write_json_atomic(args.out, {"case": case.to_dict(), **result}, shape=PeakEstimate)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
