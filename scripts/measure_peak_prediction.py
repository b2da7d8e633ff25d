"""Predicted vs measured peak memory per case, and the worst error: the evidence for the peak
model (fsdp_bench.analysis.fit.predict_peak_bytes).

    python scripts/measure_peak_prediction.py            # every case below (~15 min on 2 CPU cores)
    python scripts/measure_peak_prediction.py --quick    # simulated cases only
    python scripts/measure_peak_prediction.py --golden-only
    python scripts/measure_peak_prediction.py --holdout [--configs 30] [--real-configs N] [--out FOLDER]
    python scripts/measure_peak_prediction.py --holdout --first-seed S --configs N --out FOLDER --add-real-ranks

Cases (fp32 AdamW, batch 2, seq 32, 2 steps): the three unseen configs in tests/data/hf_configs
on 1-4 real gloo ranks (torchrun) and simulated at 8, 64 and 512 ranks, every shipped tiny
flavor, and the golden runs' recorded measurements against today's prediction. Each case runs
through the runner exactly as a sweep does; the measured peak on CPU is MemTracker's peak of live
tensor bytes on the untimed probe step. FSDP1 cases are left out here: MemTracker refuses FSDP1
(its CPU peak comes from the profiler's memory events, worker.profiled_peak; --holdout
--strategies measures it).

--holdout: the out-of-sample check (issue 35). Generated configs of the held-out seed range
(fsdp_bench.plan.generated_configs.FRESH_HOLDOUT_SEEDS by default, never used to change the model) x ddp, fsdp2,
fsdp2_no_reshard (--strategies: others, e.g. FSDP1's) x accumulation 1, 2 (reduce every micro-step) and 2 (--bench-grad-sync last), on
2 or 3 real gloo ranks (torchrun, as a sweep runs them; the config's seed parity picks) and
simulated at 64 and 512 ranks (rank 0 on the fake process group, in this process, as
worker.simulate runs it); on the real ranks also the fake-tensor estimator (worker.estimate) against
the measured peak, where it can trace the strategy (not FSDP1). Prints each case and the share within 5 % and beyond 8 %, and writes every row
to --out (a PeakCheckRun; each row says its measure_s and, on real ranks, estimate_s).
--add-real-ranks measures only the real-rank rows of seed files holding simulated rows only (an
earlier run's --real-configs) and adds them to those files. Cost on the shared 2-core VM
(docs/beyond-one-machine.md, "Out of sample"): one run of 24 configs, 3 with real ranks, took 53 min
at load 1.9-14.0 (15-30 s a real case, 3-15 s a simulated one); --repredict re-scores stored
measurements in seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.analysis.fit import predict_case_peak, predict_peak_bytes  # noqa: E402
from fsdp_bench.launch.runner import run_case  # noqa: E402
from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.plan.flavors import MODEL_FLAVORS, flavor_for  # noqa: E402
from fsdp_bench.plan.generated_configs import FRESH_HOLDOUT_SEEDS, generated_config, write_generated_config  # noqa: E402
from fsdp_bench.results.io import read_json, write_json_atomic  # noqa: E402
from fsdp_bench.results.metrics import M  # noqa: E402
from fsdp_bench.results.script_records import PeakCheckRow, PeakCheckRun  # noqa: E402
from fsdp_bench.worker.simulate import simulated_peak  # noqa: E402

UNSEEN = [f"hf:{p.parent}" for p in sorted((ROOT / "tests" / "data" / "hf_configs").glob("*/config.json"))]
TINY = sorted(name for name in MODEL_FLAVORS if name.endswith("_tiny"))
STRATEGIES = ("ddp", "fsdp2", "fsdp2_no_reshard")
SMALL = dict(batch_size=2, seq_len=32, steps=2, warmup=1)


def planned_cases(quick: bool) -> list[Case]:
    cases = []
    for model in UNSEEN:
        if not quick:
            cases += [Case(strategy=s, nproc=n, model=model, **SMALL) for n in (1, 2, 3, 4) for s in STRATEGIES]
        cases += [
            Case(strategy=s, nproc=n, model=model, simulate=True, **SMALL)
            for n in (8, 64, 512)
            for s in ("fsdp2", "fsdp2_no_reshard")
        ]
    for model in TINY:
        cases += [Case(strategy=s, nproc=n, model=model, simulate=True, **SMALL) for n in (2, 8) for s in STRATEGIES]
    return cases


def measured_row(result: dict) -> dict | None:
    """(case id, predicted, measured, phase) from an ok result's rank 0, None without a peak."""
    rank0 = next((r for r in result.get("ranks", []) if r.get("rank") == 0), None)
    measured = (rank0 or {}).get("memory", {}).get("peak_allocated_bytes")
    if result.get("status") != "ok" or not measured or (rank0 or {}).get("params_changed") is False:
        return None  # no peak, or a case that does not train (optimizer built on stale tensors)
    case = result["case"]
    p = predict_peak_bytes(
        case["strategy"],
        flavor_for(case["model"]),
        case["nproc"],
        case["batch_size"],
        seq_len=case["seq_len"],
        grad_accum=case["grad_accum"],
        optimizer_impl=case.get("optimizer_impl", "auto"),
        device=case["device"],
        grad_sync=case.get("grad_sync", "every"),
        gloo=Case.from_dict(case).runs_gloo(),
    )
    return {
        "case": result["case_id"],
        "predicted": p["peak_bytes"],
        "measured": measured,
        "phase": p["phase"],
        "error_pct": 100 * (p["peak_bytes"] - measured) / measured,
    }


def golden_rows() -> list[dict]:
    rows = []
    for path in sorted((ROOT / "tests" / "data" / "golden").glob("*/cases/*.json")):
        row = measured_row(read_json(path))
        if row is not None:
            rows.append({**row, "case": f"golden/{path.parent.parent.name}/{row['case']}"})
    return rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="simulated cases only (no torchrun)")
    parser.add_argument("--golden-only", action="store_true", help="only the golden runs' recorded measurements")
    parser.add_argument("--holdout", action="store_true", help="generated held-out configs (issue 35)")
    parser.add_argument("--configs", type=int, default=30, help="--holdout: how many held-out seeds (from the first)")
    parser.add_argument("--real-configs", type=int, default=None, help="--holdout: of those, how many on real ranks")
    parser.add_argument("--first-seed", type=int, default=FRESH_HOLDOUT_SEEDS.start, help="--holdout: the first seed")
    parser.add_argument("--out", type=Path, default=None, help="--holdout: a folder for the PeakCheckRun files")
    parser.add_argument(
        "--strategies",
        default=",".join(STRATEGIES),
        help=f"--holdout: the strategies each config runs (default {','.join(STRATEGIES)})",
    )
    parser.add_argument(
        "--add-real-ranks",
        action="store_true",
        help="--holdout --out: a seed file with simulated rows only gets its real-rank rows measured and added",
    )
    parser.add_argument("--repredict", type=Path, default=None, help="a --holdout file: re-score its measurements")
    parser.add_argument(
        "--reestimate",
        default="",
        help="--repredict: also run this checkout's fake-tensor estimator again on these strategies' real-rank rows (e.g. ddp)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.reestimate, problem = _reestimate_strategies(args.reestimate, args.repredict)
    if problem:
        print(f"--reestimate: {problem}", file=sys.stderr)
        return 2
    if args.repredict:
        if args.out is not None and args.out.exists():
            print(f"{args.out} exists: refusing to overwrite it", file=sys.stderr)
            return 2
        return repredict(args)
    if args.add_real_ranks and (not args.holdout or args.out is None):
        print("--add-real-ranks adds rows to the seed files of --holdout --out FOLDER: give both", file=sys.stderr)
        return 2
    if args.holdout:
        args.strategies, problem = _holdout_strategies(args.strategies)
        if problem:
            print(f"--strategies: {problem}", file=sys.stderr)
            return 2
        return run_holdout(args)
    rows = golden_rows()
    for row in rows:
        print(
            f"{row['case']:70s} {row['predicted']:>11,.0f} {row['measured']:>11,.0f} {row['error_pct']:+7.2f}% {row['phase']}"
        )
    if not args.golden_only:
        out = Path(tempfile.mkdtemp(prefix="peak_prediction_"))
        (out / "cases").mkdir()
        for case in planned_cases(args.quick):
            result = run_case(case, out, timeout_s=600)
            row = measured_row(result)
            if row is None:
                print(
                    f"{result['case_id']:70s} {result['status']}: no measured peak ({(result.get('reason') or '')[:80]})",
                    flush=True,
                )
                continue
            rows.append(row)
            print(
                f"{row['case']:70s} {row['predicted']:>11,.0f} {row['measured']:>11,.0f} "
                f"{row['error_pct']:+7.2f}% {row['phase']}",
                flush=True,
            )
    worst = max(rows, key=lambda r: abs(r["error_pct"]))
    within = sum(abs(r["error_pct"]) <= 5 for r in rows)
    print(
        f"\n{within}/{len(rows)} cases within 5%. Worst peak prediction error: {worst['error_pct']:+.2f}% on "
        f"{worst['case']} (predicted {worst['predicted']:,.0f} B, measured {worst['measured']:,.0f} B, {worst['phase']})"
    )
    return 0


def _reestimate_strategies(text: str, repredict: Path | None) -> tuple[list[str], str | None]:
    """--reestimate's strategies, and what is wrong with them (None: nothing)."""
    names = [s for s in text.split(",") if s]
    unknown = sorted(set(names) - set(STRATEGIES))
    if unknown:
        return names, f"unknown strategy {unknown[0]!r} (the check's: {', '.join(STRATEGIES)})"
    return names, "needs --repredict" if names and repredict is None else None


def _holdout_strategies(text: str) -> tuple[list[str], str | None]:
    """--strategies' names, and what is wrong with them (None: nothing)."""
    from fsdp_bench.plan.catalog import STRATEGIES as CATALOG

    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in CATALOG]
    if unknown or not names:
        return names, f"unknown strategy {unknown[0]!r}" if unknown else "no strategy given"
    return names, None


ACCUMULATIONS = ((1, "every"), (2, "every"), (2, "last"))
SIMULATED = (64, 512)


def holdout_cases(
    model: str, nproc: int, real: bool, simulated: bool = True, strategies=STRATEGIES
) -> list[tuple[str, Case]]:
    """("real" or "simulated", case) for one generated model: every strategy and accumulation,
    on `nproc` real ranks if `real`, at the SIMULATED world sizes if `simulated`."""
    worlds = [("real", nproc)] * real + [("simulated", n) for n in SIMULATED] * simulated
    return [
        (kind, Case(strategy=s, nproc=n, model=model, grad_accum=ga, grad_sync=sync, simulate=kind != "real", **SMALL))
        for kind, n in worlds
        for s in strategies
        for ga, sync in ACCUMULATIONS
    ]


def real_peak(case: Case, out: Path) -> tuple[int | None, str]:
    """A real case through the runner, as a sweep runs it: rank 0's peak, or None and why not."""
    result = run_case(case, out, timeout_s=600)
    rank0 = next((r for r in result.get("ranks", []) if r.get("rank") == 0), None)
    measured = (rank0 or {}).get("memory", {}).get("peak_allocated_bytes")
    if result.get("status") != "ok" or not measured:
        return None, f"{result.get('status')}: {(result.get('reason') or 'no measured peak')[:120]}"
    return measured, ""


def check_row(seed: int, kind: str, case: Case, out: Path) -> PeakCheckRow:
    """One case measured and predicted (on real ranks, estimated too)."""
    row: PeakCheckRow = {
        "case": case.id,
        "case_fields": case.to_dict(),
        "seed": seed,
        "model_type": generated_config(seed)["model_type"],
        "ranks": kind,
    }
    started = time.perf_counter()
    try:
        measured, why = real_peak(case, out) if kind == "real" else (simulated_peak(case), "")
    except Exception as exc:  # a failing case is data: the row says why
        measured, why = None, f"failed: {type(exc).__name__}: {str(exc)[:120]}"
    # where a config's time goes (a real case's torchrun, a simulated rank, the estimator)
    row["measure_s"] = round(time.perf_counter() - started, 1)
    if measured is None:
        return {**row, "status": "no peak", "reason": why}
    row.update(status="ok", measured_bytes=measured)
    row = scored_row(row, case)
    from fsdp_bench.worker.estimate import refusal

    return estimated_row(row, case) if kind == "real" and refusal(case) is None else row


def estimated_row(row: PeakCheckRow, case: Case) -> PeakCheckRow:
    """The row with this checkout's fake-tensor estimate of its case beside the measurement."""
    from fsdp_bench.worker.estimate import estimate_peak

    started = time.perf_counter()
    estimated = estimate_peak(case)["probe_peak_bytes"]
    error = 100 * (estimated - row["measured_bytes"]) / row["measured_bytes"]
    estimate_s = round(time.perf_counter() - started, 1)
    return {**row, "estimated_bytes": estimated, "estimate_s": estimate_s, M.peak_estimate_error_pct: error}


def scored_row(row: PeakCheckRow, case: Case) -> PeakCheckRow:
    """The row's prediction by today's peak model (the measurement does not depend on it)."""
    p = predict_case_peak(case)
    error = 100 * (p["peak_bytes"] - row["measured_bytes"]) / row["measured_bytes"]
    return {**row, "phase": p["phase"], "predicted_bytes": p["peak_bytes"], M.peak_prediction_error_pct: error}


def repredict(args: argparse.Namespace) -> int:
    """--repredict FILE or FOLDER (a --holdout --out folder: its seed files, so far): the same
    measurements scored by this checkout's peak model (each model rebuilt from its seed) and, for
    the --reestimate strategies, its fake-tensor estimator; printed and written to --out."""
    old = read_json(args.repredict) if args.repredict.is_file() else _merged_seed_files(args.repredict)
    folder = Path(tempfile.mkdtemp(prefix="peak_holdout_"))
    rows = []
    for row in old["cases"]:
        if row["status"] == "ok":
            model = write_generated_config(row["seed"], folder)  # the model path of the run may be gone
            case = Case.from_dict({**row["case_fields"], "model": model})
            row = scored_row(row, case)
            if "estimated_bytes" in row and case.strategy in args.reestimate:
                row = estimated_row(row, case)
        rows.append(row)
        print(_row_text(row))
    summary = holdout_summary(rows)
    print(f"\n{summary}")
    if args.out is not None:
        new = {**old, "cases": rows, "summary": summary, "predicted_at": _git_sha()}
        write_json_atomic(args.out, new, shape=PeakCheckRun)
    return 0


def _merged_seed_files(folder: Path) -> PeakCheckRun:
    """The seed files of a --holdout folder as one run: every row, the wall time summed, the
    load averages' lowest and highest."""
    parts = [read_json(p) for p in sorted(folder.glob("seed-*.json"), key=lambda p: int(p.stem.split("-")[1]))]
    if not parts:
        raise SystemExit(f"{folder}: no seed-<N>.json files")
    runs = parts + [p["real_ranks_added"] for p in parts if "real_ranks_added" in p]  # both measured rows
    loads = [x for p in runs for x in p["load_average"]]
    return {
        **{k: v for k, v in parts[0].items() if k != "real_ranks_added"},
        "seeds": [s for p in parts for s in p["seeds"]],
        "cases": [r for p in parts for r in p["cases"]],
        "wall_s": round(sum(p["wall_s"] for p in runs), 1),
        "load_average": [min(loads), max(loads)],
        "utc_time": parts[-1]["utc_time"],
    }


def holdout_summary(rows: list[PeakCheckRow]) -> dict:
    """Counts within 5 % / beyond 8 % (all, real, simulated), the worst case, the estimator's."""
    ok = [r for r in rows if r["status"] == "ok"]
    err = M.peak_prediction_error_pct
    out = {"cases": len(rows), "measured": len(ok)}
    for kind in ("real", "simulated", None):
        some = [r for r in ok if kind in (None, r["ranks"])]
        out[kind or "all"] = {
            "cases": len(some),
            "within_5_pct": sum(abs(r[err]) <= 5 for r in some),
            "beyond_8_pct": sum(abs(r[err]) > 8 for r in some),
        }
    worst = max(ok, key=lambda r: abs(r[err]), default=None)
    out["worst"] = {"case": worst["case"], err: worst[err], "phase": worst["phase"]} if worst else None
    # a "fits" answer needs a margin at least the largest under-prediction (analysis.fit.FIT_MARGIN)
    out["most_under_pct"] = min((r[err] for r in ok), default=None)
    est = [r[M.peak_estimate_error_pct] for r in ok if M.peak_estimate_error_pct in r]
    out["estimator"] = {
        "cases": len(est),
        "within_2_pct": sum(abs(e) <= 2 for e in est),
        "worst_pct": max(est, key=abs, default=None),
    }
    return out


def _git_sha() -> str | None:
    run = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return run.stdout.strip() or None


def run_holdout(args: argparse.Namespace) -> int:
    """--holdout: every generated case, printed as it ends. With --out (a folder), each config's
    rows go to seed-<N>.json as soon as its cases end (a seed with a file is not run again: a
    long run can be stopped and resumed; with --add-real-ranks a simulated-only one gets its
    real-rank rows added), then summary.json holds every row and the summary."""
    import torch

    # The in-process parts (estimator, simulated ranks) on one intra-op thread, as each torchrun
    # rank runs (OMP_NUM_THREADS=1): the tiny generated models gain nothing from a second thread,
    # and on the shared 2-core machine its spinning waits only slow them. MemTracker counts the
    # tensors ops return, which the thread count does not change (tests/unit/test_peak_holdout_script.py).
    torch.set_num_threads(1)
    started, load_start = time.time(), os.getloadavg()[0]
    folder = Path(tempfile.mkdtemp(prefix="peak_holdout_"))
    (folder / "run" / "cases").mkdir(parents=True)
    seeds = list(range(args.first_seed, args.first_seed + args.configs))
    real_count = args.configs if args.real_configs is None else args.real_configs
    facts = {
        "schema_version": 1,
        "command": " ".join(["python", "scripts/measure_peak_prediction.py", *sys.argv[1:]]),
        "git_sha": _git_sha(),
        "torch": f"{torch.__version__} ({platform.machine()}, {os.cpu_count()} CPUs, in-process threads {torch.get_num_threads()})",
        "predicted_at": None,
    }
    rows: list[PeakCheckRow] = []
    for i, seed in enumerate(seeds):
        path = args.out / f"seed-{seed}.json" if args.out else None
        work = seed_work(path, real=i < real_count, add_real=args.add_real_ranks)
        if work is None:
            continue
        t0, load0 = time.time(), os.getloadavg()[0]
        model = write_generated_config(seed, folder)
        seed_rows = []
        cases = holdout_cases(
            model, 2 + seed % 2, real=i < real_count, simulated=work == "all", strategies=args.strategies
        )
        for kind, case in cases:
            seed_rows.append(check_row(seed, kind, case, folder / "run"))
            print(_row_text(seed_rows[-1]), flush=True)
        rows += seed_rows
        if path is not None:
            part = _run_file(facts, [seed], seed_rows, t0, load0)
            if work == "real":
                part = with_real_rows(read_json(path), part)
            write_json_atomic(path, part, shape=PeakCheckRun, overwrite=work == "real")
    rows = [r for seed in seeds for r in _seed_rows(args.out, seed)] if args.out else rows
    print(f"\n{holdout_summary(rows)}")
    if args.out is not None:
        whole = _run_file(facts, seeds, rows, started, load_start)
        write_json_atomic(args.out / "summary.json", whole, shape=PeakCheckRun, overwrite=True)
    return 0


def seed_work(path: Path | None, *, real: bool, add_real: bool) -> str | None:
    """What a --holdout run measures of one seed: "all" its rows, "real" only its real-rank rows
    (--add-real-ranks, the file holding simulated rows only), or None (its file is complete)."""
    if path is None or not path.exists():
        return "all"
    if not (real and add_real):
        return None
    has_real = any(r["ranks"] == "real" for r in read_json(path)["cases"])
    return None if has_real else "real"


def with_real_rows(old: PeakCheckRun, added: PeakCheckRun) -> PeakCheckRun:
    """A simulated-only seed file with `added`'s real-rank rows first (a full run's order), its
    summary over every row; the file's run facts stay those of the run that measured its simulated
    rows, and `added`'s go under real_ranks_added."""
    if old["seeds"] != added["seeds"] or any(r["ranks"] == "real" for r in old["cases"]):
        raise ValueError(f"seed {old['seeds']}: real-rank rows are added once, to the same seed's simulated rows")
    rows = added["cases"] + old["cases"]
    facts = {k: added[k] for k in ("command", "git_sha", "torch", "utc_time", "load_average", "wall_s")}
    return {**old, "cases": rows, "summary": holdout_summary(rows), "real_ranks_added": facts}


def _seed_rows(folder: Path, seed: int) -> list[PeakCheckRow]:
    return read_json(folder / f"seed-{seed}.json")["cases"]


def _run_file(facts: dict, seeds: list[int], rows: list[PeakCheckRow], started: float, load: float) -> PeakCheckRun:
    return {
        **facts,
        "utc_time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_average": [load, os.getloadavg()[0]],
        "wall_s": round(time.time() - started, 1),
        "seeds": seeds,
        "cases": rows,
        "summary": holdout_summary(rows),
    }


def _row_text(row: PeakCheckRow) -> str:
    if row["status"] != "ok":
        return f"{row['case'][-60:]:60s} {row['ranks']:9s} {row['status']}: {row['reason']}"
    est = f" est {row[M.peak_estimate_error_pct]:+6.2f}%" if M.peak_estimate_error_pct in row else ""
    took = ""  # rows measured before rows were timed have no seconds
    if "measure_s" in row:
        took = f" ({row['measure_s']:.1f} s" + (
            f", estimate {row['estimate_s']:.1f} s)" if "estimate_s" in row else ")"
        )
    return (
        f"{row['case'][-60:]:60s} {row['ranks']:9s} {row['predicted_bytes']:>11,.0f} {row['measured_bytes']:>11,.0f} "
        f"{row[M.peak_prediction_error_pct]:+7.2f}% {row['phase']}{est}{took}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
