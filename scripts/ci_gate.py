#!/usr/bin/env python
"""The regression gate the benchmark workflows run after their sweep.

    python scripts/ci_gate.py RUN --baseline DIR [--threshold PCT] [--suite-failed] [--update-baseline]

With a baseline run folder at DIR: `visualize.py --compare DIR RUN --threshold PCT` (compare.* into RUN),
and its exit status (1 on a regression beyond noise and threshold, naming the cases). Without one,
the first run creates it: RUN is copied to DIR (exit 0), so a workflow's baseline path always
exists from its second run on; a run with failed cases (`--suite-failed`) is never stored, as a
baseline missing cases would hide their regressions. `--update-baseline` replaces the baseline with
RUN after a comparison that passed. Bad arguments: one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import visualize  # noqa: E402
from fsdp_bench.results.layout import RunLayout  # noqa: E402


def store_baseline(run: Path, baseline: Path) -> None:
    """Copy RUN to BASELINE whole or not at all: a half-copied baseline would gate the next run
    against missing cases."""
    baseline.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{baseline.name}.", dir=baseline.parent))
    shutil.copytree(run, staging / "run")
    old = None
    if baseline.exists():
        old = baseline.with_name(f".{baseline.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(baseline, old)
    os.replace(staging / "run", baseline)
    shutil.rmtree(staging, ignore_errors=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = visualize._OneLineParser(prog="ci_gate.py", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the run folder this workflow just made")
    parser.add_argument("--baseline", type=Path, required=True, help="the stored baseline run folder")
    parser.add_argument("--threshold", type=float, default=5.0, help="as visualize.py --compare (default: 5)")
    parser.add_argument("--suite-failed", action="store_true", help="the sweep had failed cases: never store it")
    parser.add_argument("--update-baseline", action="store_true", help="replace the baseline after a pass")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not RunLayout(args.run).is_run():
        print(f"ci_gate.py: {args.run}: not a fsdp-bench run folder (no cases/ or env.json)", file=sys.stderr)
        return 2
    if not RunLayout(args.baseline).is_run():
        if args.baseline.exists():
            print(f"ci_gate.py: {args.baseline}: exists but is not a fsdp-bench run folder", file=sys.stderr)
            return 2
        if args.suite_failed:
            print(f"::warning::no baseline at {args.baseline}; this run had failed cases, so it is not stored")
            return 0
        store_baseline(args.run, args.baseline)
        print(f"::notice::no baseline at {args.baseline}: stored this run there; the next run is compared with it")
        return 0
    # compare.csv/.md/.png land in RUN, so the workflow's artifact carries them
    status = visualize.main(["--compare", str(args.baseline), str(args.run), "--threshold", f"{args.threshold:g}"])
    if status == 0 and args.update_baseline and not args.suite_failed:
        store_baseline(args.run, args.baseline)
        print(f"::notice::baseline at {args.baseline} replaced by this run")
    return status


if __name__ == "__main__":
    sys.exit(main())
