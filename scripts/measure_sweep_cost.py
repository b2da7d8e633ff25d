"""What a CPU sweep costs against its floor, and where each case's time goes.

    python scripts/measure_sweep_cost.py [--strategies ddp,fsdp1_full_shard,fsdp2] [--batch-sizes 2,4]
                                         [--project DIR] [--rounds 2]

The floor is what no sweep of these cases can avoid, per case plus the case's timed steps as the
sweep measured them (slowest rank per step). Three floors, strictest last:
- issue floor: a bare `torchrun` whose ranks import torch, join a gloo group (a barrier) and exit;
- strict floor: the same, but torchrun and its ranks skip the interpreter's teardown as the
  sweep's do (`python -m fsdp_bench.worker.torchrun`, `os._exit`): what teardown costs is not a floor;
- training floor: the strict floor whose ranks also build one AdamW, as every training process
  does once; that imports torch._dynamo (about 1 s on this CPU).
The sweep is the real `pytest benchmarks/...` run on gpt_tiny with 2 gloo ranks
(`--bench-no-report`; the report's one-off cost is timed apart). `--project DIR` runs the sweep
from another checkout (e.g. an older commit, for before/after). Rounds alternate floors and sweep
so machine noise falls on all.
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

from fsdp_bench.analysis.case_time import case_time_split, sweep_time_split  # noqa: E402

_BARE = """import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
{extra}dist.destroy_process_group()
{leave}"""
_TRAINING = "torch.optim.AdamW(torch.nn.Linear(8, 8).parameters())  # first optimizer: imports torch._dynamo\n"
_LEAVE = "sys.stdout.flush(); os._exit(0)\n"
# name -> (torchrun module, rank script's extra lines, how the rank leaves)
FLOORS = {
    "issue": ("torch.distributed.run", "", ""),
    "strict": ("fsdp_bench.worker.torchrun", "", _LEAVE),
    "training": ("fsdp_bench.worker.torchrun", _TRAINING, _LEAVE),
}


def _wall(cmd: list[str], **kwargs) -> float:
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        sys.exit(f"measure_sweep_cost: {' '.join(cmd[:4])}... failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.monotonic() - start


def bare_torchrun_s(launcher: str, script: Path, nproc: int) -> float:
    return _wall(
        [
            sys.executable,
            "-m",
            launcher,
            "--standalone",
            f"--nproc-per-node={nproc}",
            "--monitor-interval=0.1",
            str(script),
        ],
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )


def run_sweep(project: Path, results: Path, args) -> float:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks/test_strategy_sweep.py",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--benchmark-disable",
        "--bench-model",
        "gpt_tiny",
        "--bench-device",
        "cpu",
        f"--bench-nproc={args.nproc}",
        f"--bench-strategies={args.strategies}",
        f"--bench-batch-sizes={args.batch_sizes}",
        "--bench-grad-accum=1",
        "--bench-no-report",
        f"--bench-results-dir={results}",
    ]
    env = {**os.environ, "PYTHONPATH": str(project)}
    return _wall(cmd, cwd=project, env=env)


def case_results(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*/cases/*.json"))]


def timed_steps_s(result: dict) -> float:
    per_rank = [r["step_times_s"] for r in result["ranks"] if r.get("step_times_s")]
    return sum(max(step) for step in zip(*per_rank)) if per_rank else 0.0


def report_s(project: Path, run: Path) -> float:
    return _wall(
        [sys.executable, "visualize.py", str(run)], cwd=project, env={**os.environ, "PYTHONPATH": str(project)}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", default="ddp,fsdp1_full_shard,fsdp2")
    parser.add_argument("--batch-sizes", default="2,4")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--project", type=Path, default=ROOT, help="checkout whose sweep is timed")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.rounds < 1 or args.nproc < 1:
        parser.error("--rounds and --nproc must be at least 1")
    n_cases = len(args.strategies.split(",")) * len(args.batch_sizes.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="sweep-cost-"))
    scripts = {}
    for name, (launcher, extra, leave) in FLOORS.items():
        scripts[name] = (launcher, tmp / f"{name}.py")
        scripts[name][1].write_text(_BARE.format(extra=extra, leave=leave))
    floor_s: dict[str, list[float]] = {name: [] for name in FLOORS}
    sweeps = []
    for i in range(args.rounds):
        for name, (launcher, script) in scripts.items():
            floor_s[name] += [bare_torchrun_s(launcher, script, args.nproc) for _ in range(n_cases)]
        results = tmp / f"sweep{i}"
        wall = run_sweep(args.project.resolve(), results, args)
        cases = case_results(results)
        bad = [c["case_id"] for c in cases if c["status"] != "ok"]
        if len(cases) != n_cases or bad:
            sys.exit(f"measure_sweep_cost: the sweep did not finish {n_cases} ok cases (not ok: {bad})")
        sweeps.append((wall, cases, results))
        print(f"round {i + 1}: sweep {wall:.1f} s", flush=True)
    _print_summary(args, n_cases, {k: statistics.median(v) for k, v in floor_s.items()}, sweeps)


def _print_summary(args, n_cases: int, floor_per_case: dict[str, float], sweeps) -> None:
    print(
        f"\n{n_cases} cases ({args.strategies} x batch {args.batch_sizes}, gpt_tiny, {args.nproc} gloo ranks), "
        f"project {args.project}"
    )
    print("per case, median bare torchrun: " + ", ".join(f"{k} {v:.2f} s" for k, v in floor_per_case.items()))
    for wall, cases, _ in sweeps:
        steps = sum(timed_steps_s(c) for c in cases)
        in_cases = sum(c["duration_s"] for c in cases)
        split = sweep_time_split([case_time_split(c) for c in cases])
        parts = ", ".join(f"{k} {v:.1f}" for k, v in split.items())
        floors = ", ".join(
            f"{k} floor {n_cases * v + steps:.1f} s -> {wall / (n_cases * v + steps):.2f}x"
            for k, v in floor_per_case.items()
        )
        print(
            f"sweep {wall:.1f} s (in cases {in_cases:.1f} s: {parts}; pytest outside cases {wall - in_cases:.1f} s); "
            f"timed steps {steps:.1f} s; {floors}"
        )
    run = next(p for p in sweeps[-1][2].iterdir() if p.is_dir())
    print(f"report for the last sweep (visualize.py, once per sweep): {report_s(args.project.resolve(), run):.1f} s")


if __name__ == "__main__":
    main()
