"""What a CPU sweep costs against its floor, and where each case's time goes.

    python scripts/measure_sweep_cost.py [--strategies ddp,fsdp1_full_shard,fsdp2] [--batch-sizes 2,4]
                                         [--project DIR] [--rounds 2]

The floor is what no sweep of these cases can avoid: per case, one bare torchrun whose ranks
import torch and join a gloo group (a barrier, then exit), plus the case's timed steps as the
sweep measured them (slowest rank per step). A second, "training floor" adds what any training
program pays once per process on top of that: building its first optimizer, which imports
torch._dynamo (about 1 s on this CPU). The sweep is the real `pytest benchmarks/...` run on
gpt_tiny with 2 gloo ranks (`--bench-no-report`; the report's one-off cost is timed apart).
`--project DIR` runs the sweep from another checkout (e.g. an older commit, for before/after).
Rounds alternate floor and sweep so machine noise falls on both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.analysis.case_time import case_time_split  # noqa: E402

_BARE = """import torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
{extra}dist.destroy_process_group()
"""
_TRAINING = "torch.optim.AdamW(torch.nn.Linear(8, 8).parameters())  # first optimizer: imports torch._dynamo\n"


def _wall(cmd: list[str], **kwargs) -> float:
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        sys.exit(f"measure_sweep_cost: {' '.join(cmd[:4])}... failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.monotonic() - start


def bare_torchrun_s(script: Path, nproc: int) -> float:
    return _wall([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                  "--monitor-interval=0.1", str(script)], env={**os.environ, "OMP_NUM_THREADS": "1"})


def run_sweep(project: Path, results: Path, args) -> float:
    cmd = [sys.executable, "-m", "pytest", "benchmarks/test_strategy_sweep.py", "-q", "-p", "no:cacheprovider",
           "-p", "no:randomly", "--benchmark-disable", "--bench-model", "gpt_tiny", "--bench-device", "cpu",
           f"--bench-nproc={args.nproc}", f"--bench-strategies={args.strategies}",
           f"--bench-batch-sizes={args.batch_sizes}", "--bench-grad-accum=1", "--bench-no-report",
           f"--bench-results-dir={results}"]
    env = {**os.environ, "PYTHONPATH": str(project)}
    return _wall(cmd, cwd=project, env=env)


def case_results(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*/cases/*.json"))]


def timed_steps_s(result: dict) -> float:
    per_rank = [r["step_times_s"] for r in result["ranks"] if r.get("step_times_s")]
    return sum(max(step) for step in zip(*per_rank)) if per_rank else 0.0


def report_s(project: Path, run: Path) -> float:
    return _wall([sys.executable, "visualize.py", str(run)], cwd=project, env={**os.environ, "PYTHONPATH": str(project)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", default="ddp,fsdp1_full_shard,fsdp2")
    parser.add_argument("--batch-sizes", default="2,4")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--project", type=Path, default=ROOT, help="checkout whose sweep is timed")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    n_cases = len(args.strategies.split(",")) * len(args.batch_sizes.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="sweep-cost-"))
    bare, training = tmp / "bare.py", tmp / "training.py"
    bare.write_text(_BARE.format(extra=""))
    training.write_text(_BARE.format(extra=_TRAINING))
    bare_s, training_s, sweeps = [], [], []
    for i in range(args.rounds):
        bare_s += [bare_torchrun_s(bare, args.nproc) for _ in range(n_cases)]
        training_s += [bare_torchrun_s(training, args.nproc) for _ in range(n_cases)]
        results = tmp / f"sweep{i}"
        wall = run_sweep(args.project.resolve(), results, args)
        cases = case_results(results)
        bad = [c["case_id"] for c in cases if c["status"] != "ok"]
        if len(cases) != n_cases or bad:
            sys.exit(f"measure_sweep_cost: the sweep did not finish {n_cases} ok cases (not ok: {bad})")
        sweeps.append((wall, cases, results))
        print(f"round {i + 1}: sweep {wall:.1f} s", flush=True)
    _print_summary(args, n_cases, bare_s, training_s, sweeps)


def _print_summary(args, n_cases: int, bare_s: list[float], training_s: list[float], sweeps) -> None:
    bare, training = statistics.median(bare_s), statistics.median(training_s)
    print(f"\n{n_cases} cases ({args.strategies} x batch {args.batch_sizes}, gpt_tiny, {args.nproc} gloo ranks), "
          f"project {args.project}")
    print(f"bare torchrun + import torch + gloo barrier: median {bare:.2f} s of {len(bare_s)}; "
          f"the same + first optimizer: median {training:.2f} s")
    for wall, cases, results in sweeps:
        steps = sum(timed_steps_s(c) for c in cases)
        floor, training_floor = n_cases * bare + steps, n_cases * training + steps
        in_cases = sum(c["duration_s"] for c in cases)
        split = {}
        for c in cases:
            for key, value in case_time_split(c).items():
                split[key] = split.get(key, 0.0) + value
        parts = ", ".join(f"{k[5:-2]} {v:.1f}" for k, v in split.items()) or "no stage times (older checkout)"
        print(f"sweep {wall:.1f} s (in cases {in_cases:.1f} s: {parts}; pytest outside cases {wall - in_cases:.1f} s); "
              f"timed steps {steps:.1f} s; floor {floor:.1f} s -> {wall / floor:.2f}x; "
              f"training floor {training_floor:.1f} s -> {wall / training_floor:.2f}x")
    run = next(p for p in sweeps[-1][2].iterdir() if p.is_dir())
    print(f"report for the last sweep (visualize.py, once per sweep): {report_s(args.project.resolve(), run):.1f} s")


if __name__ == "__main__":
    main()
