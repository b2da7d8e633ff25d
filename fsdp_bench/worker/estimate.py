"""Peak memory of rank 0 of one case, at any world size, without allocating it: the real model
and strategy (`setup.build_rank`) built and trained for one step under fake tensors and a fake
process group, with torch's memory tracker reading the peak of live tensor bytes (the method of
torchtitan's scripts/estimate/estimation.py).

    python -m fsdp_bench.worker.estimate --case CASE.json --out RESULT.json
    (started by `python -m fsdp_bench.fit --trace ...`, a subprocess that keeps the CLI torch-free)

The tracker is FSDPMemTracker for FSDP2 (it knows FSDP2's gather and reduce-scatter buffers) and
MemTracker otherwise; the peak is the same quantity as the measured CPU peak (MemTracker's live
tensor bytes) and as CUDA's max_memory_allocated, before the caching allocator's gap.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist

from fsdp_bench.analysis.simulation import simulated_environment
from fsdp_bench.plan.case import Case
from fsdp_bench.results.io import read_json, write_json_atomic


def estimate_peak(case: Case) -> dict[str, Any]:
    """Rank 0's peak live tensor bytes over one training step of `case` at world size
    case.nproc, on fake tensors (nothing of the model's size is allocated)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from fsdp_bench.worker.setup import build_rank

    started = time.perf_counter()
    saved_env = dict(os.environ)
    os.environ.update(simulated_environment(case))
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=case.nproc)
    mesh_factory = _default_mesh_outside_fake_mode()
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            setup = build_rank(case, device=torch.device("cpu"), rank=0, world_size=case.nproc)
            tracker = _tracker(setup.model, setup.optimizer)
            gc.collect()
            gc.disable()  # frees by reference counting only, as the measured probe step does
            try:
                with tracker:
                    setup.train_step(0, on_phase=lambda phase: phase == "after_backward" and tracker.reset_mod_stats())
            finally:
                gc.enable()
        per_device = next(iter(tracker.get_tracker_snapshot("peak").values()), {})
    finally:
        mesh_factory()
        dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved_env)
    categories = {(k.name.lower() if hasattr(k, "name") else str(k)): v for k, v in per_device.items() if k != "Total"}
    return {
        "peak_bytes": per_device.get("Total", 0),
        "by_category_bytes": categories,
        "world_size": case.nproc,
        "tracker": type(tracker).__name__,
        "estimate_s": time.perf_counter() - started,
        "method": "fake tensors and a fake process group, one training step (fsdp_bench.worker.estimate)",
    }


def _default_mesh_outside_fake_mode():
    """fully_shard builds its default device mesh from a rank tensor it reads back (.tolist()),
    which fake tensors cannot do: build that mesh before fake mode, as torchtitan's estimator
    does, and hand it to fully_shard. Returns the call that restores torch's own."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp._fully_shard import _fully_shard as module

    original = module._init_default_mesh
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    module._init_default_mesh = lambda: mesh

    def restore() -> None:
        module._init_default_mesh = original

    return restore


def _tracker(model, optimizer):
    """FSDPMemTracker on an FSDP2 root, MemTracker on anything else."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        return FSDPMemTracker(model, optimizer)
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    return tracker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsdp_bench.worker.estimate", description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, type=Path, help="case JSON (fsdp_bench.plan.case.Case)")
    parser.add_argument("--out", required=True, type=Path, help="where the estimate's JSON goes (must not exist)")
    args = parser.parse_args(argv)
    case = Case.from_dict(read_json(args.case))
    result = estimate_peak(case)
    write_json_atomic(args.out, {"case": case.to_dict(), **result})
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
