"""Rank 0 of an N-rank job on one device: memory measured for real, communication modelled.

    python -m fsdp_bench.worker.simulate --case CASE.json --out DIR      (the runner launches it)

A fake process group (`init_process_group("fake", store=FakeStore(), rank=0, world_size=N)`,
torch.testing._internal.distributed.fake_pg) lets every strategy shard, gather and reduce as if
N ranks were there: collectives return at once without moving data, but every buffer FSDP or
DDP allocates for them is allocated. So parameters, gradients, optimizer state, gather buffers
and activations are exactly what rank 0 holds at world size N, and the worker measures them as
usual (the CUDA allocator on a GPU, MemTracker on CPU). Step times measure compute only; the
communication that real ranks would add comes from `comm_model`, priced on each cluster of
`comm_model.CLUSTERS`, giving a predicted step time with and without overlap.

The worker does all the training and measuring (`fsdp_bench.worker.simulate` sets up the world
around it); this module is the pure part: the simulated rank's environment and the `simulation`
section added to `rank-0.json`.
"""

from __future__ import annotations

from typing import Any

from fsdp_bench.analysis.comm_model import CLUSTERS, GPUS_PER_NODE, comm_volume, model_units, predict_step_time_s
from fsdp_bench.plan.case import Case, hybrid_mesh_shape
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.plan.flavors import flavor_for
from fsdp_bench.results.records import Metrics, RankRecord


def simulated_environment(case: Case) -> dict[str, str]:
    """The torchrun variables rank 0 of the simulated job would see. A simulated node holds
    GPUS_PER_NODE ranks, which sets a hybrid strategy's default mesh."""
    return {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": str(case.nproc),
        "LOCAL_WORLD_SIZE": str(min(case.nproc, GPUS_PER_NODE)),
        "GROUP_RANK": "0",
    }


def simulation_summary(case: Case, record: RankRecord) -> dict[str, Any]:
    """Communication volume and predicted step times for a finished simulated record. Pure."""
    summary: dict[str, Any] = {
        "world_size": case.nproc,
        "method": "fake process group, rank 0",
        "compute_device": record.get("device_name"),
    }
    try:
        units = model_units(flavor_for(case.model))
    except (ValueError, KeyError, OSError) as exc:  # unknown model or Hugging Face model_type
        summary["comm_null_reason"] = f"no communication model for {case.model}: {exc}"
        return summary
    mesh = None
    if catalog_strategy(case.strategy).hybrid:
        mesh = hybrid_mesh_shape(case.mesh, world_size=case.nproc, ranks_per_node=min(case.nproc, GPUS_PER_NODE))
    volume = comm_volume(
        case.strategy, units, world_size=case.nproc, grad_accum=case.grad_accum, grad_sync=case.grad_sync, mesh=mesh
    )
    times = sorted(record.get("step_times_s") or [])
    compute_s = times[len(times) // 2] if times else None
    metrics: Metrics = {
        f"comm_{k}_per_step": v
        for k, v in volume.to_dict().items()
        if k.endswith("_bytes") and k != "largest_unit_bytes"
    }
    metrics["simulated_compute_s_per_step"] = compute_s
    clusters = {}
    for name, (intra, inter) in CLUSTERS.items():
        predicted = predict_step_time_s(compute_s or 0.0, volume, intra=intra, inter=inter)
        clusters[name] = predicted
        metrics[f"predicted_comm_s_per_step_{name}"] = predicted["comm_s"]
        if compute_s is not None:
            metrics[f"predicted_step_time_s_{name}_overlap"] = predicted["overlap_s"]
            metrics[f"predicted_step_time_s_{name}_no_overlap"] = predicted["no_overlap_s"]
    summary.update(volume=volume.to_dict(), mesh=list(mesh) if mesh else None, clusters=clusters, metrics=metrics)
    return summary
