"""Communication / compute / optimizer / host time per step from a torch.profiler trace.

The trace covers a few extra, untimed steps run after the measured ones (opt-in with
`--bench-profile`), each a `ProfilerStep#N` of a profiler schedule, is saved in TensorBoard's format in the case folder, and is reduced here to
per-step times. The reduction (`summarize_events`) is pure, so it is unit-tested on hand-made
events; `profile_steps` is the only part that runs torch.

How events are classified:
- communication: on GPU the NCCL kernels; on CPU with gloo the `gloo:<collective>` spans that
  gloo's worker threads record for each collective's asynchronous work.
- compute: on GPU every other kernel; on CPU every `aten::` op on a thread that is not running
  collectives (the training thread).
- optimizer: the `Optimizer.step#...` spans the optimizer records.
- step windows: the `fsdp_bench.step` record_function spans; everything is clipped to them.
Exposed communication = |union(comm) - union(compute)|, not a sum of self-times.
data_host_s_per_step = step time covered by neither compute nor communication (Python, hooks,
data handling, waiting on a collective's result).
device_busy_s_per_step = the union of every device interval (kernels, copies, memsets) in the
step windows: the same reduction (`analysis.busy.device_busy`) as the busy probe's
(`probe_step_events` + `busy_from_events`, run by the step-parts probe beside `attribute_events`,
which gives every CUDA case its `gpu_busy_pct` and every case its parts).
"""

from __future__ import annotations

import gzip
import json
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_bench.analysis.attribution import COLLECTIVE_ORDER
from fsdp_bench.analysis.busy import NO_CUDA_KERNELS, device_busy
from fsdp_bench.analysis.intervals import clip, exposed_length, total_length, union
from fsdp_bench.plan.case import PARTS_PROBE_PLAIN_STEPS, PARTS_PROBE_WINDOWS, PROFILER_WARMUP_STEPS
from fsdp_bench.results.readings import BusyProbe, ProfileSummary, StepParts

STEP_MARKER = "fsdp_bench.step"
DATA_MARKER = "fsdp_bench.data"  # the batch fetch inside a step (worker.setup.Rank.train_step)
# A planted collective delay (FSDP_BENCH_FAULTS comm_delay@step:RANK) runs inside a span of this
# prefix and the collective's name: it stands for a slow link, so it is read as that collective.
PLANTED_COMM_PREFIX = "fsdp_bench.fault.comm_delay:"


@dataclass(frozen=True)
class TraceEvent:
    """The part of a profiler event the summary needs; times in seconds."""

    name: str
    start_s: float
    end_s: float
    thread: int = 0
    on_device: bool = False  # a GPU kernel rather than a CPU op


def collective_kind(name: str) -> str | None:
    """The collective a communication event performs, or None when it is not communication."""
    low = name.lower()
    if not (low.startswith("gloo:") or "nccl" in low or low.startswith(PLANTED_COMM_PREFIX)):
        return None
    flat = low.replace("_", "").replace(" ", "")
    for kind, keys in (
        ("all_gather", ("allgather",)),
        ("reduce_scatter", ("reducescatter",)),
        ("all_reduce", ("allreduce",)),
        ("broadcast", ("broadcast",)),
        ("all_to_all", ("alltoall",)),
        ("send_recv", ("sendrecv", "send", "recv")),
    ):
        if any(k in flat for k in keys):
            return kind
    return "other"


def summarize_events(events: Iterable[TraceEvent], *, device_type: str) -> ProfileSummary:
    """Per-step seconds of communication (total, exposed, per collective), compute, optimizer
    and host time, averaged over the profiled steps. A CUDA rank's events without a kernel give
    no summary (NO_CUDA_KERNELS), not the CPU method's."""
    events = list(events)
    steps = union((e.start_s, e.end_s) for e in events if e.name == STEP_MARKER and not e.on_device)
    if not steps:
        return {"steps_profiled": 0, "reason": f"no {STEP_MARKER!r} spans in the trace"}
    on_gpu = any(e.on_device for e in events)
    if device_type == "cuda" and not on_gpu:
        return {"steps_profiled": 0, "reason": NO_CUDA_KERNELS}
    comm = [(e, collective_kind(e.name)) for e in events]
    comm = [(e, k) for e, k in comm if k is not None]
    comm_threads = _comm_threads(events)
    if on_gpu:
        comm_iv = [(e.start_s, e.end_s) for e, _ in comm if e.on_device]
        compute_iv = [(e.start_s, e.end_s) for e in events if e.on_device and collective_kind(e.name) is None]
    else:
        comm_iv = [(e.start_s, e.end_s) for e, _ in comm]
        compute_iv = [
            (e.start_s, e.end_s)
            for e in events
            if e.name.startswith("aten::") and e.thread not in comm_threads and not e.on_device
        ]
    comm_iv, compute_iv = clip(comm_iv, steps), clip(compute_iv, steps)
    optimizer_iv = clip(((e.start_s, e.end_s) for e in events if e.name.startswith("Optimizer.step#")), steps)
    n = len(steps)
    step_s = total_length(steps)
    by_kind = {}
    for kind in COLLECTIVE_ORDER:
        iv = [(e.start_s, e.end_s) for e, k in comm if k == kind and (e.on_device or not on_gpu)]
        if iv:
            by_kind[kind] = total_length(clip(iv, steps)) / n
    return {
        "steps_profiled": n,
        "step_s_per_step": step_s / n,
        "comm_total_s_per_step": total_length(comm_iv) / n,
        "comm_exposed_s_per_step": exposed_length(comm_iv, compute_iv) / n,
        "comm_by_kind_s_per_step": by_kind,
        "compute_s_per_step": total_length(compute_iv) / n,
        "optimizer_s_per_step": total_length(optimizer_iv) / n,
        "data_host_s_per_step": (step_s - total_length(compute_iv + comm_iv)) / n,
        "device_busy_s_per_step": busy_from_events(events).get("busy_s_per_step") if on_gpu else None,
        "method": "cuda kernels" if on_gpu else "cpu ops (gloo worker threads for collectives)",
    }


def _comm_threads(events: list[TraceEvent]) -> set[int]:
    """The host threads that run collectives (gloo's workers), whose ops are no compute; a planted
    delay's span sits on the training thread and does not make it one."""
    return {
        e.thread
        for e in events
        if not e.on_device and collective_kind(e.name) is not None and not e.name.startswith(PLANTED_COMM_PREFIX)
    }


def attribute_events(events: Iterable[TraceEvent], *, device_type: str) -> StepParts:
    """The probe step taken apart (`analysis.attribution.step_parts`): compute, exposed
    communication by collective, optimizer, data and host time, summing to the step's window.

    Compute is what `summarize_events` calls compute (CUDA: non-collective kernels; CPU: `aten::`
    ops off gloo's threads); the optimizer part is the `Optimizer.step` spans on the host on both.
    A CUDA rank's events without a kernel give a null with its reason, not the CPU method."""
    from fsdp_bench.analysis.attribution import step_parts

    events = list(events)
    steps = [(e.start_s, e.end_s) for e in events if e.name == STEP_MARKER and not e.on_device]
    on_gpu = any(e.on_device for e in events)
    if device_type == "cuda" and not on_gpu:
        return {"steps": 0, "null_reason": NO_CUDA_KERNELS}
    comm_threads = _comm_threads(events)
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        kind = collective_kind(e.name)
        if kind is not None and (e.on_device or not on_gpu or e.name.startswith(PLANTED_COMM_PREFIX)):
            by_kind.setdefault(kind, []).append((e.start_s, e.end_s))
    if on_gpu:
        compute = [(e.start_s, e.end_s) for e in events if e.on_device and collective_kind(e.name) is None]
    else:
        compute = [(e.start_s, e.end_s) for e in events if e.name.startswith("aten::") and e.thread not in comm_threads]
    parts = step_parts(
        steps,
        compute=compute,
        comm_by_kind=by_kind,
        optimizer=[(e.start_s, e.end_s) for e in events if e.name.startswith("Optimizer.step#")],
        data=[(e.start_s, e.end_s) for e in events if e.name == DATA_MARKER and not e.on_device],
    )
    parts["host_means"] = "device idle" if on_gpu else "no op or collective running"
    if on_gpu:
        parts["busy"] = busy_from_events(events)
    return parts


def busy_from_events(events: Iterable[TraceEvent]) -> BusyProbe:
    """The device's busy seconds per step (`analysis.busy.device_busy`): every device interval
    inside the `fsdp_bench.step` windows (the host spans; the device-side copy of the annotation
    is no work)."""
    events = list(events)
    steps = [(e.start_s, e.end_s) for e in events if e.name == STEP_MARKER and not e.on_device]
    return device_busy(((e.start_s, e.end_s) for e in events if e.on_device), steps)


# Chrome-trace categories that are device-side work (kernels and copies on a GPU stream).
_DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


def load_trace_events(path: Path) -> list[TraceEvent]:
    """Complete ("X") events of a saved chrome/TensorBoard trace, the same file a user opens
    (gzip'd when its name ends in .gz, as torch's `use_gzip` writes it)."""
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as fh:
        trace = json.load(fh)
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    out = []
    for e in events:
        # A record_function span is also drawn on the GPU's timeline ("gpu_user_annotation"): no
        # work, and a second copy of each step window, so a count of windows would double.
        if e.get("ph") != "X" or "dur" not in e or e.get("cat") == "gpu_user_annotation":
            continue
        start = float(e["ts"]) / 1e6
        tid = e.get("tid", 0)
        out.append(
            TraceEvent(
                e.get("name", ""),
                start,
                start + float(e["dur"]) / 1e6,
                tid if isinstance(tid, int) else hash(tid),
                e.get("cat") in _DEVICE_CATEGORIES,
            )
        )
    return out


def profile_steps(
    step: Callable[[], Any], *, n_steps: int, device_type: str, rank: int, trace_dir: Path | None
) -> ProfileSummary:
    """Run `step` under torch.profiler: one profiler warmup step (not recorded), then `n_steps`
    recorded ones; save the TensorBoard trace and summarize it.

    A schedule and `prof.step()` after every step put `ProfilerStep#N` spans in the trace, so
    TensorBoard and HolisticTraceAnalysis see separate steps. The summary is read back from the
    saved trace file, so it describes exactly what TensorBoard shows (without a case folder the
    trace goes to a temporary folder and is deleted).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU]
    if device_type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(trace_dir) if trace_dir is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        before = set(folder.glob(f"rank{rank}.*.pt.trace.json"))
        with profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=PROFILER_WARMUP_STEPS, active=n_steps, repeat=1),
            on_trace_ready=tensorboard_trace_handler(str(folder), worker_name=f"rank{rank}"),
        ) as prof:
            for _ in range(PROFILER_WARMUP_STEPS + n_steps):
                with record_function(STEP_MARKER):
                    step()
                    if device_type == "cuda":  # the step's window must end after its last kernel
                        torch.cuda.synchronize()
                prof.step()
        written = sorted(set(folder.glob(f"rank{rank}.*.pt.trace.json")) - before)
        if not written:
            return {"steps_profiled": 0, "reason": f"torch.profiler wrote no trace file in {folder}"}
        summary = summarize_events(load_trace_events(written[-1]), device_type=device_type)
    if trace_dir is not None:
        summary["trace_file"] = str(written[-1])
    return summary


def probe_step_events(
    step: Callable[[], Any], *, device_type: str, windows: int = PARTS_PROBE_WINDOWS
) -> list[TraceEvent]:
    """Run `step` 1 + `windows` times under torch.profiler (CPU ops, and CUDA kernels on a GPU),
    the last `windows` each inside a `fsdp_bench.step` span, and return the events; no trace is
    kept. The first step is profiled but unmarked: the first version's single profiled step read
    -5% to +77% against the timed median of 10-40 ms CPU steps on a quiet machine (2026-11-26,
    scripts/measure_why_cost.py), part of it the profiler's per-op cost (time_plain_steps' steps
    say how much), part the profiler's start; the marked ones follow each other as the timed
    loop's do. Synchronizing before the marked steps and inside the
    last puts exactly their kernels in the windows.

    A barrier starts the ranks' steps together: the profiler's start takes each rank a different
    time (tens of ms on a loaded CPU), and a rank that starts early would spend the difference
    waiting in its first collective, communication the step never had."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = device_type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
        step()
        if cuda:
            torch.cuda.synchronize()
        for i in range(windows):
            with record_function(STEP_MARKER):
                step()
                if cuda and i == windows - 1:
                    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.pt.trace.json"
        prof.export_chrome_trace(str(path))
        return load_trace_events(path)


def time_plain_steps(step: Callable[[], Any], *, device_type: str, n: int = PARTS_PROBE_PLAIN_STEPS) -> float:
    """The median seconds of `n` steps without the profiler, run right after the timed loop and
    before the profiled ones: the step the parts are scaled to (analysis.aggregate.parts_metrics),
    since the profiler lengthens what it records (on CPU about 1.5 us per recorded op: +26% on an
    8.6 ms DDP step of two gloo ranks, measured 2026-11-26), and against which the timed median
    shows whether the moment was a typical one. Still a small sample: on a quiet gpt_tiny sweep
    the median of five read within 15% of the timed median on 41 of 48 ranks (docs/why.md)."""
    import statistics

    import torch

    cuda = device_type == "cuda"
    times = []
    for _ in range(n):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
