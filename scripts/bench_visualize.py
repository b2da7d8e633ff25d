"""Time visualize.py's report on a synthetic 500-case run folder (target: under 30 s).

    python scripts/bench_visualize.py [--cases 500]

The folder is built from one real golden case (tests/data/golden/base), copied under 500 ids
across strategies x batch sizes x grad-accum x timings with scaled throughputs: synthetic data
for timing the reporting code only, never for numbers anyone reads.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.plan.case import OPTIMIZER_TIMINGS, Case  # noqa: E402
from fsdp_bench.plan.catalog import STRATEGIES  # noqa: E402
from fsdp_bench.report.writer import write_report  # noqa: E402
from fsdp_bench.results.io import write_json_atomic  # noqa: E402
from fsdp_bench.results.records import CaseResult  # noqa: E402


def build_run(run: Path, n_cases: int) -> None:
    golden = ROOT / "tests" / "data" / "golden" / "base"
    template = next(
        json.loads(p.read_text())
        for p in sorted((golden / "cases").glob("*.json"))
        if json.loads(p.read_text())["status"] == "ok"
    )
    (run / "cases").mkdir(parents=True)
    (run / "env.json").write_text((golden / "env.json").read_text())
    grid = itertools.product(STRATEGIES, range(1, 1000), (1, 2, 4), OPTIMIZER_TIMINGS)
    made = 0
    for strategy, bs, ga, timing in grid:
        if made == n_cases:
            break
        case = Case(
            **{
                **template["case"],
                "strategy": strategy,
                "batch_size": bs,
                "grad_accum": ga,
                "optimizer_timing": timing,
                "mesh": "",
                "nproc": 2,
            }
        )
        result = json.loads(json.dumps(template))
        result.update(case_id=case.id, case=case.to_dict())
        result["metrics"]["tokens_per_s_per_device"] *= bs / (1 + ga)
        write_json_atomic(run / "cases" / f"{case.id}.json", result, shape=CaseResult)
        made += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        build_run(run, args.cases)
        start = time.perf_counter()
        written, notes = write_report(run)
        elapsed = time.perf_counter() - start
    print(f"{args.cases} cases: report in {elapsed:.1f} s ({len(written)} files, {len(notes)} notes)")


if __name__ == "__main__":
    main()
