"""Fault injection for contributors' tests: make one rank of chosen cases fail on purpose.

    FSDP_BENCH_FAULTS="KIND@STAGE:RANK[:FRACTION][/CASE_ID_SUBSTRING],..."

KIND is one of:
  raise   RuntimeError, like any bug in model build, strategy or step;
  oom     out of memory: on a CUDA device a real allocation larger than the GPU (the allocator
          raises, the OOM observer fires, a snapshot is dumped if enabled); on CPU
          torch.OutOfMemoryError raised directly, the same exception type a CUDA OOM raises;
  hang    sleep forever: the other ranks block in their next collective until the process-group
          timeout; SIGTERM still stops it;
  stuck   like hang, but SIGTERM is ignored, as by a rank stuck in native code: only SIGKILL
          (torchrun's or the runner's, after their grace periods) ends it;
  kill    SIGKILL to itself, as the kernel's OOM killer or a segfault would end it;
  slow    only `slow@measure:RANK[:FRACTION]`: inside each timed step the rank sleeps FRACTION
          (default SLOW_FRACTION, 0.3) of its fastest measured step so far (not of the current
          step, which includes waiting for a slowed peer: worker.faults.SlowSteps), so the case is
          really slower by about that share (a synchronous step ends with its slowest rank): what a
          regression looks like, for testing `--compare`. The size matters because a gate can
          only be tested with a slowdown larger than the change its noise lets it detect
          (`slow@measure:0:1.5` makes each step about 2.5x as long).
  host_delay, comm_delay, slow_optimizer   only `KIND@step:RANK`: a planted cause, in every training
          step of the rank (warmup, timed and probe steps): host_delay sleeps PLANTED_DELAY_S after
          each forward (Python time inside the step); comm_delay holds each collective the rank
          calls from Python (FSDP2's all-gathers and reduce-scatters; not FSDP1's nor DDP's)
          for PLANTED_COMM_DELAY_S, as a slow link would; slow_optimizer sleeps PLANTED_DELAY_S in
          every optimizer step. The step-time attribution must name them (tests/integration).
STAGE is a worker stage name (`fsdp_bench.results.schema.STAGES`), or `probe_step`: part-way
through the first untimed probe step (after its first forward), where a probe's failure must stay
the probe's. Without a case substring the fault
applies to every case. Several faults are separated by commas. Parsing is pure; the worker's
`fsdp_bench.worker.faults.inject` makes them happen. The plugin checks the variable before any case starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fsdp_bench.results.schema import STAGES

ENV_VAR = "FSDP_BENCH_FAULTS"
PLANTED = ("host_delay", "comm_delay", "slow_optimizer")  # causes planted in every step (stage `step`)
KINDS = ("raise", "oom", "hang", "stuck", "kill", "slow", *PLANTED)
PLANTED_DELAY_S = 0.1  # host_delay per forward, slow_optimizer per optimizer step
PLANTED_COMM_DELAY_S = 0.02  # comm_delay per collective call
SLOW_FRACTION = 0.3  # `slow`: the share of a measured step's time added as sleep
MAX_SLOW_FRACTION = 100.0  # `slow`: beyond 101x a step, a "slow" case is a hang in all but name
SLOW_STAGES = ("measure",)  # `slow` acts on timed steps, so only where they are
# Where a fault can fire: at the start of a stage, or inside the first probe step.
POINTS = (*STAGES, "probe_step", "step")


@dataclass(frozen=True)
class Fault:
    kind: str
    stage: str
    rank: int
    case_substring: str = ""
    fraction: float = SLOW_FRACTION  # `slow` only: the share of each measured step added as sleep


def parse_faults(spec: str, *, stages: tuple[str, ...] | None = None) -> list[Fault]:
    faults = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        try:
            head, _, case_sub = item.partition("/")
            kind, rest = head.split("@", 1)
            stage, rank, *size = rest.split(":")
            fault = Fault(kind, stage, int(rank), case_sub, *(float(x) for x in size[:1]))
            if len(size) > 1:
                raise ValueError
        except ValueError:
            raise ValueError(f"{ENV_VAR}: cannot parse {item!r}; expected KIND@STAGE:RANK[:FRACTION][/CASE]") from None
        _check_size(fault, item, sized=bool(size))
        if fault.kind not in KINDS:
            raise ValueError(f"{ENV_VAR}: unknown fault kind {fault.kind!r}; known: {', '.join(KINDS)}")
        if stages is not None and fault.stage not in stages:
            raise ValueError(f"{ENV_VAR}: unknown stage {fault.stage!r} in {item!r}; known: {', '.join(stages)}")
        if fault.kind == "slow" and stages is not None and fault.stage not in SLOW_STAGES:
            raise ValueError(
                f"{ENV_VAR}: fault kind 'slow' acts on timed steps: only slow@measure:RANK[:FRACTION], got {item!r}"
            )
        if (fault.kind in PLANTED) != (fault.stage == "step") and stages is not None:
            raise ValueError(
                f"{ENV_VAR}: {', '.join(PLANTED)} act in every step and only there: KIND@step:RANK, got {item!r}"
            )
        if fault.rank < 0:
            raise ValueError(f"{ENV_VAR}: rank must be >= 0 in {item!r}")
        faults.append(fault)
    return faults


def _check_size(fault: Fault, item: str, *, sized: bool) -> None:
    if sized and fault.kind != "slow":
        raise ValueError(f"{ENV_VAR}: only the 'slow' fault takes a size (:FRACTION), got {item!r}")
    # 0 would be no fault at all; a non-finite sleep would never end
    if not (0 < fault.fraction <= MAX_SLOW_FRACTION):
        raise ValueError(f"{ENV_VAR}: slow fraction must be above 0 and at most {MAX_SLOW_FRACTION:g}, got {item!r}")


def check_spec(spec: str | None = None) -> list[Fault]:
    """Parse the variable (or `spec`) against the worker's stage names; ValueError if bad."""
    spec = os.environ.get(ENV_VAR, "") if spec is None else spec
    return parse_faults(spec, stages=POINTS)


def faults_for(case_id: str, rank: int, spec: str | None = None) -> dict[str, str]:
    """stage -> kind for this rank of this case."""
    spec = os.environ.get(ENV_VAR, "") if spec is None else spec
    return {f.stage: f.kind for f in parse_faults(spec) if f.rank == rank and f.case_substring in case_id}


def slow_fraction_for(case_id: str, rank: int, spec: str | None = None) -> float | None:
    """The share of each measured step this rank of this case sleeps (None: no `slow` fault)."""
    spec = os.environ.get(ENV_VAR, "") if spec is None else spec
    sizes = [
        f.fraction for f in parse_faults(spec) if f.kind == "slow" and f.rank == rank and f.case_substring in case_id
    ]
    return sizes[-1] if sizes else None  # like faults_for: a later fault of the same stage wins
