"""How much the worker's measurement adds to step time, with --bench-profile off.

Runs the same case two ways in this process (world size 1, gloo), alternating to spread machine
noise over both: the bare loop (build, shard, optimizer, then `sync; t0; train_step; sync`) and
`fsdp_bench.worker.loop.run`, which adds update norms between steps, the timeline hook (CUDA only),
NVML sampling (CUDA only) and the untimed probe steps after the measured ones. Prints the median
step time of each and the overhead in percent.

    OMP_NUM_THREADS=1 python scripts/measure_overhead_metrics.py --strategy fsdp2 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _setup(case):
    """One rank's model, optimizer and batches, built as the worker builds them (world size 1)."""
    import torch

    from fsdp_bench.worker.setup import build_rank, init_process_group

    device = torch.device(case.device)
    init_process_group(case, device)
    setup = build_rank(case, device=device, rank=0, world_size=1)
    return device, setup.model, setup.source.batches(0), setup.trainer


def bare_loop(case) -> list[float]:
    import torch.distributed as dist

    device, model, batches, trainer = _setup(case)
    try:
        times = []
        for i in range(case.warmup + case.steps):
            t0 = time.perf_counter()
            loss = trainer.step(batches)
            elapsed = time.perf_counter() - t0
            float(loss.item())
            if i >= case.warmup:
                times.append(elapsed)
        return times
    finally:
        dist.destroy_process_group()


def paired_steps(case, pairs: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """Alternate bare and instrumented steps on one model: machine noise hits both sides of a pair
    alike, so the per-pair ratio isolates what the instrumentation costs. The instrumented step
    does exactly what worker.loop.run does around a measured step."""
    import torch.distributed as dist

    from fsdp_bench.worker.memory import MemoryTimeline
    from fsdp_bench.worker.update_norms import UpdateNorms

    device, model, batches, trainer = _setup(case)
    try:
        timeline, norms = MemoryTimeline(device), UpdateNorms(model)
        on_phase = timeline.sample if timeline.enabled else None
        bare, measured, bare_cpu, measured_cpu = [], [], [], []
        for i in range(2 * (pairs + case.warmup)):
            instrumented = i % 2 == 1
            if instrumented:
                norms.before_step()
            t0, c0 = time.perf_counter(), time.thread_time()
            if instrumented:
                timeline.sample("step_start")
            loss = trainer.step(batches, on_phase=on_phase if instrumented else None)
            elapsed, cpu = time.perf_counter() - t0, time.thread_time() - c0
            float(loss.item())
            if instrumented:
                norms.after_step()
            if i >= 2 * case.warmup:
                (measured if instrumented else bare).append(elapsed)
                (measured_cpu if instrumented else bare_cpu).append(cpu)
        return bare, measured, bare_cpu, measured_cpu
    finally:
        dist.destroy_process_group()


def measured_loop(case) -> list[float]:
    from fsdp_bench.worker.loop import run

    return run(case)["step_times_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="fsdp2")
    parser.add_argument("--model", default="gpt_small")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=40, help="bare/instrumented step pairs")
    parser.add_argument(
        "--no-update-norms",
        action="store_true",
        help="skip the per-step parameter copy, to see its share of the overhead",
    )
    args = parser.parse_args()
    if args.no_update_norms:
        import fsdp_bench.worker.update_norms

        fsdp_bench.worker.update_norms.UPDATE_NORM_MAX_BYTES = -1
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from fsdp_bench.plan.case import Case

    case = Case(
        strategy=args.strategy,
        model=args.model,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        steps=args.steps,
        warmup=3,
        nproc=1,
    )
    pb, pm, cb, cm = paired_steps(case, args.pairs)
    # Wall time suffers when other processes take the CPU; the training thread's CPU time
    # (OMP_NUM_THREADS=1, world size 1: no other thread works for the step) does not.
    for label, b_, m_ in (("wall", pb, pm), ("thread cpu", cb, cm)):
        ratios = [m / b for b, m in zip(b_, m_)]
        print(
            f"paired steps, {label} time ({len(ratios)} pairs): median instrumented/bare "
            f"{statistics.median(ratios):.4f} -> overhead {100 * (statistics.median(ratios) - 1):+.2f} %; "
            f"medians {statistics.median(b_) * 1e3:.3f} / {statistics.median(m_) * 1e3:.3f} ms"
        )
    bare, measured = [], []
    for r in range(args.repeats):
        # alternate the order so drift in machine load hits both sides alike
        first, second = (bare_loop, measured_loop) if r % 2 == 0 else (measured_loop, bare_loop)
        for fn in (first, second):
            (bare if fn is bare_loop else measured).extend(fn(case))
    if not bare:
        return
    b, m = statistics.median(bare), statistics.median(measured)
    print(f"case {case.id}: {len(bare)} bare steps, {len(measured)} measured steps")
    print(f"median step time bare     {b * 1e3:.3f} ms  (p10 {sorted(bare)[len(bare) // 10] * 1e3:.3f})")
    print(f"median step time measured {m * 1e3:.3f} ms  (p10 {sorted(measured)[len(measured) // 10] * 1e3:.3f})")
    print(f"overhead {100 * (m - b) / b:+.2f} % (median), {100 * (min(measured) - min(bare)) / min(bare):+.2f} % (min)")
    print(f"load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (noise grows with it)")


if __name__ == "__main__":
    main()
