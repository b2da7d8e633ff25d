"""Will a case fit in this machine's memory? Asked before every launch (no torch): a case whose
processes would need more host memory than is available is not launched but ends `skipped`, its
reason one line with the numbers, instead of swapping the machine to a halt or waking the OOM
killer; the sweep goes on. Before the first case the sweep says which cases that will be.

The figure is `analysis.host_memory.host_peak` and the line `host_refusal` (the one estimate and
reason `fit` and the tuner share; MemAvailable is `plan.devices.available_host_bytes`):
each rank's base, the `--bench-data` text it reads and packs, the whole model it builds before
sharding, the step's predicted peak on a CPU rank with attention's growth with the square of the
sequence where it is materialised, a simulated rank's step, and torchrun. A CUDA case predicted
over its GPU's memory is only announced (`device_memory_note`): an OOM on the GPU ends that one
case as `oom` and the sweep goes on (the reference plan provokes one on purpose), while host
memory exhausted takes the whole machine down.
"""

from __future__ import annotations

from collections.abc import Iterable

from fsdp_bench.analysis.host_memory import OVERCOMMIT, HostPeak, host_peak, host_refusal, predicted_step_bytes
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.text_data import text_bytes
from fsdp_bench.results.schema import GIB


def case_host_peak(case: Case, *, nnodes: int = 1, import_bytes: int | None = None) -> HostPeak:
    """The case's host memory on one node: its ranks there, its data folder's text as on disk now;
    `import_bytes`: what `import torch` costs the workers' interpreter (env.json's
    `torch_import_rss_bytes`; None: the CPU wheel's)."""
    ranks_here = max(1, case.nproc // max(1, nnodes))
    return host_peak(case, ranks_here=ranks_here, text_bytes=text_bytes(case.data), import_bytes=import_bytes)


def memory_skip_reason(
    case: Case, available_bytes: int | None, *, nnodes: int = 1, import_bytes: int | None = None
) -> str | None:
    """One line saying why the case is not launched, when its processes need more host memory
    than is available; None when it fits (or the machine does not say what it has)."""
    return host_refusal(case_host_peak(case, nnodes=nnodes, import_bytes=import_bytes), available_bytes)


def memory_plan_line(
    cases: Iterable[Case], available_bytes: int | None, *, nnodes: int = 1, import_bytes: int | None = None
) -> str | None:
    """Said before the first case: how many cases will be skipped for host memory, naming the
    largest; None when every case fits."""
    peaks = [(case, case_host_peak(case, nnodes=nnodes, import_bytes=import_bytes)) for case in cases]
    over = [(case, peak.total_bytes) for case, peak in peaks if host_refusal(peak, available_bytes) is not None]
    if not over:
        return None
    case, need = max(over, key=lambda pair: pair[1])
    return (
        f"fsdp-bench: {len(over)} case(s) need more host memory than the {available_bytes / GIB:.1f} GiB "
        f"available and will be skipped, not launched (the largest: {case.id}, about {need / GIB:.1f} GiB); "
        f"{OVERCOMMIT} runs them anyway"
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
        for peak in [predicted_step_bytes(case)]
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
