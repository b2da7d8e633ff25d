"""Will the sweep's cases fit in this machine's memory? Checked before the first case launches
(no torch): a case whose ranks would need more host memory than is available is refused in one
line with the numbers, instead of swapping the machine to a halt or waking the OOM killer.

A CPU rank holds its model state and activations in host memory: its need is the predicted peak
(`analysis.fit.predict_peak_bytes`, the same prediction the report checks against measurements)
plus what one rank process costs before any model exists (torch, gloo, the interpreter). A CUDA
rank keeps those in device memory and costs the host only its fixed part; a CUDA case predicted
over its GPU's memory is only announced (`device_memory_note`): an OOM on the GPU ends that one
case as `oom` and the sweep goes on (the reference plan provokes one on purpose), while host memory
exhausted takes the whole machine down.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fsdp_bench.analysis.fit import predict_case_peak
from fsdp_bench.plan.case import Case, parse_mesh
from fsdp_bench.results.schema import GIB

# One rank process before its model: torch + gloo + interpreter. The golden CPU runs
# (tests/data/golden/base, gpt_tiny, a few MB of model) record peak_rss_gib 0.316 per rank;
# rounded up for torchrun's own process and allocator slack.
RANK_FIXED_BYTES = 0.5 * GIB
MEMINFO = Path("/proc/meminfo")


def available_host_bytes(meminfo: Path = MEMINFO) -> int | None:
    """The kernel's MemAvailable (what can be allocated without swapping); None when unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def predicted_rank_peak_bytes(case: Case) -> float | None:
    """One rank's predicted peak of model state and activations; None where there is no model."""
    mesh = parse_mesh(case.mesh) if case.mesh else None
    try:
        return predict_case_peak(case, mesh=mesh)["peak_bytes"]
    except (KeyError, ValueError, TypeError, ZeroDivisionError):
        return None


def host_bytes_needed(case: Case, ranks_here: int) -> tuple[float, float | None]:
    """(host bytes the case's processes on this node need, one rank's predicted peak)."""
    peak = predicted_rank_peak_bytes(case)
    processes = 1 if case.simulate else ranks_here
    on_host = (peak or 0.0) if case.device == "cpu" else 0.0
    return processes * (on_host + RANK_FIXED_BYTES), peak


def memory_refusal(cases: Iterable[Case], available_bytes: int | None, *, nnodes: int = 1) -> str | None:
    """One line naming the case that needs the most host memory, when it needs more than is
    available; None when everything fits (or the machine does not say what it has)."""
    if available_bytes is None:
        return None
    worst = None
    for case in cases:
        ranks_here = max(1, case.nproc // max(1, nnodes))
        need, peak = host_bytes_needed(case, ranks_here)
        if need > available_bytes and (worst is None or need > worst[1]):
            worst = (case, need, peak, ranks_here)
    if worst is None:
        return None
    case, need, peak, ranks_here = worst
    per_rank = f"{(peak or 0) / GIB:.1f} GiB predicted peak + " if case.device == "cpu" else ""
    return (
        f"fsdp-bench: refusing to start: case {case.id} needs about {need / GIB:.1f} GiB of host memory "
        f"({1 if case.simulate else ranks_here} process(es) x ({per_rank}{RANK_FIXED_BYTES / GIB:.1f} GiB "
        f"per process)) but only {available_bytes / GIB:.1f} GiB is available; use a smaller model, batch "
        f"size or --bench-nproc, or pass --bench-allow-memory-overcommit to run it anyway"
    )


def device_memory_note(cases: Iterable[Case], device_bytes: int | None) -> str | None:
    """One line naming the CUDA cases whose predicted peak (with fit's margin) exceeds the GPU's
    memory, so a user sees before they run which ones will likely end as `oom`; None otherwise."""
    from fsdp_bench.analysis.fit import FIT_MARGIN

    if not device_bytes:
        return None
    over = [
        (case, peak)
        for case in cases
        if case.device == "cuda"
        for peak in [predicted_rank_peak_bytes(case)]
        if peak and peak * (1 + FIT_MARGIN) > device_bytes
    ]
    if not over:
        return None
    names = ", ".join(f"{case.id} ({peak / GIB:.1f} GiB)" for case, peak in over[:5])
    more = f" and {len(over) - 5} more" if len(over) > 5 else ""
    return (
        f"fsdp-bench: {len(over)} case(s) predicted over the GPU's {device_bytes / GIB:.1f} GiB "
        f"(peak + {FIT_MARGIN:.0%} margin): {names}{more}; they will likely end as oom"
    )
