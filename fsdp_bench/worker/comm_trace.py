"""Count the collective bytes of one real training step from the profiler trace.

    torchrun ... -m fsdp_bench.worker.comm_trace --case CASE.json --out DIR

Each rank builds the case's model and strategy with the worker's `build_rank`, runs one untimed step (so lazy
initialization is not counted), then one step under `torch.profiler` with shapes recorded, and
writes `DIR/trace-rank-N.json` with the bytes per collective (`comm_model.count_trace_bytes`)
and the raw (name, shapes) of every collective event. This is the ground truth the
communication model is validated against.
"""

from __future__ import annotations

import os

from fsdp_bench.plan.case import Case, hybrid_mesh_shape
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.results.io import read_json, write_json_atomic
from fsdp_bench.results.layout import CaseDir
from fsdp_bench.results.records import CollectiveTrace
from fsdp_bench.worker.args import parse_case_args

_COLLECTIVE_MARKERS = ("c10d::", "gloo:", "nccl:")


def collective_events(prof) -> list[tuple[str, list[list[int]]]]:
    return [
        (e.name, [list(s) for s in (e.input_shapes or [])])
        for e in prof.events()
        if e.name.startswith(_COLLECTIVE_MARKERS)
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_case_args("python -m fsdp_bench.worker.comm_trace", __doc__.splitlines()[0], argv)

    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from fsdp_bench.analysis.comm_model import count_trace_bytes
    from fsdp_bench.worker.setup import build_rank, init_process_group, select_device

    case = Case.from_dict(read_json(args.case))
    device = select_device(case, int(os.environ.get("LOCAL_RANK", 0)))
    init_process_group(case, device)
    rank = dist.get_rank()
    try:
        setup = build_rank(case, device=device, rank=rank, world_size=dist.get_world_size())
        setup.train_step(0)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities, record_shapes=True) as prof:
            setup.train_step(0)
        events = collective_events(prof)
        shard_group = dist.get_world_size()
        if catalog_strategy(case.strategy).hybrid:
            shard_group = hybrid_mesh_shape(
                case.mesh, world_size=shard_group, ranks_per_node=int(os.environ["LOCAL_WORLD_SIZE"])
            )[1]
        write_json_atomic(
            CaseDir(args.out).trace_file(rank),
            {
                "rank": rank,
                "world_size": dist.get_world_size(),
                "case_id": case.id,
                "bytes": count_trace_bytes(events, shard_group=shard_group),
                "events": [list(e) for e in events],  # JSON has no tuples: what a reader gets back
            },
            shape=CollectiveTrace,
            overwrite=True,
        )
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
