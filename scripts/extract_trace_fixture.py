"""Cut a torch.profiler chrome trace down to what the GPU busy tests read, as a small gzip'd trace.

Kept: the device activity (kernels, memcpy, memset: start, duration, stream, the name's first 48
characters, enough to tell an NCCL kernel) and the step spans (`fsdp_bench.step`, `ProfilerStep#N`);
dropped: CPU ops, runtime calls, flow arrows, the names' templated tails. The result still loads
with `fsdp_bench.worker.profiling.load_trace_events`, so a test runs the same reading path as a
case does. `--meta KEY=JSON` records facts about the trace's case (its timed step times, NVML's
figure) beside it, with `--source` saying where they and the trace came from.

    git show 6d3e059:results/.../rank0.1795515962257879940.pt.trace.json > /tmp/trace.json
    python scripts/extract_trace_fixture.py /tmp/trace.json tests/data/h100_busy/x.trace.json.gz \
        --source "git 6d3e059: ..." --meta 'step_times_s=[0.124, ...]'
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
STEP_NAMES = ("fsdp_bench.step",)


def keep(event: dict) -> dict | None:
    """The trimmed event, or None when the busy measure does not read it."""
    if event.get("ph") != "X":
        return None
    name = str(event.get("name", ""))
    if event.get("cat") in DEVICE:
        name = name[:48]
    elif not (name in STEP_NAMES or name.startswith("ProfilerStep#")):
        return None
    return {k: event[k] for k in ("ph", "cat", "ts", "dur", "tid") if k in event} | {"name": name}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--source", required=True, help="where the trace and the --meta facts come from")
    parser.add_argument("--meta", action="append", default=[], help="KEY=JSON, repeatable")
    args = parser.parse_args()
    trace = json.loads(args.trace.read_text())
    events = [e for e in (keep(e) for e in trace["traceEvents"]) if e is not None]
    meta = {k: json.loads(v) for k, v in (m.split("=", 1) for m in args.meta)}
    out = {
        "source": args.source,
        "meta": meta,
        "deviceProperties": trace.get("deviceProperties"),
        "traceEvents": events,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt") as fh:
        json.dump(out, fh, separators=(",", ":"))
    print(f"{args.out}: {len(events)} events, {args.out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
