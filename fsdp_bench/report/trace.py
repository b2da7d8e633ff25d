"""`python -m fsdp_bench.fit --trace`: per case, the fake-tensor estimator's peak next to the fast
model's prediction (analysis.fit.predict_peak_bytes).

The estimator (`python -m fsdp_bench.worker.estimate`) runs the real model and strategy for two
steps on fake tensors and a fake process group; it is started as a subprocess, one per case, so
this CLI never imports torch. Its answer is read from the JSON file it writes, never from stdout.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from fsdp_bench.analysis.fit import predict_peak_bytes
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.flavors import flavor_for
from fsdp_bench.results.io import read_json, write_json_atomic
from fsdp_bench.results.records import CaseFields, TableRow
from fsdp_bench.results.schema import GIB

ESTIMATOR = "fsdp_bench.worker.estimate"
ESTIMATE_TIMEOUT_S = 600.0


def trace_cases(
    models: Iterable[str],
    strategies: Iterable[str],
    world_sizes: Iterable[int],
    *,
    batch_size: int,
    seq_len: int,
    precision: str,
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
            steps=1,
            warmup=0,
        )
        for model in models
        for strategy in strategies
        for n in world_sizes
    ]


def run_estimator(case: Case, workdir: Path, timeout_s: float = ESTIMATE_TIMEOUT_S) -> TableRow:
    """The estimator's JSON for `case`, or {"status": "failed", "reason": ...} with its last words."""
    case_path, out = workdir / f"{case.id}.case.json", workdir / f"{case.id}.estimate.json"
    write_json_atomic(case_path, case.to_dict(), shape=CaseFields, overwrite=True)
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", ESTIMATOR, "--case", str(case_path), "--out", str(out)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"no estimate within {timeout_s:.0f} s"}
    if done.returncode != 0 or not out.exists():
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return {"status": "failed", "reason": f"estimator exited {done.returncode}: {last}"}
    return read_json(out)


def trace_rows(cases: Iterable[Case], workdir: Path | None = None) -> Iterator[TableRow]:
    """Per case: the estimate (or why none) and the fast model's peak for the same case."""
    with tempfile.TemporaryDirectory(prefix="fsdp-bench-trace-") as scratch:
        for case in cases:
            estimate = run_estimator(case, Path(workdir or scratch))
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
                buckets_from_start=True,  # as the estimate's peak_bytes counts DDP's buckets
            )
            yield {
                "case": case,
                "estimate": estimate,
                "fast_peak_bytes": fast["peak_bytes"],
                "fast_phase": fast["phase"],
            }


def trace_line(row: TableRow) -> str:
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
