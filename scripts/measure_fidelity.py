"""Harness fidelity and per-case overhead, measured on this machine.

    python scripts/measure_fidelity.py --strategy fsdp2 --model gpt_small --repeats 3

Fidelity: the suite's median step time for a case vs `scripts/bare_loop.py` (same model,
strategy, batch), interleaved `--repeats` times so drift hits both alike.
Overhead: launch to first step plus teardown (`case_overhead_s`) vs a bare torchrun that only
imports torch and initializes the process group.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.launch.processes import build_env  # noqa: E402
from fsdp_bench.launch.runner import run_case  # noqa: E402
from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.results.layout import create_run_dir  # noqa: E402

BARE_INIT = "import torch, torch.distributed as d; d.init_process_group('gloo'); d.barrier(); d.destroy_process_group()"


def torchrun(nproc: int, *args: str, device: str) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *args],
        # the suite's case environment (runner.py): on CUDA, OMP_NUM_THREADS is the cores per rank,
        # not the CPU's 1, so the bare loop's host work runs with the threads the suite's has
        env=build_env(device=device, ranks_per_node=nproc),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _out, err = proc.communicate()
    except KeyboardInterrupt:
        # SIGTERM lets torchrun stop its workers; the SIGKILL subprocess.run would send orphans them
        proc.terminate()
        proc.wait(timeout=60)
        raise
    if proc.returncode != 0:
        raise SystemExit(f"torchrun {args[0]} failed ({proc.returncode}):\n{err[-3000:]}")
    return time.perf_counter() - start


def bare_loop_version() -> int:
    """scripts/bare_loop.py's BARE_LOOP_VERSION, read from its text (importing it imports torch),
    as scripts/gpu_reference/common.sh reads it to name the report."""
    text = (ROOT / "scripts" / "bare_loop.py").read_text()
    return int(re.search(r"^BARE_LOOP_VERSION = (\d+)$", text, re.M)[1])


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


def case_overhead_s(result: dict) -> tuple[float, float]:
    """(overhead, sharding) in seconds. Overhead is launch to the first training step plus teardown
    after the last measurement, leaving out training itself and the untimed probe steps (FLOP
    count, memory breakdown), which are measurements. Sharding (wrapping the model, building its
    process groups) is part of it, but any job using the strategy pays it, so it is also given
    alone."""
    ranks = result["ranks"]
    to_first_step = max(r["stage_started_unix"]["first_step"] for r in ranks) - result["launched_unix"]
    teardown = result["finished_unix"] - min(r["stage_started_unix"]["end"] for r in ranks)
    sharding = max(r["stage_started_unix"]["optimizer"] - r["stage_started_unix"]["shard"] for r in ranks)
    return to_first_step + teardown, sharding


def _bare_loop_args(args: argparse.Namespace, out: Path) -> list[str]:
    flags = {
        "--strategy": args.strategy,
        "--model": args.model,
        "--batch-size": args.batch_size,
        "--seq-len": args.seq_len,
        "--steps": args.steps,
        "--warmup": args.warmup,
        "--precision": args.precision,
        "--out": out,
    }
    return [str(ROOT / "scripts" / "bare_loop.py"), *(part for flag, v in flags.items() for part in (flag, str(v)))]


def _measure(args: argparse.Namespace, case: Case) -> tuple[list[float], ...]:
    """Per repeat: the bare loop's and the suite's median step time, the suite's per-case
    overhead (and its sharding part), and a bare torchrun's start-up."""
    suite, bare, overhead, sharding, bare_init = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        init_script = Path(tmp) / "init_only.py"
        init_script.write_text(BARE_INIT)
        for i in range(args.repeats):
            out = Path(tmp) / f"bare-{i}.json"
            torchrun(args.nproc, *_bare_loop_args(args, out), device=case.device)
            bare.append(statistics.median(json.loads(out.read_text())))
            result = run_case(case, create_run_dir(Path(tmp) / "runs"), timeout_s=1800)
            if result["status"] != "ok":
                raise SystemExit(f"suite case {case.id}: {result['status']}: {result.get('reason')}")
            suite.append(result["metrics"]["step_time_s_median"])
            total, shard = case_overhead_s(result)
            overhead.append(total)
            sharding.append(shard)
            if not args.no_overhead:
                bare_init.append(torchrun(args.nproc, str(init_script), device=case.device))
    return suite, bare, overhead, sharding, bare_init


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategy", default="fsdp2", choices=["ddp", "fsdp2"])
    p.add_argument("--model", default="gpt_small")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="the suite's --bench-precision")
    p.add_argument(
        "--no-overhead",
        action="store_true",
        help="skip the bare torchrun start-up per repeat (the per-case overhead ratio); fidelity only",
    )
    args = p.parse_args()
    # SIGTERM (scripts/gpu_reference stops a step with it) unwinds like Ctrl-C: the running case
    # or torchrun is stopped instead of left behind.
    signal.signal(signal.SIGTERM, _interrupt)

    from fsdp_bench.plan.devices import count_cuda_devices

    device = "cuda" if count_cuda_devices() > 0 else "cpu"  # the bare loop picks the same way
    shape = {"batch_size": args.batch_size, "seq_len": args.seq_len, "steps": args.steps, "warmup": args.warmup}
    shape["precision"] = args.precision
    case = Case(strategy=args.strategy, model=args.model, nproc=args.nproc, device=device, **shape)
    suite, bare, overhead, sharding, bare_init = _measure(args, case)
    s, b = statistics.median(suite), statistics.median(bare)
    o, sh = statistics.median(overhead), statistics.median(sharding)
    print(f"case: {case.id}")
    print(f"bare loop version: {bare_loop_version()}")
    print(
        f"suite median step time: {s * 1e3:.2f} ms   bare loop: {b * 1e3:.2f} ms   "
        f"suite/bare: {s / b:.4f} ({100 * (s / b - 1):+.2f}%)"
    )
    # Each repeat ran the bare loop then the suite back to back: a pair shares the machine's state.
    pairs = "  ".join(f"{100 * (x / y - 1):+.2f}%" for x, y in zip(suite, bare))
    print(f"suite vs bare per paired repeat: {pairs}")
    if bare_init:
        bi = statistics.median(bare_init)
        print(
            f"per-case overhead: {o:.2f} s (of which sharding {sh:.2f} s)   bare torchrun (import torch + "
            f"init gloo): {bi:.2f} s   ratio: {o / bi:.2f}x, without sharding {(o - sh) / bi:.2f}x"
        )
    else:
        print(f"per-case overhead: {o:.2f} s (of which sharding {sh:.2f} s)   bare torchrun: not measured")
    print(f"raw: suite={suite} bare={bare} overhead={overhead} bare_init={bare_init}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as exc:  # the running case or torchrun was stopped on the way out
        print(f"measure_fidelity.py: interrupted ({exc or 'SIGINT received'}); no result", file=sys.stderr)
        raise SystemExit(130) from None
