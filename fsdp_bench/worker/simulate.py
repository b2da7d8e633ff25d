"""Rank 0 of an N-rank job on one device, on a fake process group (see fsdp_bench.analysis.simulation).

python -m fsdp_bench.worker.simulate --case CASE.json --out DIR      (the runner launches it)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from fsdp_bench.analysis.simulation import simulated_environment, simulation_summary
from fsdp_bench.plan.case import Case
from fsdp_bench.results.io import read_json, write_json_atomic
from fsdp_bench.results.layout import CaseDir
from fsdp_bench.results.records import RankRecord
from fsdp_bench.worker.args import parse_case_args


@contextlib.contextmanager
def fake_rank0(case: Case) -> Iterator[None]:
    """Inside: this process is rank 0 of case.nproc, torchrun's variables set and the fake process
    group initialized; both undone on the way out (the runner's simulated cases, the fake-tensor
    estimator, scripts and tests that run a simulated rank in process)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    saved_env = dict(os.environ)
    os.environ.update(simulated_environment(case))
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=case.nproc)
    try:
        yield
    finally:
        dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved_env)


def simulated_peak(case: Case) -> int:
    """Rank 0 of a simulated case on the fake process group, in this process: two steps (AdamW's
    state made), then one under MemTracker (FSDP1: two under the profiler), the probe step's
    reading (worker.memory, which gives a CPU sweep its peak) without the sweep's other probes (FLOPs,
    profiler: 6-8 of a simulated case's 11-14 s on the 2-core machine). Scripts and tests that
    check the peak model read it."""
    import torch

    from fsdp_bench.worker.memory import track_step_memory
    from fsdp_bench.worker.probes import memtracker_refusal, resident_state_by_category
    from fsdp_bench.worker.profiled_peak import profiled_step_peak
    from fsdp_bench.worker.setup import build_rank

    with fake_rank0(case):
        setup = build_rank(case, device=torch.device("cpu"), rank=0, world_size=case.nproc)
        for step in range(2):
            setup.train_step(step)
        if memtracker_refusal(setup.model) is None:
            tracked = track_step_memory(
                lambda on_phase: setup.train_step(2, on_phase), [setup.model], setup.optimizer, device=setup.device
            )
            return tracked["peak_bytes"]
        resident = resident_state_by_category(setup.model, setup.optimizer)
        profiled = profiled_step_peak(
            lambda on_phase: setup.train_step(2, on_phase), model=setup.model, resident=resident
        )
    if "peak_bytes" not in profiled:
        raise RuntimeError(f"{case.id}: {profiled['null_reason']}")
    return profiled["peak_bytes"]


def main(argv: list[str] | None = None) -> int:
    args = parse_case_args("python -m fsdp_bench.worker.simulate", __doc__.splitlines()[0], argv)
    case = Case.from_dict(read_json(args.case))
    from fsdp_bench.worker.entry import main as worker_main

    with fake_rank0(case):
        code = worker_main(["--case", str(args.case), "--out", str(args.out)])
    path = CaseDir(args.out).rank_file(0)
    record = read_json(path)
    if record.get("status") == "ok":
        record["simulation"] = simulation_summary(case, record)
        write_json_atomic(path, record, shape=RankRecord, overwrite=True, make_parents=False)
    return code


if __name__ == "__main__":
    from fsdp_bench.worker.lifetime import exit_now

    exit_now(main())  # a failure raises out of main() with its traceback; success skips teardown
