"""The torchrun entry point: one rank of one case.

    python -m torch.distributed.run ... -m fsdp_bench.worker --case CASE.json --out DIR

Each rank builds the model, applies the strategy, builds the optimizer where the case says,
trains warmup + measured steps, and writes `DIR/rank-N.json` atomically, whatever happens.
Importing this module has no side effects; `run(case)` also works in-process at world size 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from fsdp_bench import faults
from fsdp_bench.case import Case
from fsdp_bench.results import SCHEMA_VERSION, read_json, utc_now, write_json_atomic

# Stages in the order a rank passes them; a failure records the stage it happened in.
STAGES = ("init", "data", "model", "shard", "optimizer", "first_step", "warmup", "measure", "checkpoint",
          "memory_probe", "end")
# Stages after which memory is read, with the label the ODSC tutorial's logs use.
STAGE_LABELS = {
    "data": "after data creation",
    "model": "after model creation",
    "shard": "after sharding",
    "optimizer": "after optimizer creation",
    "first_step": "after first step",
    "warmup": "after warmup",
    "end": "at the end",
}


def rank_file(out_dir: Path, rank: int) -> Path:
    return Path(out_dir) / f"rank-{rank}.json"


def pid_file(out_dir: Path, rank: int) -> Path:
    return Path(out_dir) / f"rank-{rank}.pid"


def new_record(case: Case, *, rank: int, world_size: int) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "case_id": case.id,
        "rank": rank,
        "world_size": world_size,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "status": "running",
        "stage": "init",
        "error": None,
        "started_utc": utc_now(),
        "stages": [],
        "warmup_step_times_s": [],
        "step_times_s": [],
        "losses": [],
        "memory": {},
    }


class _Stages:
    """Moves the record through STAGES, injecting contributor faults and reading memory."""

    def __init__(self, record: dict[str, Any], case: Case, rank: int) -> None:
        self.record = record
        self.rank = rank
        self.faults = faults.faults_for(case.id, rank)
        self.device = None

    def enter(self, stage: str) -> None:
        self.record["stage"] = stage
        # Wall clock, so the parent can split a case's time into launch, training, probes, teardown.
        self.record.setdefault("stage_started_unix", {})[stage] = time.time()
        save_progress(self.record)
        kind = self.faults.get(stage)
        if kind:
            faults.inject(kind, stage, self.device)

    def done(self, stage: str) -> None:
        if stage not in STAGE_LABELS or self.device is None:
            return
        from fsdp_bench.memory import read_memory

        reading = {"stage": stage, "label": STAGE_LABELS[stage], "rank": self.rank, **read_memory(self.device)}
        self.record["stages"].append(reading)
        if self.rank == 0:
            print(_format_stage_line(reading), flush=True)


def _format_stage_line(reading: dict[str, Any]) -> str:
    from fsdp_bench.metrics import GIB

    parts = [f"[fsdp-bench] rank {reading['rank']} {reading['label']}:"]
    for key in ("allocated_bytes", "max_allocated_bytes", "reserved_bytes", "max_reserved_bytes", "rss_bytes"):
        if reading.get(key) is not None:
            parts.append(f"{key.replace('_bytes', '_gib')}={reading[key] / GIB:.3f}")
    return " ".join(parts)


def _device_for(case: Case, local_rank: int):
    import torch

    if case.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("case asks for cuda but torch.cuda.is_available() is False")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _init_process_group(case: Case, device) -> bool:
    """Join the job's process group; True when this call created it (so it must destroy it)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timedelta(seconds=case.pg_timeout_s)
    if "RANK" in os.environ:
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, timeout=timeout, **kwargs)
    else:  # in-process, world size 1
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return True


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(case: Case, *, record: dict[str, Any] | None = None, out_dir: Path | None = None) -> dict[str, Any]:
    """Run one rank of `case`, filling and returning its record. Raises on failure.

    `out_dir` is the case folder: profiler traces and memory snapshots go there (None: not saved).
    """
    import torch
    import torch.distributed as dist

    from fsdp_bench.data import make_batch_source
    from fsdp_bench.gpu_util import GpuUtilSampler
    from fsdp_bench.measurement import UpdateNorms, run_probes
    from fsdp_bench.memory import (MemoryTimeline, allocator_health, dump_memory_snapshot, peak_rss_bytes,
                                   read_memory, reset_peak, rss_bytes, start_memory_history, stop_memory_history)
    from fsdp_bench.models.build import build_model, count_parameters, get_flavor
    from fsdp_bench.probes import attention_shape, count_matmul_params
    from fsdp_bench.strategies import repoint_optimizer, shard_model
    from fsdp_bench.training import Trainer, build_optimizer, optimizer_matches_model, param_fingerprint

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    record = record if record is not None else new_record(case, rank=rank, world_size=world_size)
    stages = _Stages(record, case, rank)

    stages.enter("init")
    device = _device_for(case, local_rank)
    stages.device = device
    owns_pg = _init_process_group(case, device)
    try:
        record["device"] = str(device)
        record["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        if case.memory_snapshot:
            record["memory_snapshot_recording"] = start_memory_history(device)
        flavor = get_flavor(case.model)

        stages.enter("data")
        source = make_batch_source(flavor, data=case.data, batch_size=case.batch_size, seq_len=case.seq_len,
                                   grad_accum=case.grad_accum, seed=case.seed, rank=rank,
                                   world_size=world_size, device=device)
        record["data"] = source.info
        stages.done("data")

        stages.enter("model")
        construction = {"rss_before_bytes": rss_bytes(), "t0": time.perf_counter()}
        # Hugging Face models are built on the meta device and materialized after sharding.
        model = build_model(flavor, seed=case.seed, device=device, meta=flavor.family == "hf")
        record["n_params"] = count_parameters(model)
        first_param = next(model.parameters())
        record["dtype"] = str(first_param.dtype).removeprefix("torch.")
        record["param_bytes"] = first_param.element_size()
        # The peak-FLOPs column MFU uses: mixed precision computes in its low dtype; fp32 matmuls
        # run as TF32 on CUDA only when torch allows it.
        tf32 = device.type == "cuda" and first_param.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
        low = {"bf16": "bfloat16", "fp16": "float16"}.get(case.precision)
        record["compute_dtype"] = low or ("tf32" if tf32 else record["dtype"])
        record["flops"] = {"formula_inputs": {"n_matmul_params": count_matmul_params(model), **attention_shape(model)}}
        stages.done("model")

        optimizer = None
        if case.optimizer_timing != "after_shard":
            stages.enter("optimizer")
            before = {n: p for n, p in model.named_parameters()}
            optimizer = build_optimizer(model.parameters(), case)

        stages.enter("shard")
        model, optimizer = shard_model(case, model, optimizer, device=device)
        record["construction"] = {
            "method": "meta device, materialized after sharding" if flavor.family == "hf" else "full model per rank",
            "rss_before_bytes": construction["rss_before_bytes"], "rss_after_bytes": rss_bytes(),
            "peak_rss_bytes": peak_rss_bytes(), "build_and_shard_s": time.perf_counter() - construction["t0"]}
        stages.done("shard")

        if case.optimizer_timing == "after_shard":
            stages.enter("optimizer")
            optimizer = build_optimizer(model.parameters(), case)
        elif case.optimizer_timing == "before_shard_fixed" and case.strategy != "accelerate_fsdp2":
            record["optimizer_params_repointed"] = repoint_optimizer(optimizer, before, model)
        stages.done("optimizer")
        record["optimizer_params_match_model"] = optimizer_matches_model(optimizer, model)
        fingerprint_before = param_fingerprint(model)
        trainer = Trainer(case, model, optimizer, device=device)

        timeline = MemoryTimeline(device)
        on_phase = timeline.sample if timeline.enabled else None  # None: the CPU step stays bare
        norms = UpdateNorms(model)
        gpu_util = GpuUtilSampler(device)
        reset_peak(device)
        for i in range(case.warmup + case.steps):
            stage = "first_step" if i == 0 else ("warmup" if i < case.warmup else "measure")
            if stage != record["stage"]:
                stages.enter(stage)
            if i == case.warmup:
                reset_peak(device)  # the reported peak is the measured steps' peak
                gpu_util.__enter__()
            norms.before_step()  # untimed: a host copy of the local parameters
            timeline.step = i
            _sync(device)
            t0 = time.perf_counter()
            timeline.sample("step_start")
            loss = trainer.step(source.batches(i), on_phase=on_phase)
            _sync(device)
            elapsed = time.perf_counter() - t0
            (record["warmup_step_times_s"] if i < case.warmup else record["step_times_s"]).append(elapsed)
            # .item() after the timed region: the device already finished this step.
            record["losses"].append(float(loss.item()))
            norms.after_step()
            if i == 0:
                stages.done("first_step")
            if i == case.warmup - 1:
                stages.done("warmup")
        gpu_util.__exit__(None, None, None)

        mem = read_memory(device)
        record["memory"].update(
            peak_allocated_bytes=mem.get("max_allocated_bytes"),
            peak_reserved_bytes=mem.get("max_reserved_bytes"),
            method="cuda_caching_allocator" if device.type == "cuda" else "mem_tracker_probe_step",
        )
        record["params_changed"] = param_fingerprint(model) != fingerprint_before
        record.update(trainer.summary())
        record["update_norms"] = norms.norms
        if norms.reason:
            record["update_norms_null_reason"] = norms.reason
        record["gpu_util"] = gpu_util.result()
        if timeline.enabled:
            record["memory_timeline"] = timeline.samples
        record["allocator"] = allocator_health(device)
        if case.memory_snapshot and out_dir is not None and device.type == "cuda":
            record["memory_snapshot"] = dump_memory_snapshot(Path(out_dir) / f"memory_snapshot_rank{rank}.pickle")
        if record.get("memory_snapshot_recording"):
            stop_memory_history()
        if case.checkpoint != "none":
            from fsdp_bench.checkpointing import run_checkpoint_benchmark

            stages.enter("checkpoint")
            record["checkpoint"] = run_checkpoint_benchmark(
                case.checkpoint, model, optimizer, lambda i: trainer(source.batches(i)),
                case.warmup + case.steps, device)

        stages.enter("memory_probe")
        run_probes(case, model, optimizer, lambda on_phase=None: trainer.step(source.batches(0), on_phase),
                   record=record, device=device, rank=rank, out_dir=out_dir)

        stages.enter("end")
        record["memory"]["peak_rss_bytes"] = peak_rss_bytes()
        stages.done("end")
        dist.barrier()
        record["status"] = "ok"
        return record
    finally:
        if owns_pg and dist.is_initialized():
            dist.destroy_process_group()


# --- main(): whatever happens, each rank leaves a record -----------------------------------------

_PROGRESS_FILE: Path | None = None  # set by main(); run() in-process writes no progress


def save_progress(record: dict[str, Any]) -> None:
    """Write the record as it stands (status `running`) when the rank enters a stage, so a rank
    killed by a signal still leaves the stage it reached and the steps it finished. Between
    stages only, never inside a timed step."""
    if _PROGRESS_FILE is not None:
        try:
            write_json_atomic(_PROGRESS_FILE, record, overwrite=True)
        except OSError:
            pass  # a full disk must not turn a healthy case into a failed one


class Terminated(SystemExit):
    """SIGTERM arrived: torchrun (or the runner) is stopping this rank because of another."""


def _raise_on_sigterm(signum, frame) -> None:
    # Raising lets the rank write what it measured so far before it exits.
    raise Terminated(128 + signum)


def _error_record(exc: BaseException) -> dict[str, Any]:
    message = str(exc) if not isinstance(exc, Terminated) else "stopped by SIGTERM (another rank failed or the case was stopped)"
    return {
        "type": type(exc).__name__,
        "message": message[:2000],
        "traceback_tail": "".join(traceback.format_exception(exc))[-4000:],
        "time_unix": time.time(),
    }


def _classify_exception(exc: BaseException) -> str:
    if isinstance(exc, Terminated):
        return "terminated"
    import torch

    from fsdp_bench.strategies import StrategyUnavailable

    if isinstance(exc, StrategyUnavailable):
        return "skipped"
    if isinstance(exc, torch.OutOfMemoryError):
        return "oom"
    return "failed"


def _install_cuda_oom_observer(case: Case, record: dict[str, Any], out_dir: Path, rank: int) -> None:
    """On CUDA, catch the allocator's OOM at the moment it happens, before the stack unwinds and
    frees tensors: record the device's state then and dump the allocator snapshot (load it at
    https://pytorch.org/memory_viz; with `memory_snapshot` on it also holds allocation stacks).
    Both calls create the CUDA context, so this rank's device is selected first (else every rank
    would put a context on GPU 0)."""
    if case.device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        return  # run() reports the missing device as the case's error
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    want_snapshot = bool(getattr(case, "memory_snapshot", False))
    if want_snapshot:
        # Stacks in the dump need allocation history on from the start. If run() switches it on
        # again with its own settings, those win; switching it on twice is harmless.
        try:
            torch.cuda.memory._record_memory_history(max_entries=100_000)
        except Exception as exc:  # the snapshot is a help, never a reason to fail
            record["oom_snapshot_error"] = f"cannot record memory history: {exc}"

    def on_oom(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        if "oom" in record:  # the first OOM is the one that matters
            return
        record["oom"] = {"device": device, "requested_bytes": alloc, "allocated_bytes": device_alloc,
                         "device_free_bytes": device_free, "time_unix": time.time()}
        # torchtitan's habit: an OOM always leaves the allocator's state behind.
        path = Path(out_dir) / f"oom-snapshot-rank{rank}.pickle"
        try:
            torch.cuda.memory._dump_snapshot(str(path))
            record["oom"]["snapshot"] = path.name
        except Exception as exc:
            record["oom_snapshot_error"] = f"{type(exc).__name__}: {exc}"

    try:
        torch._C._cuda_attach_out_of_memory_observer(on_oom)
    except (AttributeError, RuntimeError) as exc:
        record["oom_observer_error"] = f"{type(exc).__name__}: {exc}"


def _memory_at_failure(record: dict[str, Any]) -> None:
    """The allocator's readings after an OOM or error: what was held when the rank gave up."""
    try:
        import torch

        from fsdp_bench.memory import read_memory

        device = torch.device(record["device"]) if record.get("device") else torch.device("cpu")
        reading = read_memory(device)
        if device.type == "cuda":
            stats = torch.cuda.memory_stats(device)
            reading["num_ooms"] = stats.get("num_ooms")
            reading["num_alloc_retries"] = stats.get("num_alloc_retries")
        record["memory_at_failure"] = reading
    except Exception as exc:  # a broken device must not hide the original error
        record["memory_at_failure"] = {"error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    global _PROGRESS_FILE
    parser = argparse.ArgumentParser(prog="python -m fsdp_bench.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, type=Path, help="case JSON written by the runner")
    parser.add_argument("--out", required=True, type=Path, help="folder for rank-N.json")
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    args.out.mkdir(parents=True, exist_ok=True)
    pid_file(args.out, rank).write_text(str(os.getpid()))
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    case = Case.from_dict(read_json(args.case))
    record = new_record(case, rank=rank, world_size=world_size)
    _PROGRESS_FILE = rank_file(args.out, rank)
    try:
        _install_cuda_oom_observer(case, record, args.out, rank)
        run(case, record=record, out_dir=args.out)
        return 0
    except BaseException as exc:
        record["status"] = _classify_exception(exc)
        record["error"] = _error_record(exc)
        if record["status"] in ("oom", "failed"):
            _memory_at_failure(record)
        if record["status"] == "skipped":
            return 0
        raise
    finally:
        record["ended_utc"] = utc_now()
        write_json_atomic(rank_file(args.out, rank), record, overwrite=True)
        _PROGRESS_FILE = None


def _entry() -> None:
    from torch.distributed.elastic.multiprocessing.errors import record as record_errors

    sys.exit(record_errors(main)())


if __name__ == "__main__":
    _entry()
