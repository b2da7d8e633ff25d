"""Predicted vs measured peak memory per case, and the worst error: the evidence for the peak
model (fsdp_bench.analysis.fit.predict_peak_bytes).

    python scripts/measure_peak_prediction.py            # every case below (~15 min on 2 CPU cores)
    python scripts/measure_peak_prediction.py --quick    # simulated cases only
    python scripts/measure_peak_prediction.py --golden-only

Cases (fp32 AdamW, batch 2, seq 32, 2 steps): the three unseen configs in tests/data/hf_configs
on 1-4 real gloo ranks (torchrun) and simulated at 8, 64 and 512 ranks, every shipped tiny
flavor, and the golden runs' recorded measurements against today's prediction. Each case runs
through the runner exactly as a sweep does; the measured peak on CPU is MemTracker's peak of live
tensor bytes on the untimed probe step. FSDP1 cases are left out: MemTracker refuses FSDP1, so
CPU has no measured peak for them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.analysis.fit import predict_peak_bytes  # noqa: E402
from fsdp_bench.launch.runner import run_case  # noqa: E402
from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.plan.flavors import MODEL_FLAVORS, flavor_for  # noqa: E402
from fsdp_bench.results.io import read_json  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="simulated cases only (no torchrun)")
    parser.add_argument("--golden-only", action="store_true", help="only the golden runs' recorded measurements")
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    raise SystemExit(main())
