"""`python -m fsdp_bench.fit --trace`: per case, the fake-tensor estimator's peak next to the fast
model's prediction (analysis.fit.predict_peak_bytes).

The estimator (`python -m fsdp_bench.worker.estimate`) runs the real model and strategy for two
steps on fake tensors and a fake process group; launch.estimate starts it, one subprocess per
case, and this module is handed what it returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypedDict

from fsdp_bench.analysis.fit import predict_peak_bytes
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.flavors import flavor_for
from fsdp_bench.results.records import PeakEstimate
from fsdp_bench.results.schema import GIB


def trace_cases(
    models: Iterable[str],
    strategies: Iterable[str],
    world_sizes: Iterable[int],
    *,
    batch_size: int,
    seq_len: int,
    precision: str,
    loss: str = "full",
) -> list[Case]:
    """One simulated case per (model, strategy, world size); raises CaseError on a bad value."""
    return [
        Case(
            strategy=strategy,
            model=model,
            nproc=n,
            simulate=True,
            batch_size=batch_size,
            seq_len=min(seq_len, flavor_for(model).max_seq_len or seq_len),
            precision=precision,
            loss=loss,
            steps=1,
            warmup=0,
        )
        for model in models
        for strategy in strategies
        for n in world_sizes
    ]


class TraceRow(TypedDict):
    case: Case
    estimate: PeakEstimate  # or {"status": "failed", "reason": ...}
    fast_peak_bytes: int
    fast_phase: str


def trace_rows(cases: Iterable[Case], estimate_of: Callable[[Case], PeakEstimate]) -> Iterator[TraceRow]:
    """Per case: the estimate (or why none) and the fast model's peak for the same case."""
    for case in cases:
        estimate = estimate_of(case)
        fast = predict_peak_bytes(
            case.strategy,
            flavor_for(case.model),
            case.nproc,
            case.batch_size,
            seq_len=case.seq_len,
            grad_accum=case.grad_accum,
            optimizer_impl=case.optimizer_impl,
            device=case.device,
            act_ckpt=case.act_ckpt,
            precision=case.precision,
            loss=case.loss,
            buckets_from_start=True,  # as the estimate's peak_bytes counts DDP's buckets
        )
        yield {"case": case, "estimate": estimate, "fast_peak_bytes": fast["peak_bytes"], "fast_phase": fast["phase"]}


def trace_line(row: TraceRow) -> str:
    """One printed line per case."""
    case, estimate, fast = row["case"], row["estimate"], row["fast_peak_bytes"]
    head = f"{case.model} {case.strategy} ws{case.nproc} batch {case.batch_size} seq {case.seq_len}:"
    fast_text = f"fast model {fast / GIB:.4f} GiB ({row['fast_phase']})"
    if estimate.get("status") != "ok":
        return f"{head} fake-tensor peak: none ({estimate.get('reason')}); {fast_text}"
    peak = estimate["peak_bytes"]
    buckets = estimate.get("ddp_bucket_bytes") or 0
    extra = f" ({buckets / GIB:.4f} GiB of it DDP's buckets)" if buckets else ""
    return (
        f"{head} fake-tensor peak {peak / GIB:.4f} GiB{extra} in {estimate['estimate_s']:.1f} s; "
        f"{fast_text}, {(fast - peak) / peak:+.1%} from the fake-tensor peak"
    )
