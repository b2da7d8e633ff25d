"""fit and the tuner answer with the sweep's host-memory guard (issue 37: one estimate for the
guard, fit and the tuner): on CPU a fit row the guard would not launch is "fits: no" with the
guard's own line and figure, its largest batch is bounded by the host too, and a tuner candidate
the guard would skip is skipped before the probe with that line, never launched. The budget is
constructed (a small MemAvailable), so nothing here needs a machine that small."""

from __future__ import annotations

import json

from fsdp_bench.analysis.fit import fit_table
from fsdp_bench.analysis.host_memory import host_check, host_peak
from fsdp_bench.launch.memory_guard import memory_skip_reason
from fsdp_bench.launch.tune import answer_lines
from fsdp_bench.plan.case import Case
from fsdp_bench.results.schema import GIB
from tests.sweep_helpers import tune_one_model

SMALL_HOST = 2 * GIB  # gpt_tiny at 8 CPU ranks needs about 2.9 GiB (8 x 0.33 + torchrun)


def _rows(**kw):
    return fit_table(
        ["gpt_tiny"], ["ddp"], device_memory_gib=80, seq_len=32, batch_size=4, world_sizes=[1, 8], device="cpu", **kw
    )


def test_a_fit_row_the_guard_would_not_launch_is_no_with_the_guards_line():
    one, eight = _rows(host_check=host_check(SMALL_HOST))
    guard = memory_skip_reason(Case(strategy="ddp", model="gpt_tiny", nproc=8, batch_size=4, seq_len=32), SMALL_HOST)
    assert guard is not None and eight["host_refusal"] == guard  # the same figure, the same words
    assert eight["fits"] is False and eight["max_batch_size"] == 0
    assert one["fits"] is True and one["host_refusal"] == ""
    unbounded = _rows(host_check=None)[0]["max_batch_size"]
    assert 0 < one["max_batch_size"] < unbounded  # the host, not the 80 GiB budget, bounds the batch
    bound = one["max_batch_size"]
    at, over = (Case(strategy="ddp", model="gpt_tiny", nproc=1, batch_size=b, seq_len=32) for b in (bound, bound + 1))
    assert memory_skip_reason(at, SMALL_HOST) is None and memory_skip_reason(over, SMALL_HOST) is not None


def test_a_fit_row_counts_the_workers_torch_import_as_the_guard_does():
    """A CUDA build of torch costs each process more to import than the CPU wheel (0.473 GiB for
    2.11.0+cu130, measured by the env.json reader, against 0.214): at a budget between the two
    figures, the CPU wheel's row fits and the CUDA build's is "no" with the guard's own line."""
    cuda_import = int(0.473 * GIB)
    case = Case(strategy="ddp", model="gpt_tiny", nproc=8, batch_size=4, seq_len=32)
    wheel, cuda = (host_peak(case, import_bytes=b).total_bytes for b in (None, cuda_import))
    assert cuda > wheel + 8 * (0.473 - 0.214) * GIB  # eight ranks and torchrun pay it
    budget = int((wheel + cuda) / 2)
    fits = _rows(host_check=host_check(budget))[1]
    over = _rows(host_check=host_check(budget, cuda_import))[1]
    assert fits["host_refusal"] == "" and over["fits"] is False
    assert over["host_refusal"] == memory_skip_reason(case, budget, import_bytes=cuda_import)


def test_the_tuner_skips_what_the_guard_would_skip_without_launching_it(tmp_path):
    options = {"device": "cpu", "model": "gpt_tiny", "strategies": "ddp,fsdp2", "batch-sizes": "4", "nproc": "2"}
    launched = []
    tiny = int(0.5 * GIB)  # under one rank's base: every candidate is over
    request, answer = tune_one_model(
        {**options, "seq-len": "32"},
        tmp_path,
        on_result=lambda case, result: launched.append(case.id),
        available_bytes=tiny,
    )
    assert launched == [] and answer["measured"] == [] and answer["pick"] is None
    reasons = {s["case_id"]: s["reason"] for s in answer["skipped"]}
    # the guard as the sweep's session asked it: with what `import torch` costs its workers
    (env,) = tmp_path.glob("*/env.json")
    guard = {"import_bytes": json.loads(env.read_text())["torch_import_rss_bytes"]}
    assert reasons == {c.id: memory_skip_reason(c, tiny, **guard) for c in request.cases}
    assert "host memory" in answer["stopped"]
    assert any(memory_skip_reason(request.cases[0], tiny, **guard) in line for line in answer_lines(answer))
