#!/usr/bin/env python
"""Turn a fsdp-bench run folder into comparison.csv and charts.

    python visualize.py                 # the newest run under results/
    python visualize.py RUN_DIR [...]   # those runs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsdp_bench.report import write_report
from fsdp_bench.results import ResultError, is_run_dir, newest_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run folders (default: the newest under --results-dir)")
    parser.add_argument("--results-dir", type=Path, default=Path("results"), help="where runs live (default: results)")
    parser.add_argument("--out", type=Path, default=None, help="write outputs here instead of into the run folder")
    args = parser.parse_args(argv)
    try:
        runs = args.runs or [newest_run(args.results_dir)]
    except ResultError as exc:
        print(f"visualize.py: {exc}", file=sys.stderr)
        return 2
    status = 0
    for run in runs:
        if not is_run_dir(run):
            print(f"visualize.py: {run}: not a fsdp-bench run folder (no cases/ or env.json)", file=sys.stderr)
            status = 2
            continue
        out = args.out / run.name if args.out is not None and len(runs) > 1 else args.out
        written, notes = write_report(run, out)
        for note in notes:
            print(f"visualize.py: {note}", file=sys.stderr)
        for path in written:
            print(path)
        if not written:
            status = 2
    return status


if __name__ == "__main__":
    sys.exit(main())
