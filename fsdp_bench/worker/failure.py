"""What a rank leaves behind when it fails: the status its exception means (oom, skipped, failed,
terminated), the error, the allocator's state at an OOM (with a snapshot) and after a failure."""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

import torch

from fsdp_bench.plan.case import Case
from fsdp_bench.results.layout import CaseDir
from fsdp_bench.results.readings import ErrorRecord
from fsdp_bench.results.records import RankRecord


class Terminated(SystemExit):
    """SIGTERM arrived: torchrun (or the runner) is stopping this rank because of another."""


def raise_on_sigterm(signum, frame) -> None:
    # Raising lets the rank write what it measured so far before it exits.
    raise Terminated(128 + signum)


def error_record(exc: BaseException) -> ErrorRecord:
    message = (
        str(exc)
        if not isinstance(exc, Terminated)
        else "stopped by SIGTERM (another rank failed or the case was stopped)"
    )
    return {
        "type": type(exc).__name__,
        "message": message[:2000],
        "traceback_tail": "".join(traceback.format_exception(exc))[-4000:],
        "time_unix": time.time(),
    }


def classify_exception(exc: BaseException) -> str:
    if isinstance(exc, Terminated):
        return "terminated"
    from fsdp_bench.worker.strategies import StrategyUnavailable

    if isinstance(exc, StrategyUnavailable):
        return "skipped"
    if isinstance(exc, torch.OutOfMemoryError):
        return "oom"
    return "failed"


def install_cuda_oom_observer(case: Case, record: RankRecord, out_dir: Path, rank: int) -> None:
    """On CUDA, catch the allocator's OOM at the moment it happens, before the stack unwinds and
    frees tensors: record the device's state then and dump the allocator snapshot (load it at
    https://pytorch.org/memory_viz; with `memory_snapshot` on it also holds allocation stacks).
    Both calls create the CUDA context, so this rank's device is selected first (else every rank
    would put a context on GPU 0)."""
    if case.device != "cuda":
        return
    if not torch.cuda.is_available():
        return  # run() reports the missing device as the case's error
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    want_snapshot = bool(getattr(case, "memory_snapshot", False))
    if want_snapshot:
        # Stacks in the dump need allocation history on from the start. If run() switches it on
        # again with its own settings, those win; switching it on twice is harmless.
        try:
            torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")
        except Exception as exc:  # the snapshot is a help, never a reason to fail
            record["oom_snapshot_error"] = f"cannot record memory history: {exc}"

    # c10's OutOfMemoryObserver(device, allocated, device_total, device_free): the caching
    # allocator passes the rejected request's size, the device's total (or the per-process
    # limit under set_per_process_memory_fraction) and the driver's free bytes. What the
    # allocator held then is its own reading, taken here.
    def on_oom(device: int, requested: int, device_limit: int, device_free: int) -> None:
        if "oom" in record:  # the first OOM is the one that matters
            return
        record["oom"] = {
            "device": device,
            "requested_bytes": requested,
            "device_limit_bytes": device_limit,
            "device_free_bytes": device_free,
            "time_unix": time.time(),
        }
        try:
            record["oom"]["allocated_bytes"] = torch.cuda.memory_allocated(device)
        except Exception:
            pass
        # torchtitan's habit: an OOM always leaves the allocator's state behind.
        path = CaseDir(Path(out_dir)).oom_snapshot_file(rank)
        try:
            torch.cuda.memory._dump_snapshot(str(path))
            record["oom"]["snapshot"] = path.name
        except Exception as exc:
            record["oom_snapshot_error"] = f"{type(exc).__name__}: {exc}"

    try:
        torch._C._cuda_attach_out_of_memory_observer(on_oom)
    except (AttributeError, RuntimeError) as exc:
        record["oom_observer_error"] = f"{type(exc).__name__}: {exc}"


def record_memory_at_failure(record: RankRecord) -> None:
    """The allocator's readings after an OOM or error: what was held when the rank gave up."""
    try:
        from fsdp_bench.worker.memory import read_memory

        device = torch.device(record["device"]) if record.get("device") else torch.device("cpu")
        reading = read_memory(device)
        if device.type == "cuda":
            stats = torch.cuda.memory_stats(device)
            reading["num_ooms"] = stats.get("num_ooms")
            reading["num_alloc_retries"] = stats.get("num_alloc_retries")
        record["memory_at_failure"] = reading
    except Exception as exc:  # a broken device must not hide the original error
        record["memory_at_failure"] = {"error": f"{type(exc).__name__}: {exc}"}
