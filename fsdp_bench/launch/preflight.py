"""What the sweep checks and says after collection and before its first case: the workers'
interpreter can run a case at all (torch importable, a GPU seen for a CUDA sweep), the duration
estimate calibrated on this machine now, the slow-CPU guard (no pytest here: the plugin turns
`Preflight.refusal` into its usage error) and the cases the host-memory guard will skip."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from fsdp_bench.analysis.duration import Calibration, estimate_gpu_name, estimate_line, estimate_sweep, slow_cpu_line
from fsdp_bench.launch.environment import torch_version_line
from fsdp_bench.launch.memory_guard import device_memory_note, memory_plan_line
from fsdp_bench.launch.session import SessionError, SweepSession
from fsdp_bench.plan.case import Case, skip_reason
from fsdp_bench.plan.devices import available_host_bytes, visible_gpu_memory_bytes


@dataclass
class Preflight:
    refusal: str | None = None  # one line: the sweep must not start
    lines: list[str] = field(default_factory=list)  # said before the first case


def run_preflight(
    session: SweepSession, cases: list[Case], *, collect_only: bool, skipped: Sequence[Case] = ()
) -> Preflight:
    """Check the interpreter (not for --collect-only, which launches nothing and may plan a GPU
    sweep on a machine without one), then estimate the sweep's duration with this machine's
    calibration, counting only the cases a resume will run."""
    sweep = session.sweep
    calibration = Calibration()
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1  # one reading for the estimate and its note
    import_bytes = None  # the CPU wheel's, for a --collect-only that reads no torch
    version_line = None
    if not collect_only:
        device = "cuda" if any(case.device == "cuda" for case in cases) else "cpu"
        try:
            facts = session.check_interpreter(device)
        except SessionError as exc:
            return Preflight(refusal=str(exc))
        calibration = Calibration.from_facts(facts, load, cpus)
        import_bytes = facts.get("torch_import_rss_bytes")
        version_line = torch_version_line(facts.get("torch"))
    estimate = estimate_sweep(
        cases,
        repeats=sweep.repeats,
        gpu_name=estimate_gpu_name(sweep.gpu_name, cases),
        calibration=calibration,
        kept=session.kept_on_resume([case.id for case in cases]),
    )
    refusal = None if sweep.allow_slow_cpu else slow_cpu_line(estimate)
    if refusal is not None and not collect_only:
        return Preflight(refusal=refusal)
    lines = [estimate_line(estimate)] + ([version_line] if version_line else [])
    if not sweep.allow_memory_overcommit:  # each such case ends skipped at its turn (SweepSession._launch)
        over = memory_plan_line(cases, available_host_bytes(), nnodes=sweep.launch().nnodes, import_bytes=import_bytes)
        lines += [over] if over else []
    plan = plan_line(cases, skipped)
    if plan is not None:
        lines.append(plan)
    busy = busy_machine_line(cases, load, cpus) if not collect_only else None
    if busy is not None:
        lines.append(busy)
    note = device_memory_note(cases, visible_gpu_memory_bytes() if any(c.device == "cuda" for c in cases) else None)
    if note is not None:
        lines.append(note)
    if refusal is not None:  # --collect-only launches nothing; say what a run would do
        lines.append(f"{refusal} (when run without --collect-only)")
    return Preflight(lines=lines)


def plan_line(cases: Sequence[Case], skipped: Sequence[Case]) -> str | None:
    """What the estimate assumes when it is not plain: GPU cases' rank count, which the machine
    planning them may not have (--collect-only on a laptop plans one GPU), and the listed cases
    that are skipped before launch, so '24 ids, then 16 case(s)' is explained (issue #39)."""
    cuda = [c for c in cases if c.device == "cuda"]
    if not cuda and not skipped:
        return None
    parts = []
    if cuda:
        ranks = ", ".join(str(n) for n in sorted({c.nproc for c in cuda}))
        parts.append(
            f"{len(cases)} case(s) at {ranks} GPU rank(s) each (--bench-nproc N; by default every GPU "
            "visible where the sweep runs, 1 where none is)"
        )
    if skipped:
        why = sorted({str(skip_reason(c)).split(":")[0] for c in skipped})
        parts.append(f"{len(skipped)} listed case(s) skipped before launch ({'; '.join(why)})")
    return "fsdp-bench: plan: " + "; ".join(parts)


def busy_machine_line(cases: Sequence[Case], load: float, cpus: int) -> str | None:
    """The load beside the estimate when other work shares a CPU sweep's cores: its timings will
    be noisy. The estimate allows for the load average (analysis.duration.load_factor), where the
    0.25 s probe alone could land in a quiet moment (two default sweeps at load 6-10 on 2 cores
    took 38-43% longer than a probe-only estimate, README)."""
    if load <= cpus or not any(c.device == "cpu" for c in cases):
        return None
    return (
        f"fsdp-bench: load average {load:.1f} on {cpus} CPU(s): other work shares this machine, so "
        "timings will be noisy; the estimate allows for the load as it was over the last minute"
    )
