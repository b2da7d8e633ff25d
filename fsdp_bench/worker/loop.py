"""One rank of one case, trained and measured: set up (`setup.build_rank`), warmup and measured
steps timed between device synchronizations, then the record's measurements, the optional
checkpoint benchmark and the untimed probe steps. `run(case)` also works in-process at world
size 1 (gloo, in-memory store)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from fsdp_bench.plan.case import Case
from fsdp_bench.results.layout import CaseDir
from fsdp_bench.results.records import RankRecord
from fsdp_bench.worker.record import StageTracker, new_record
from fsdp_bench.worker.setup import Rank, build_rank, init_process_group, select_device


def run(
    case: Case, *, record: RankRecord | None = None, out_dir: Path | None = None, stages: StageTracker | None = None
) -> RankRecord:
    """Run one rank of `case`, filling and returning its record. Raises on failure.

    `out_dir` is the case folder: profiler traces and memory snapshots go there (None: not saved).
    """
    from fsdp_bench.worker.memory import peak_rss_bytes, start_memory_history

    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    record = record if record is not None else new_record(case, rank=rank, world_size=world_size)
    stages = stages or StageTracker(record, case, rank)
    stages.enter("init")
    device = select_device(case, int(os.environ.get("LOCAL_RANK", 0)))
    stages.device = device
    owns_pg = init_process_group(case, device)
    try:
        record["device"] = str(device)
        record["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        if case.memory_snapshot:
            record["memory_snapshot_recording"] = start_memory_history(device)
        setup = build_rank(case, device=device, rank=rank, world_size=world_size, record=record, stages=stages)
        if stages.faults.get("step"):  # FSDP_BENCH_FAULTS KIND@step:RANK, a planted cause
            from fsdp_bench.worker.faults import plant

            plant(stages.faults["step"], setup.model, setup.optimizer)
        run_timed_steps(setup, record, stages, out_dir=out_dir)
        guard = _checkpoint_and_probes(setup, record, stages, out_dir=out_dir)
        stages.enter("end")
        record["memory"]["peak_rss_bytes"] = peak_rss_bytes()
        stages.done("end")
        # After a failed probe a peer may still wait in a collective: no barrier, no teardown of
        # the group; the rank leaves once its record is written (see worker.probe_guard).
        owns_pg = owns_pg and not guard.must_leave
        if not guard.must_leave:
            dist.barrier()
        record["status"] = "ok"
        return record
    finally:
        if owns_pg and dist.is_initialized():
            dist.destroy_process_group()


def _checkpoint_and_probes(setup: Rank, record: RankRecord, stages: StageTracker, *, out_dir: Path | None):
    """After the timed steps: the optional checkpoint benchmark, then the untimed probe steps
    (their ProbeGuard is returned: it says whether the process group is still safe to use)."""
    from fsdp_bench.worker.probes import run_probes

    case = setup.case
    if case.checkpoint != "none":
        from fsdp_bench.worker.checkpointing import run_checkpoint_benchmark

        stages.enter("checkpoint")
        done_steps = case.warmup + len(record["step_times_s"])
        record["checkpoint"] = run_checkpoint_benchmark(
            case.checkpoint, setup.model, setup.optimizer, setup.train_step, done_steps, setup.device
        )
    stages.enter("memory_probe")
    return run_probes(
        case,
        setup.model,
        setup.optimizer,
        lambda on_phase=None: setup.train_step(0, on_phase),
        record=record,
        device=setup.device,
        rank=setup.rank,
        out_dir=out_dir,
        fault=stages.faults.get("probe_step"),
    )


def run_timed_steps(setup: Rank, record: RankRecord, stages: StageTracker, *, out_dir: Path | None) -> None:
    """Warmup then measured optimizer steps, each timed between device synchronizations; then
    what the steps left behind (peaks, whether parameters changed, update norms, utilization)."""
    from fsdp_bench.worker.faults import SlowSteps
    from fsdp_bench.worker.gpu_util import GpuUtilSampler
    from fsdp_bench.worker.memory import MemoryTimeline, reset_peak
    from fsdp_bench.worker.training import param_fingerprint
    from fsdp_bench.worker.update_norms import UpdateNorms

    case, device = setup.case, setup.device
    fingerprint_before = param_fingerprint(setup.model)
    timeline = MemoryTimeline(device)
    norms = UpdateNorms(setup.model, take=lambda step: step in case.update_norm_steps)
    gpu_util = GpuUtilSampler(device)
    reset_peak(device)
    # FSDP_BENCH_FAULTS slow@measure:RANK[:FRACTION]; faults_for says which kind the stage's last one is
    slow = SlowSteps(stages.slow_fraction) if stages.faults.get("measure") == "slow" else None
    agreed: list[float] = []  # every rank's slowest-rank step times, for the stop decision
    i = 0
    while True:
        stage = "first_step" if i == 0 else ("warmup" if i < case.warmup else "measure")
        if stage != record["stage"]:
            stages.enter(stage)
        measured = i >= case.warmup
        if i == case.warmup:
            reset_peak(device)  # the reported peak is the measured steps' peak
            gpu_util.__enter__()
        norms.before_step(i)  # a host copy of the local parameters: warmup steps only
        timeline.step = i
        # Phase samples (after each forward, backward and optimizer step) only in warmup steps:
        # each reads the allocator's counters, which does not belong inside a measured step.
        # None keeps the step bare (always on CPU, where there is no allocator to read).
        on_phase = timeline.sample if timeline.enabled and not measured else None
        _sync(device)
        timeline.sample("step_start")  # before t0: the sample's allocator reads are not the step's time
        if measured:
            gpu_util.resume()  # utilization covers the timed steps, not the bookkeeping between them
        t0 = time.perf_counter()
        loss = setup.train_step(i, on_phase)
        _sync(device)
        if measured and slow:  # inside the timed step: the case is really slower
            slow.sleep(time.perf_counter() - t0)
        elapsed = time.perf_counter() - t0
        if measured:
            gpu_util.pause()
        timeline.sample("step_end")
        (record["warmup_step_times_s"] if i < case.warmup else record["step_times_s"]).append(elapsed)
        # .item() after the timed region: the device already finished this step.
        record["losses"].append(float(loss.item()))
        norms.after_step(i)
        for done, at in (("first_step", 0), ("warmup", case.warmup - 1)):
            if i == at:
                stages.done(done)
        i += 1
        if measured and _stop_measuring(case, device, agreed, elapsed, record):
            break
    gpu_util.__exit__(None, None, None)
    record["params_changed"] = param_fingerprint(setup.model) != fingerprint_before
    _record_after_steps(setup, record, out_dir, norms=norms, gpu_util=gpu_util, timeline=timeline)


def _record_after_steps(setup: Rank, record: RankRecord, out_dir: Path | None, *, norms, gpu_util, timeline) -> None:
    record["update_norms"] = norms.norms
    record["update_norm_steps"] = norms.steps
    if norms.reason:
        record["update_norms_null_reason"] = norms.reason
    elif not norms.norms:
        record["update_norms_null_reason"] = "no warmup step: update norms are taken on warmup steps only"
    record["gpu_util"] = gpu_util.result()
    if timeline.enabled:
        record["memory_timeline"] = timeline.samples
    _record_memory_after_steps(setup, record, out_dir)


def _stop_measuring(case: Case, device: torch.device, agreed: list[float], elapsed: float, record: RankRecord) -> bool:
    """Whether this was the last measured step, decided alike on every rank: the step's slowest
    rank time is agreed by an all_reduce (outside the timed region), so every rank sees the same
    times and reaches the same verdict after the same step (a rank that stopped alone would
    leave its peers waiting in the next step's collectives)."""
    from fsdp_bench.analysis.adaptive import measurement_stop_reason

    if case.target_ci_pct > 0 and dist.is_initialized() and dist.get_world_size() > 1:
        slowest = torch.tensor([elapsed], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        elapsed = float(slowest.item())
    agreed.append(elapsed)
    reason = measurement_stop_reason(
        agreed, min_steps=case.steps, target_pct=case.target_ci_pct, cap_s=case.measure_cap_s
    )
    if reason is not None:
        record["measurement_stop_reason"] = reason
    return reason is not None


def _record_memory_after_steps(setup: Rank, record: RankRecord, out_dir: Path | None) -> None:
    from fsdp_bench.worker.memory import allocator_health, dump_memory_snapshot, read_memory, stop_memory_history

    device = setup.device
    mem = read_memory(device)
    record["memory"].update(
        peak_allocated_bytes=mem.get("max_allocated_bytes"),
        peak_reserved_bytes=mem.get("max_reserved_bytes"),
        method="cuda_caching_allocator" if device.type == "cuda" else "mem_tracker_probe_step",
    )
    record.update(setup.trainer.summary())
    record["allocator"] = allocator_health(device)
    if setup.case.memory_snapshot and out_dir is not None and device.type == "cuda":
        record["memory_snapshot"] = dump_memory_snapshot(CaseDir(Path(out_dir)).memory_snapshot_file(setup.rank))
    if record.get("memory_snapshot_recording"):
        stop_memory_history()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
