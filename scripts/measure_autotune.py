"""How close does `--bench-tune` come to the exhaustive best, and at what share of its cost? Per
grid: the full grid with repeats (interleaved round-robin, as every sweep with --bench-repeats
runs them: the ground truth), then the tuner with the same options; one row per grid with pick,
true best, gap, whether the pick is within the truth's noise of the best (or, when the tuner
answers with a tie, whether its tied set holds the true best), cost, and the load average sampled
during each run.

    python scripts/measure_autotune.py [--grids gpt_tiny,hf:tests/data/hf_configs/NAME]
        [--repeats 2] [--strategies ...] [--batch-sizes 2,4] [--grad-accum 1,2]
        [--burn N] [--out FILE.json] [--results-dir DIR] [-- extra --bench-* options]
    python scripts/measure_autotune.py --truth-only --out FILE.json [--resume RUN] ...  (the ground truth alone)
    python scripts/measure_autotune.py --truth-only --rescore FILE.json --results-dir DIR --out NEW.json
    python scripts/measure_autotune.py --truth FILE.json [--burn N] --out ROWS.json  (the tuner judged against it)

CPU, 2 gloo ranks, seq len 32. Costs are case-seconds (the runner's wall time per case, summed
over repeats) as written in the run folders; the full grid's are measured, not estimated.
"Within noise" is the recommendation's rule on the ground truth (report.recommend.speeds_overlap:
95% intervals, a repeated case's band spanning its repeats' medians). `--burn N` runs N busy
Python processes beside both runs (a loaded machine; they are this script's children and end
with it). `--out` writes every row as JSON (with the commands) for the docs to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.analysis.repeats import merge_repeats  # noqa: E402
from fsdp_bench.launch.tune import runs_by_purpose  # noqa: E402
from fsdp_bench.report.recommend import speeds_overlap  # noqa: E402
from fsdp_bench.results.io import write_json_atomic  # noqa: E402
from fsdp_bench.results.layout import RunLayout  # noqa: E402
from fsdp_bench.results.metrics import M  # noqa: E402
from fsdp_bench.results.script_records import TRUTH_METRICS, AutotuneMeasurement, AutotuneTruthRun  # noqa: E402

FIXED = ["--bench-seq-len", "32", "--bench-nproc", "2", "--bench-device", "cpu", "--bench-no-report"]
BURNER = "while True: pass"


class LoadSampler:
    """The 1-minute load average every `every_s` seconds while a run goes on (min, mean, max)."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s, self.samples, self._stop = every_s, [], threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self.every_s)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        s = self.samples or [float("nan")]
        return {"min": min(s), "mean": sum(s) / len(s), "max": max(s), "samples": len(self.samples)}


def _run(
    model: str, out: Path, repeats: int, grid: list[str], tune: bool, resume: Path | None = None
) -> tuple[Path, dict, float]:
    before = set(out.iterdir()) if out.is_dir() else set()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "benchmarks/test_strategy_sweep.py"]
    cmd += ["--bench-model", model, "--bench-repeats", str(repeats), "--bench-results-dir", str(out), *grid]
    cmd += ["--bench-tune"] if tune else []
    cmd += ["--bench-resume", str(resume)] if resume is not None else []
    start = time.monotonic()
    with LoadSampler() as load:
        subprocess.run(cmd, cwd=ROOT, check=False, capture_output=True)
    made = [resume] if resume is not None else sorted(set(out.iterdir()) - before)
    if not made:
        raise SystemExit(f"measure_autotune: no run folder made for {model} (tune={tune})")
    return made[-1], load.summary(), time.monotonic() - start


def remerged_results(run: Path) -> list[dict]:
    """Every case result of a run folder, merged again from the repeat files its merge named with
    this code's merge_repeats (a case as written when it has fewer than two, or they are not all
    there: a folder rebuilt from a truth file): a truth is judged by the current rule, whichever
    code wrote its folder."""
    layout, results = RunLayout(run), []
    for path in layout.result_files():
        result = json.loads(path.read_text())
        summaries = result.get(M.repeats) or []
        files = [layout.result_file(result["case_id"], repeat=s.get("repeat", n)) for n, s in enumerate(summaries, 1)]
        if len(files) > 1 and all(f.is_file() for f in files):
            result = merge_repeats([json.loads(f.read_text()) for f in files])
        results.append(result)
    return results


def truth_cases(run: Path) -> list[dict]:
    """Every ground-truth case of a run folder: id, status, case-seconds, repeats, the metrics judged."""
    rows = []
    for result in remerged_results(run):
        metrics = result.get("metrics") or {}
        rows.append(
            {
                "case_id": result["case_id"],
                "status": result.get("status"),
                "duration_s": result.get("duration_s") or 0,
                M.repeats: len(result.get(M.repeats) or []) or 1,
                **{k: metrics[k] for k in TRUTH_METRICS if k in metrics},
            }
        )
    return rows


def run_truth(model: str, out: Path, repeats: int, grid: list[str], resume: Path | None = None) -> dict:
    """The exhaustive grid with repeats (interleaved): its cases, load and wall time. `resume`: a
    truth's run folder stopped before its last repeat, finished with --bench-resume (its ok repeats
    kept); the load and wall time are then this session's, the cases' seconds all of them."""
    run, load, wall = _run(model, out, repeats, grid, tune=False, resume=resume)
    return {"grid": model, "run": run.name, "load": load, "wall_s": wall, "cases": truth_cases(run)}


def judge(truth: dict, answer: dict) -> dict:
    """The tuner's answer against the ground truth: pick, true best, gap, within noise, tied set, cost."""
    everything = truth["cases"]
    ok = {r["case_id"]: r for r in everything if r["status"] == "ok" and r.get(M.params_changed) is not False}
    if not ok:
        raise SystemExit(f"measure_autotune: the ground truth of {truth['grid']} has no ok case")
    speed = {k: r[M.tokens_per_s_per_device] for k, r in ok.items()}
    best = max(ok.values(), key=lambda r: speed[r["case_id"]])
    named = [answer["pick"], *answer["tied"]] if answer["pick"] else []
    full_s = sum(r["duration_s"] for r in everything)
    priced = truth_priced_seconds(everything, answer)
    pick = ok.get(answer["pick"])
    return {
        "grid": truth["grid"],
        "cases": len(everything),
        "pick": answer["pick"],
        "single_winner": answer.get("single_winner"),
        "tied": answer["tied"],
        "true_best": best["case_id"],
        "truth_tied_with_best": sorted(k for k, r in ok.items() if speeds_overlap(best, r)),
        "gap_pct": None if pick is None else 100 * (1 - speed[answer["pick"]] / speed[best["case_id"]]),
        "within_noise": pick is not None and speeds_overlap(best, pick),
        "tied_set_holds_best": best["case_id"] in named,
        "unmeasured_within_noise": len(answer.get("unmeasured_within_noise") or []),
        "best_unmeasured_within_noise": best["case_id"] in (answer.get("unmeasured_within_noise") or []),
        "drift": answer.get("drift"),
        "stopped": answer["stopped"],
        "tune_case_s": answer["cost"]["spent_case_s"],
        "tune_runs": sum(r["repeat_count"] for r in answer["measured"]),
        "runs_by_purpose": dict(runs_by_purpose(answer)),
        "grid_case_s": full_s,
        "ratio": answer["cost"]["spent_case_s"] / full_s if full_s else None,
        "tune_case_s_truth_priced": priced,
        "ratio_truth_priced": priced / full_s if full_s and priced is not None else None,
    }


def truth_priced_seconds(cases: list[dict], answer: dict) -> float | None:
    """The tuner's runs priced at the ground truth's seconds per run of the same cases: its cost
    had it run at the truth's load. A tuning beside burners pays more per run than the truth did
    (on the gpt_tiny 96-case grid 19-21 case-seconds a run against the truth's 16), so the
    measured ratio mixes the two loads; this one compares the runs alone. None when a measured
    case is not in the truth."""
    per_run = {r["case_id"]: r["duration_s"] / max(1, r[M.repeats]) for r in cases}
    runs = [(m.get("case_id"), m["repeat_count"]) for m in answer["measured"]]
    if not all(case_id in per_run for case_id, _ in runs):
        return None
    return sum(per_run[case_id] * n for case_id, n in runs)


def compare(truth: dict, out: Path, repeats: int, grid: list[str]) -> dict:
    """Run the tuner with the ground truth's options and judge its answer."""
    tune_run, tune_load, tune_wall = _run(truth["grid"], out, repeats, grid, tune=True)
    answers = sorted((tune_run / "tune").glob("*.json"))
    if not answers:
        raise SystemExit(f"measure_autotune: the tuner wrote no answer in {tune_run}")
    row = judge(truth, json.loads(answers[0].read_text()))
    row.update(
        load_truth=truth["load"],
        load_tune=tune_load,
        wall_s={"truth": truth["wall_s"], "tune": tune_wall},
        runs={"truth": truth["run"], "tune": tune_run.name},
    )
    return row


def _print(r: dict) -> None:
    gap = "" if r["gap_pct"] is None else f"{r['gap_pct']:.1f}"
    ratio = "" if r["ratio"] is None else f"{100 * r['ratio']:.0f}%"
    verdict = "single" if r["single_winner"] else f"tied {len(r['tied']) + 1}"
    print(
        f"{r['grid']:30} {r['cases']:>5} {str(r['pick']):45} {verdict:>8} {r['true_best']:45} {gap:>6} "
        f"{'yes' if r['within_noise'] else 'NO':>8} {'yes' if r['tied_set_holds_best'] else 'NO':>6} {ratio:>6} "
        f"{r['load_truth']['mean']:>5.1f} {r['load_tune']['mean']:>5.1f}",
        flush=True,
    )


def _read_truth(path: Path) -> dict:
    """A --truth-only file, or one clear line on why it cannot be reused."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("truths"), list) or "options" not in data:
            raise ValueError("not a --truth-only file (no truths/options)")
    except (OSError, ValueError) as exc:
        raise SystemExit(f"measure_autotune: --truth {path}: {exc}") from None
    return data


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grids", default="gpt_tiny,llama3_tiny")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--strategies", default=None, help="default: the sweep's six")
    parser.add_argument("--batch-sizes", default="2,4")
    parser.add_argument("--grad-accum", default="1,2")
    parser.add_argument("--burn", type=int, default=0, help="busy processes beside the runs")
    parser.add_argument("--truth-only", action="store_true", help="run only the ground truth; --out keeps it")
    parser.add_argument(
        "--truth",
        type=Path,
        default=None,
        help="judge against the ground truth of a --truth-only file (its grids, options and repeats) instead of running it",
    )
    parser.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="with --truth-only: finish this ground truth's run folder (stopped early) instead of starting one",
    )
    parser.add_argument(
        "--rescore",
        type=Path,
        default=None,
        help="with --truth-only: this --truth-only file's cases read again from its run folders (under "
        "--results-dir) with this code's merge of repeats; its load, wall time and command kept",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--results-dir", type=Path, default=Path("results/autotune"))
    return parser


def main() -> None:
    args, extra = _parser().parse_known_args()
    if args.truth_only and (args.out is None or args.truth is not None):
        raise SystemExit("measure_autotune: --truth-only needs --out FILE and no --truth")
    if args.resume is not None and (not args.truth_only or not (args.resume / "cases").is_dir()):
        raise SystemExit("measure_autotune: --resume needs --truth-only and a run folder (with cases/)")
    if args.repeats < 1 or args.burn < 0:
        raise SystemExit("measure_autotune: --repeats must be at least 1 and --burn at least 0")
    if args.rescore is not None:
        if not args.truth_only or args.out is None:
            raise SystemExit("measure_autotune: --rescore needs --truth-only and --out")
        data = _read_truth(args.rescore)
        for truth in data["truths"]:
            if not (args.results_dir / truth["run"] / "cases").is_dir():
                raise SystemExit(f"measure_autotune: --rescore: no run folder {args.results_dir / truth['run']}")
            truth["cases"] = truth_cases(args.results_dir / truth["run"])
        write_json_atomic(args.out, data, shape=AutotuneTruthRun, overwrite=True)
        return
    kept = _read_truth(args.truth) if args.truth is not None else None
    grid = [*FIXED, "--bench-batch-sizes", args.batch_sizes, "--bench-grad-accum", args.grad_accum]
    grid += ["--bench-strategies", args.strategies] if args.strategies else []
    grid += [a for a in extra if a != "--"]
    repeats = args.repeats if kept is None else kept["repeats"]
    grid = grid if kept is None else kept["options"]
    models = [g for g in args.grids.split(",") if g] if kept is None else [t["grid"] for t in kept["truths"]]
    burners = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(args.burn)]
    command = ["python", "scripts/measure_autotune.py", *sys.argv[1:]]
    rows, truths = [], []
    try:
        if not args.truth_only:
            print(
                f"{'grid':30} {'cases':>5} {'pick':45} {'verdict':>8} {'true best':45} {'gap %':>6} "
                f"{'in noise':>8} {'holds':>6} {'cost':>6} {'load':>5} {'load':>5}"
            )
        for i, model in enumerate(models):
            truth = (
                kept["truths"][i]
                if kept is not None
                else run_truth(model, args.results_dir, repeats, grid, args.resume)
            )
            truths.append(truth)
            if args.truth_only:
                print(f"{model}: ground truth {truth['run']}, {len(truth['cases'])} cases, {truth['wall_s']:.0f} s")
                continue
            rows.append(compare(truth, args.results_dir, repeats, grid))
            _print(rows[-1])
    finally:
        for p in burners:
            p.kill()
            p.wait()
    if args.truth_only:
        data = {"command": command, "burn": args.burn, "repeats": repeats, "options": grid, "truths": truths}
        write_json_atomic(args.out, data, shape=AutotuneTruthRun, overwrite=True)
    elif args.out is not None:
        data = {"command": command, "burn": args.burn, "rows": rows}
        data.update({"truth": str(args.truth)} if args.truth is not None else {})
        write_json_atomic(args.out, data, shape=AutotuneMeasurement, overwrite=True)


if __name__ == "__main__":
    main()
