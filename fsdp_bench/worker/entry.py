"""The torchrun entry point: one rank of one case, which leaves its record whatever happens.

    python -m fsdp_bench.worker.torchrun ... -m fsdp_bench.worker --case CASE.json --out DIR

Each rank writes `DIR/rank-N.json` atomically at every stage and at its end (see
`fsdp_bench.results.layout.CaseDir`); the parent reads nothing else.
"""

from __future__ import annotations

import os
import signal

from fsdp_bench.plan.case import Case
from fsdp_bench.results.io import read_json, utc_now, write_json_atomic
from fsdp_bench.results.layout import CaseDir
from fsdp_bench.results.records import RankRecord
from fsdp_bench.worker.args import parse_case_args
from fsdp_bench.worker.failure import (
    classify_exception,
    error_record,
    install_cuda_oom_observer,
    raise_on_sigterm,
    record_memory_at_failure,
)
from fsdp_bench.worker.lifetime import die_with_parent, exit_now
from fsdp_bench.worker.loop import run
from fsdp_bench.worker.record import StageTracker, new_record


def main(argv: list[str] | None = None) -> int:
    args = parse_case_args("python -m fsdp_bench.worker", __doc__.splitlines()[0], argv)
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    work = CaseDir(args.out)
    work.path.mkdir(parents=True, exist_ok=True)
    work.pid_file(rank).write_text(str(os.getpid()))
    signal.signal(signal.SIGTERM, raise_on_sigterm)
    die_with_parent(signal.SIGTERM)  # a SIGKILLed torchrun leaves no orphan rank
    case = Case.from_dict(read_json(args.case))
    record = new_record(case, rank=rank, world_size=world_size)
    stages = StageTracker(record, case, rank, progress_file=work.rank_file(rank))
    try:
        install_cuda_oom_observer(case, record, args.out, rank)
        run(case, record=record, out_dir=args.out, stages=stages)
        return 0
    except BaseException as exc:
        # Already failing: the SIGTERM torchrun sends the other ranks (and this one) must not cut
        # the record short between its status and its error (a rank then read "raised None").
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        record["status"] = classify_exception(exc)
        record["error"] = error_record(exc)
        if record["status"] in ("oom", "failed"):
            record_memory_at_failure(record)
        if record["status"] == "skipped":
            return 0
        raise
    finally:
        record["ended_utc"] = utc_now()
        write_json_atomic(work.rank_file(rank), record, shape=RankRecord, overwrite=True, make_parents=False)


def entry() -> None:
    from torch.distributed.elastic.multiprocessing.errors import record as record_errors

    code = record_errors(main)()
    exit_now(code)
