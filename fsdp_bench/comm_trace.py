"""Count the collective bytes of one real training step from the profiler trace.

    torchrun ... -m fsdp_bench.comm_trace --case CASE.json --out DIR

Each rank builds the case's model and strategy like the worker, runs one untimed step (so lazy
initialization is not counted), then one step under `torch.profiler` with shapes recorded, and
writes `DIR/trace-rank-N.json` with the bytes per collective (`comm_model.count_trace_bytes`)
and the raw (name, shapes) of every collective event. This is the ground truth the
communication model is validated against.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fsdp_bench.case import HYBRID_STRATEGIES, Case, hybrid_mesh_shape
from fsdp_bench.results import read_json, write_json_atomic

_COLLECTIVE_MARKERS = ("c10d::", "gloo:", "nccl:")


def collective_events(prof) -> list[tuple[str, list[list[int]]]]:
    return [(e.name, [list(s) for s in (e.input_shapes or [])]) for e in prof.events()
            if e.name.startswith(_COLLECTIVE_MARKERS)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsdp_bench.comm_trace", description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from fsdp_bench.comm_model import count_trace_bytes
    from fsdp_bench.data import make_synthetic_batches
    from fsdp_bench.models.build import build_model, get_flavor
    from fsdp_bench.strategies import shard_model
    from fsdp_bench.training import Trainer, build_optimizer

    case = Case.from_dict(read_json(args.case))
    dist.init_process_group("gloo" if case.device == "cpu" else "nccl")
    rank = dist.get_rank()
    device = torch.device("cpu") if case.device == "cpu" else torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    try:
        flavor = get_flavor(case.model)
        batches = make_synthetic_batches(flavor, batch_size=case.batch_size, seq_len=case.seq_len,
                                         count=case.grad_accum, seed=case.seed, rank=rank, device=device)
        model = build_model(flavor, seed=case.seed, device=device)
        model, _ = shard_model(case, model, None, device=device)
        trainer = Trainer(case, model, build_optimizer(model.parameters(), case), device=device)
        trainer(batches)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities, record_shapes=True) as prof:
            trainer(batches)
        events = collective_events(prof)
        shard_group = dist.get_world_size()
        if case.strategy in HYBRID_STRATEGIES:
            shard_group = hybrid_mesh_shape(case.mesh, world_size=shard_group,
                                            ranks_per_node=int(os.environ["LOCAL_WORLD_SIZE"]))[1]
        write_json_atomic(args.out / f"trace-rank-{rank}.json",
                          {"rank": rank, "world_size": dist.get_world_size(), "case_id": case.id,
                           "bytes": count_trace_bytes(events, shard_group=shard_group), "events": events}, overwrite=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
