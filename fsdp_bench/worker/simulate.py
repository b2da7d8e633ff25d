"""Rank 0 of an N-rank job on one device, on a fake process group (see fsdp_bench.analysis.simulation).

python -m fsdp_bench.worker.simulate --case CASE.json --out DIR      (the runner launches it)
"""

from __future__ import annotations

import os

from fsdp_bench.analysis.simulation import simulated_environment, simulation_summary
from fsdp_bench.plan.case import Case
from fsdp_bench.results.io import read_json, write_json_atomic
from fsdp_bench.results.layout import CaseDir
from fsdp_bench.worker.args import parse_case_args


def main(argv: list[str] | None = None) -> int:
    args = parse_case_args("python -m fsdp_bench.worker.simulate", __doc__.splitlines()[0], argv)
    case = Case.from_dict(read_json(args.case))
    os.environ.update(simulated_environment(case))

    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from fsdp_bench.worker.entry import main as worker_main

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=case.nproc)
    try:
        code = worker_main(["--case", str(args.case), "--out", str(args.out)])
    finally:
        dist.destroy_process_group()
    path = CaseDir(args.out).rank_file(0)
    record = read_json(path)
    if record.get("status") == "ok":
        record["simulation"] = simulation_summary(case, record)
        write_json_atomic(path, record, overwrite=True)
    return code


if __name__ == "__main__":
    from fsdp_bench.worker.lifetime import exit_now

    exit_now(main())  # a failure raises out of main() with its traceback; success skips teardown
