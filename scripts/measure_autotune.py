"""Does `--bench-tune` find the full grid's best for a quarter of its cost? On each grid, runs the
full grid with repeats (the ground truth), then the tuner with the same options, and prints one
row per grid: pick, true best, gap, whether the pick is within the truth's noise, cost ratio.

    python scripts/measure_autotune.py [--grids gpt_tiny,llama3_tiny,hf:tests/data/hf_configs/NAME]
                                       [--repeats 3] [--results-dir DIR] [-- extra --bench-* options]

Each grid is the default 24-case strategy sweep (6 strategies x batch 2,4 x accum 1,2) of the model
on CPU with 2 gloo ranks at seq len 32. Costs are case-seconds (the runner's wall time per case,
summed over repeats) as written in the run folders; the full grid's are measured, not estimated.
"Within noise" uses the recommendation's rule: the pick's tokens/s interval in the ground truth
overlaps the true best's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.report.recommend import speeds_overlap  # noqa: E402
from fsdp_bench.results.metrics import M  # noqa: E402

GRID = [
    "--bench-seq-len",
    "32",
    "--bench-nproc",
    "2",
    "--bench-device",
    "cpu",
    "--bench-batch-sizes",
    "2,4",
    "--bench-grad-accum",
    "1,2",
    "--bench-no-report",
]


def _run(model: str, out: Path, repeats: int, extra: list[str], tune: bool) -> Path:
    before = set(out.iterdir()) if out.is_dir() else set()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:randomly",
        "benchmarks/test_strategy_sweep.py",
        "--bench-model",
        model,
        "--bench-repeats",
        str(repeats),
        "--bench-results-dir",
        str(out),
        *GRID,
        *extra,
    ]
    subprocess.run(cmd + (["--bench-tune"] if tune else []), cwd=ROOT, check=False, capture_output=True)
    made = sorted(set(out.iterdir()) - before)
    if not made:
        raise SystemExit(f"measure_autotune: no run folder made for {model} (tune={tune})")
    return made[-1]


def _results(run: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (run / "cases").glob("*.json")}


def _row(result: dict) -> dict:
    return {"case_id": result["case_id"], **(result.get("metrics") or {})}


def compare(model: str, out: Path, repeats: int, extra: list[str]) -> dict:
    truth_run = _run(model, out, repeats, extra, tune=False)
    tune_run = _run(model, out, repeats, extra, tune=True)
    truth = {
        k: r
        for k, r in _results(truth_run).items()
        if r.get("status") == "ok" and (r.get("metrics") or {}).get(M.params_changed) is not False
    }
    best = max(truth.values(), key=lambda r: r["metrics"][M.tokens_per_s_per_device])
    answer = json.loads(next((tune_run / "tune").glob("*.json")).read_text())
    pick = truth.get(answer["pick"])
    full_s = sum(r.get("duration_s") or 0 for r in _results(truth_run).values())
    gap = (
        None
        if pick is None
        else 100 * (1 - pick["metrics"][M.tokens_per_s_per_device] / best["metrics"][M.tokens_per_s_per_device])
    )
    return {
        "grid": model,
        "cases": len(_results(truth_run)),
        "pick": answer["pick"],
        "true_best": best["case_id"],
        "gap_pct": gap,
        "within_noise": pick is not None and speeds_overlap(_row(best), _row(pick)),
        "tune_case_s": answer["cost"]["spent_case_s"],
        "grid_case_s": full_s,
        "ratio": answer["cost"]["spent_case_s"] / full_s if full_s else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grids", default="gpt_tiny,llama3_tiny")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=Path("results/autotune"))
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    print(f"{'grid':40} {'cases':>5} {'pick':45} {'true best':45} {'gap %':>6} {'in noise':>8} {'cost':>6}")
    for model in [g for g in args.grids.split(",") if g]:
        r = compare(model, args.results_dir, args.repeats, extra)
        gap = "" if r["gap_pct"] is None else f"{r['gap_pct']:.1f}"
        ratio = "" if r["ratio"] is None else f"{100 * r['ratio']:.0f}%"
        print(
            f"{r['grid']:40} {r['cases']:>5} {str(r['pick']):45} {r['true_best']:45} {gap:>6} "
            f"{'yes' if r['within_noise'] else 'NO':>8} {ratio:>6}",
            flush=True,
        )


if __name__ == "__main__":
    main()
