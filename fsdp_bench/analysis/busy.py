"""How busy the GPU is during a step, from the device's own timeline (pure, no torch).

NVML's utilization (`gpu_util_pct_mean`) is a sampled figure: the share of the driver's sample
periods (1/6 s to 1 s) in which any kernel ran, and the periods straddle whatever runs around the
step. It read 3-14% on H100 GPT-2 cases at up to 27% MFU, so it cannot say whether a step is
host-bound. The busy share here is read off the profiler's device timeline instead:

    busy per step  = |union of device activity (kernels, memcpy, memset) inside the step's window|
    gpu_busy_pct   = busy per step / the rank's median timed step
    idle per step  = median timed step - busy per step

The device activity comes from one untimed probe step (worker.probes._probe_step_parts, whose
profiler run also takes the step apart: analysis.attribution).
The denominator is the timed step, not the probe's own window: the profiler records every CPU op
and so lengthens the host side of the probe step (H100 GPT-2 bs4: 153 ms profiled against 125 ms
timed), while the kernels' own durations stay what they were; dividing by the probe's window would
call a step more host-bound than it is, and its idle time would exceed the step a user sees.
Communication kernels count as busy: the GPU runs them (an NCCL kernel waiting for a late peer
too, which is why a case reads the least busy rank, see analysis.aggregate).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from fsdp_bench.analysis.intervals import Interval, clip, total_length, union
from fsdp_bench.results.readings import BusyProbe, GpuBusy

# A step whose GPU is busy for less than this share of it is host-bound: the GPU waits on the host
# (Python, kernel launches, hooks, data) for over a fifth of every step, so the step time moves
# with host overhead and the host's load as much as with the strategy's GPU work, and a ranking
# among such cases measures the host. 80% leaves room for the launch latency and the final
# synchronize every step has; the H100 GPT-2 124M bs4 step is 16% busy.
HOST_BOUND_BUSY_PCT = 80.0

NO_DEVICE_TIMELINE = "device is cpu: no device timeline (the busy share needs the profiler's CUDA kernel intervals)"
# A CUDA rank whose profiler saw no kernel (CUPTI unavailable, as in some sandboxes): its host ops
# are launches, not the step's work, so the CPU method would take the step apart wrongly.
NO_CUDA_KERNELS = "the profiler recorded no CUDA kernel in the probe steps (CUPTI unavailable?): no device timeline"


def device_busy(device: Iterable[Interval], steps: Iterable[Interval]) -> BusyProbe:
    """Seconds per step during which the device ran anything, and the steps' mean window.

    `device`: the device-side intervals (kernels, copies, memsets; streams may overlap one another);
    `steps`: the step windows, one span per step (back-to-back steps may touch, so they are counted
    before their union is taken). Device work outside every window is not counted. Without windows
    or without device work, the result says why instead of reading 0% busy."""
    steps = list(steps)
    windows = union(steps)
    if not windows:
        return {"steps": 0, "null_reason": "no step window in the trace"}
    device = list(device)
    if not device:
        return {"steps": len(steps), "null_reason": "the trace has no device activity (no CUDA kernels)"}
    n = len(steps)
    return {
        "steps": n,
        "busy_s_per_step": total_length(clip(device, windows)) / n,
        "window_s_per_step": total_length(windows) / n,
        "null_reason": None,
    }


def busy_share(busy_s_per_step: float, step_s: float) -> dict[str, float]:
    """The busy share (`pct`, the case's gpu_busy_pct) and idle milliseconds of a step of `step_s`
    seconds. Busy time measured longer than the step (the probe step's kernels slower than the
    timed median's) reads 100%."""
    if step_s <= 0:
        raise ValueError(f"step time must be positive, got {step_s}")
    busy = min(busy_s_per_step, step_s)
    return {"pct": 100.0 * busy / step_s, "idle_ms_per_step": 1e3 * (step_s - busy)}


def busy_record(probe: BusyProbe, step_times_s: list[float]) -> GpuBusy:
    """A rank's `gpu_busy` record: the probe's device busy time against its own median timed step."""
    if probe.get("null_reason") or probe.get("busy_s_per_step") is None:
        return {"pct": None, "null_reason": probe.get("null_reason") or "the probe measured no busy time"}
    if not step_times_s:
        return {"pct": None, "null_reason": "no timed step to compare the busy time with"}
    median = statistics.median(step_times_s)
    share = busy_share(probe["busy_s_per_step"], median)
    return {
        **share,
        "busy_ms_per_step": 1e3 * probe["busy_s_per_step"],
        "step_ms_median": 1e3 * median,
        "probe_window_ms": 1e3 * probe["window_s_per_step"],
        "probe_steps": probe["steps"],
        "null_reason": None,
    }


def is_host_bound(busy_pct: float | None) -> bool | None:
    """True below HOST_BOUND_BUSY_PCT, None when the busy share is unknown (CPU, no probes)."""
    if busy_pct is None or busy_pct != busy_pct:
        return None
    return busy_pct < HOST_BOUND_BUSY_PCT


def host_bound_detail(busy_pct: float, idle_ms: float) -> str:
    """`GPU idle 105 ms/step, busy 16%`."""
    return f"GPU idle {idle_ms:,.0f} ms/step, busy {busy_pct:.0f}%"


def host_bound_text(busy_pct: float, idle_ms: float) -> str:
    """`host-bound (GPU idle 105 ms/step, busy 16%)`: the label the summary and the recommendation
    share (the live line writes it in capitals, as its other warnings)."""
    return f"host-bound ({host_bound_detail(busy_pct, idle_ms)})"
