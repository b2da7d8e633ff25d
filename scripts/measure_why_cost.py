"""What the step-parts probe (issue 36) costs a case: the same sweep from two checkouts, run in
alternating order, each case's wall time and its probes' share compared.

    python scripts/measure_why_cost.py --before DIR [--strategies ddp,fsdp2] [--batch-sizes 2,4]
                                       [--rounds 2]

DIR is a checkout without the probe: this one with the `_probe_step_parts(...)` call in
`fsdp_bench/worker/probes.py` removed (the probe alone differs; docs/why.md), or an older commit
(`git archive 1e0e07b | tar -x -C DIR`); this checkout is the after. Each round runs the before sweep and the after sweep (the order alternates between
rounds, so the machine's load falls on both); the sweep is the real `pytest benchmarks` with the
default measuring (gpt_tiny, 2 gloo ranks, until +-2% or 10 s), `--bench-no-report`. Prints the
load average beside every sweep, the per-case mean wall time and probes time of each side, and
the after sweep's probe step against its measured median (probe_vs_median_pct) and the parts'
sum against the probe step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.analysis.case_time import case_time_split  # noqa: E402

PARTS = ("compute", "comm_exposed", "optimizer", "data", "host")


def run_sweep(project: Path, results: Path, args) -> list[dict]:
    cmd = [
        sys.executable, "-m", "pytest", "benchmarks", "-q", "-p", "no:cacheprovider", "--bench-no-report",
        f"--bench-strategies={args.strategies}", f"--bench-batch-sizes={args.batch_sizes}",
        "--bench-grad-accum=1", f"--bench-results-dir={results}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=project, env={**os.environ, "PYTHONPATH": str(project)}, capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"measure_why_cost: the sweep in {project} failed:\n{proc.stdout.decode()[-3000:]}")
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    return [json.loads(p.read_text()) for p in sorted((run / "cases").glob("*.json"))]


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[0] if Path("/proc/loadavg").exists() else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout without the step-parts probe")
    parser.add_argument("--strategies", default="ddp,fsdp2")
    parser.add_argument("--batch-sizes", default="2,4")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not (args.before / "fsdp_bench").is_dir():
        sys.exit(f"measure_why_cost: {args.before} is no fsdp-bench checkout (no fsdp_bench/ in it)")
    sides = {"before": args.before.resolve(), "after": ROOT}
    walls: dict[str, list[float]] = {"before": [], "after": []}
    probes: dict[str, list[float]] = {"before": [], "after": []}
    after_cases: list[dict] = []
    for i in range(args.rounds):
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            load = _load()
            with tempfile.TemporaryDirectory() as tmp:
                cases = run_sweep(sides[side], Path(tmp), args)
            walls[side] += [c["duration_s"] for c in cases]
            probes[side] += [case_time_split(c).get("time_probes_s", float("nan")) for c in cases]
            after_cases += cases if side == "after" else []
            print(
                f"round {i + 1} {side}: {len(cases)} cases, mean wall {statistics.fmean(walls[side][-len(cases) :]):.2f} s, load {load} -> {_load()}"
            )
    for side in walls:
        print(
            f"{side}: case wall mean {statistics.fmean(walls[side]):.2f} s, probes mean {statistics.fmean(probes[side]):.2f} s (n={len(walls[side])})"
        )
    grow = statistics.fmean(walls["after"]) / statistics.fmean(walls["before"]) - 1
    extra = statistics.fmean(probes["after"]) - statistics.fmean(probes["before"])
    print(
        f"case wall time {100 * grow:+.1f}%; probes {extra:+.2f} s per case ({100 * extra / statistics.fmean(walls['before']):+.1f}% of a case)"
    )
    for c in after_cases:
        m = c.get("metrics") or {}
        if m.get("probe_step_s"):
            total = sum(m[f"part_{p}_s_per_step"] for p in PARTS)
            print(
                f"  {c['case_id']}: probe {1e3 * m['probe_step_s']:.1f} ms vs median {1e3 * m['step_time_s_median']:.1f} ms "
                f"({m['probe_vs_median_pct']:+.0f}%), parts sum {100 * total / m['probe_step_s']:.1f}% of the probe step"
            )


if __name__ == "__main__":
    main()
