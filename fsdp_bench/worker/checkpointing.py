"""Checkpoint benchmark: save and load a full or sharded state dict (model and optimizer) after
the measured steps, timed and sized, and the resume check that comes with it.

Resume check: after saving at step N the run trains two more steps (the uninterrupted losses),
then loads the checkpoint into the same model and optimizer and trains the same two steps again
(the resumed losses). They match only if parameters *and* optimizer state (Adam moments, step
counts) came back exactly: the second step depends on the restored optimizer state.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from fsdp_bench.results.readings import CheckpointReading

RESUME_STEPS = 2


def _shared_folder() -> Path:
    """A fresh folder on rank 0's disk whose name every rank receives (single-node runs)."""
    name = [tempfile.mkdtemp(prefix="fsdp-bench-ckpt-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(name, src=0)
    return Path(name[0])


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _sync_time(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    return time.perf_counter()


def _peak(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def save_state(kind: str, model, optimizer, folder: Path, device: torch.device) -> None:
    from torch.distributed.checkpoint import save
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    full = kind == "full"
    # cpu_offload gathers to the host on rank 0 only; on a CPU device it would "move" tensors that
    # already live there and FSDP1 frees the gathered storage under them (rank 0 segfaults).
    offload = full and device.type == "cuda"
    model_sd, optim_sd = get_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=full, cpu_offload=offload)
    )
    if full:
        if dist.get_rank() == 0:  # gathered on rank 0 (host memory), written once
            torch.save({"model": model_sd, "optim": optim_sd}, folder / "full.pt")
    else:  # every rank writes its own shard in parallel
        save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(folder))


def load_state(kind: str, model, optimizer, folder: Path) -> None:
    from torch.distributed.checkpoint import load
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

    if kind == "full":
        state = torch.load(folder / "full.pt", map_location="cpu", weights_only=False)
        options = StateDictOptions(full_state_dict=True)
    else:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        load(state, checkpoint_id=str(folder))  # fills the sharded tensors in place
        options = StateDictOptions()
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"], options=options)


def run_checkpoint_benchmark(
    kind: str, model, optimizer, step: Callable[[int], torch.Tensor], next_step: int, device: torch.device
) -> CheckpointReading:
    """Save, continue, load, continue again; timings in seconds, size in bytes, peaks per phase."""
    from fsdp_bench.worker.memory import peak_rss_bytes

    folder = _shared_folder()
    try:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = _sync_time(device)
        save_state(kind, model, optimizer, folder, device)
        save_s = _sync_time(device) - t0
        save_peak = _peak(device)
        size = _folder_bytes(folder)
        uninterrupted = [float(step(next_step + k).item()) for k in range(RESUME_STEPS)]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = _sync_time(device)
        load_state(kind, model, optimizer, folder)
        load_s = _sync_time(device) - t0
        load_peak = _peak(device)
        resumed = [float(step(next_step + k).item()) for k in range(RESUME_STEPS)]
        dist.barrier()
    finally:
        if dist.get_rank() == 0:
            shutil.rmtree(folder, ignore_errors=True)
    return {
        "kind": kind,
        "save_s": save_s,
        "load_s": load_s,
        "size_bytes": size,
        "save_peak_allocated_bytes": save_peak,
        "load_peak_allocated_bytes": load_peak,
        "peak_rss_bytes": peak_rss_bytes(),
        "resume_losses_uninterrupted": uninterrupted,
        "resume_losses_resumed": resumed,
        "resume_max_abs_diff": max(abs(a - b) for a, b in zip(uninterrupted, resumed)),
    }
