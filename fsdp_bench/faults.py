"""Fault injection for contributors' tests: make one rank of chosen cases fail on purpose.

    FSDP_BENCH_FAULTS="KIND@STAGE:RANK[/CASE_ID_SUBSTRING],..."

KIND is `raise` (RuntimeError), `oom` (torch.OutOfMemoryError, what a real CUDA OOM raises),
`hang` (sleep forever: a rank stuck outside a collective), or `kill` (SIGKILL to itself).
STAGE is a worker stage name (see `fsdp_bench.worker.STAGES`). Without a case substring the
fault applies to every case. Pure parsing; only `inject` has side effects.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

ENV_VAR = "FSDP_BENCH_FAULTS"
KINDS = ("raise", "oom", "hang", "kill")


@dataclass(frozen=True)
class Fault:
    kind: str
    stage: str
    rank: int
    case_substring: str = ""


def parse_faults(spec: str) -> list[Fault]:
    faults = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        try:
            head, _, case_sub = item.partition("/")
            kind, rest = head.split("@", 1)
            stage, rank = rest.split(":", 1)
            fault = Fault(kind, stage, int(rank), case_sub)
        except ValueError:
            raise ValueError(f"{ENV_VAR}: cannot parse {item!r}; expected KIND@STAGE:RANK[/CASE]") from None
        if fault.kind not in KINDS:
            raise ValueError(f"{ENV_VAR}: unknown fault kind {fault.kind!r}; known: {', '.join(KINDS)}")
        faults.append(fault)
    return faults


def faults_for(case_id: str, rank: int, spec: str | None = None) -> dict[str, str]:
    """stage -> kind for this rank of this case."""
    spec = os.environ.get(ENV_VAR, "") if spec is None else spec
    return {f.stage: f.kind for f in parse_faults(spec) if f.rank == rank and f.case_substring in case_id}


def inject(kind: str, stage: str) -> None:
    if kind == "raise":
        raise RuntimeError(f"injected fault at stage {stage}")
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError(f"CUDA out of memory (injected fault at stage {stage})")
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
