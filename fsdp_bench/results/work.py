"""The work one optimizer step of a case does, written into its result when the result is written
(launch.runner) and into older files by their migration, so no reader recomputes it: the table,
the ranking, the short answer and the reason beside it all read `result["work"]`.

Two cases do the same work when they train the same model on the same number of tokens per
optimizer step (per-device batch x grad accum x ranks x seq_len) at the same precision; only
then is one "faster" than the other (the `compare_group`).
"""

from __future__ import annotations

from fsdp_bench.results.records import CaseFields, Work


def global_batch_size(batch_size: int, grad_accum: int, nproc: int) -> int:
    """Samples per optimizer step over all ranks."""
    return batch_size * grad_accum * nproc


def work_of(case: CaseFields) -> Work | None:
    """A case's work per optimizer step; None when its case lacks a field the work needs."""
    keys = ("batch_size", "grad_accum", "nproc", "seq_len")
    if not all(type(case.get(k)) is int for k in keys) or not case.get("model") or not case.get("precision"):
        return None
    samples = global_batch_size(case["batch_size"], case["grad_accum"], case["nproc"])
    tokens = samples * case["seq_len"]
    return {
        "global_batch_size": samples,
        "tokens_per_optimizer_step": tokens,
        "compare_group": f"{case['model']} sl{case['seq_len']} tok{tokens} {case['precision']}",
    }
