"""One rank's record: the JSON a rank fills as it goes and leaves behind whatever happens, the
stage it reached, and the memory reading after each stage."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from fsdp_bench.plan.case import Case
from fsdp_bench.plan.faults import faults_for, slow_fraction_for
from fsdp_bench.results.io import utc_now, write_json_atomic
from fsdp_bench.results.records import RankRecord, StageReading
from fsdp_bench.results.schema import GIB, MEASUREMENT_VERSION, SCHEMA_VERSION, STAGE_LABELS


def new_record(case: Case, *, rank: int, world_size: int) -> RankRecord:
    return {
        "schema_version": SCHEMA_VERSION,
        "measurement_version": MEASUREMENT_VERSION,
        "case_id": case.id,
        "rank": rank,
        "world_size": world_size,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "status": "running",
        "stage": "init",
        "error": None,
        "started_utc": utc_now(),
        "stages": [],
        "warmup_step_times_s": [],
        "step_times_s": [],
        "losses": [],
        "memory": {},
    }


class StageTracker:
    """Moves the record through `STAGES`, injecting contributor faults, saving progress and
    reading memory after each stage.

    `progress_file`, when set (a torchrun rank), receives the record as it stands whenever a stage
    begins, so a rank killed by a signal still leaves the stage it reached and the steps it
    finished. Between stages only, never inside a timed step."""

    def __init__(self, record: RankRecord, case: Case, rank: int, progress_file: Path | None = None) -> None:
        self.record = record
        self.rank = rank
        self.faults = faults_for(case.id, rank)
        self.slow_fraction = slow_fraction_for(case.id, rank)  # slow@measure:RANK[:FRACTION]
        self.device = None
        self.progress_file = progress_file

    def enter(self, stage: str) -> None:
        self.record["stage"] = stage
        # Wall clock, so the parent can split a case's time into launch, training, probes, teardown.
        self.record.setdefault("stage_started_unix", {})[stage] = time.time()
        self.save_progress()
        kind = self.faults.get(stage)
        if kind and kind != "slow":  # `slow` acts inside each timed step (worker.loop), not here
            from fsdp_bench.worker.faults import inject

            inject(kind, stage, self.device)

    def done(self, stage: str) -> None:
        if stage not in STAGE_LABELS or self.device is None:
            return
        from fsdp_bench.worker.memory import read_memory

        reading = {"stage": stage, "label": STAGE_LABELS[stage], "rank": self.rank, **read_memory(self.device)}
        self.record["stages"].append(reading)
        if self.rank == 0:
            print(format_stage_line(reading), flush=True)

    def save_progress(self) -> None:
        if self.progress_file is None:
            return
        try:
            write_json_atomic(self.progress_file, self.record, shape=RankRecord, overwrite=True, make_parents=False)
        except OSError:
            pass  # a full disk must not turn a healthy case into a failed one


def format_stage_line(reading: StageReading) -> str:
    parts = [f"[fsdp-bench] rank {reading['rank']} {reading['label']}:"]
    for key in ("allocated_bytes", "max_allocated_bytes", "reserved_bytes", "max_reserved_bytes", "rss_bytes"):
        if reading.get(key) is not None:
            parts.append(f"{key.replace('_bytes', '_gib')}={reading[key] / GIB:.3f}")
    return " ".join(parts)
