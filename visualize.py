#!/usr/bin/env python
"""Turn a fsdp-bench run folder into comparison.csv and charts.

    python visualize.py                 # the newest run under results/
    python visualize.py RUN_DIR [...]   # those runs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsdp_bench.case import CaseError
from fsdp_bench.options import writable_dir
from fsdp_bench.report import write_report
from fsdp_bench.results import ResultError, is_run_dir, newest_run


class _OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line naming the problem (argparse would add a usage block)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"visualize.py: {message} (see --help)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run folders (default: the newest under --results-dir)")
    parser.add_argument("--results-dir", type=Path, default=Path("results"), help="where runs live (default: results)")
    parser.add_argument("--out", type=Path, default=None, help="write outputs here instead of into the run folder")
    args = parser.parse_args(argv)
    try:  # every argument is checked before anything is written
        runs = args.runs or [newest_run(args.results_dir)]
        for run in runs:
            if not is_run_dir(run):
                raise ResultError(f"{run}: not a fsdp-bench run folder (no cases/ or env.json)")
        if args.out is not None:
            writable_dir("--out", str(args.out))
    except (ResultError, CaseError) as exc:
        print(f"visualize.py: {exc}", file=sys.stderr)
        return 2
    status = 0
    for run in runs:
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
