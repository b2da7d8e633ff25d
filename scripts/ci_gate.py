#!/usr/bin/env python
"""The regression gate the benchmark workflows run after their sweep.

    python scripts/ci_gate.py RUN --baseline DIR [--threshold PCT] [--suite-failed] [--update-baseline]

With a baseline run folder at DIR: `visualize.py --compare DIR RUN --threshold PCT` (compare.* into RUN),
and its exit status (1 on a regression beyond noise and threshold, naming the cases). The gate also
fails (1) on what a comparison of two different grids allows: a case that was ok in the baseline
and has no readable case file in RUN (a line each, MISSING or UNREADABLE), a case file of RUN that
cannot be read, or a RUN without a case that finished ok. Without a baseline, the first run
creates it: RUN is copied to DIR (exit 0), so a workflow's baseline path always exists from its
second run on. A run is never stored as the baseline when it had failed cases (`--suite-failed`,
exit 0: the suite step fails the job), a case file that cannot be read, or no case that finished
ok (exit 1): a baseline missing cases would hide their regressions. `--update-baseline` replaces
the baseline with RUN after a comparison that passed. Bad arguments: one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import visualize  # noqa: E402
from fsdp_bench.plan.case import CaseError  # noqa: E402
from fsdp_bench.plan.option_values import writable_dir  # noqa: E402
from fsdp_bench.results.layout import RunLayout  # noqa: E402
from fsdp_bench.results.load import read_case_files  # noqa: E402


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


def argument_problem(args: argparse.Namespace) -> str | None:
    """Every check visualize.py --compare would make, made here first: its messages carry its
    own name, and a workflow log saying `visualize.py:` sends the reader to the wrong tool."""
    if problem := visualize.threshold_problem(args.threshold) or visualize.run_folder_problem(args.run):
        return problem
    if args.baseline.exists():
        if not RunLayout(args.baseline).is_run():
            return f"{args.baseline}: exists but is not a fsdp-bench run folder"
        if args.baseline.resolve() == args.run.resolve():
            return f"--baseline: {args.baseline} is the run itself; give the stored baseline's folder"
    comparing = RunLayout(args.baseline).is_run()
    stores = args.update_baseline if comparing else not args.suite_failed
    try:
        if comparing:
            writable_dir("RUN", str(args.run))  # compare.* are written beside the run
        if stores:  # the run is copied into a staging folder beside the baseline
            writable_dir("--baseline", str(args.baseline.parent))
    except CaseError as exc:
        return str(exc)
    return None


class RunCases(NamedTuple):
    """What a run's case files hold, by case id (a case file is named after its case). A
    NamedTuple, not a dataclass: tests load this script by path, outside sys.modules, where
    dataclass cannot resolve its annotations."""

    ok: set[str]
    read: set[str]
    unreadable: list[str]


def run_cases(run: Path) -> RunCases:
    read, unreadable = read_case_files(run)
    return RunCases(
        ok={r["case_id"] for r in read.values() if r.get("status") == "ok"},
        read={r["case_id"] for r in read.values()},
        unreadable=sorted(p.stem for p in unreadable),
    )


def not_storable(cases: RunCases) -> str | None:
    """Why a run must not become the baseline, and fails the gate; None when it may."""
    if cases.unreadable:
        return f"{len(cases.unreadable)} case file(s) cannot be read ({_names(cases.unreadable)})"
    if not cases.ok:
        return "no case finished ok" + ("" if cases.read else " (no case files)")
    return None


def lost_cases(base: RunCases, new: RunCases) -> list[str]:
    """One line per case that was ok in the baseline and that RUN cannot show: `visualize.py
    --compare` lists such a case as only in the base run and passes, which is right for two
    different grids and wrong for a gate."""
    lines = []
    for case_id in sorted(base.ok - new.read):
        why = "its case file cannot be read" if case_id in new.unreadable else "no case file for it"
        lines.append(f"{'UNREADABLE' if case_id in new.unreadable else 'MISSING'} {case_id}: ok in the baseline; {why}")
    return lines


def baseline_warning(base: RunCases) -> list[str]:
    """A baseline stored before the gate checked what it stores can hold files that cannot be
    read: their cases are gated against nothing, which the log should say."""
    if not base.unreadable:
        return []
    return [
        f"::warning::the baseline has {len(base.unreadable)} case file(s) that cannot be read, so their cases "
        f"are not gated ({_names(base.unreadable)}); --update-baseline after a good run replaces it"
    ]


def _names(ids: list[str], shown: int = 5) -> str:
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def first_run(args: argparse.Namespace, unusable: str | None) -> int:
    if unusable:
        print(f"::error::no baseline at {args.baseline}, and this run is not stored there: {unusable}")
        return 1
    if args.suite_failed:
        print(f"::warning::no baseline at {args.baseline}; this run had failed cases, so it is not stored")
        return 0
    store_baseline(args.run, args.baseline)
    print(f"::notice::no baseline at {args.baseline}: stored this run there; the next run is compared with it")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if problem := argument_problem(args):
        print(f"ci_gate.py: {problem}", file=sys.stderr)
        return 2
    new = run_cases(args.run)
    unusable = not_storable(new)
    if not RunLayout(args.baseline).is_run():
        return first_run(args, unusable)
    # compare.csv/.md/.png land in RUN, so the workflow's artifact carries them
    status = visualize.main(["--compare", str(args.baseline), str(args.run), "--threshold", f"{args.threshold:g}"])
    base = run_cases(args.baseline)
    lost = lost_cases(base, new)
    for line in [*lost, *baseline_warning(base)]:
        print(line)
    if unusable:
        kept = "; the baseline is kept" if args.update_baseline else ""
        print(f"::error::this run fails the gate and is never stored as a baseline: {unusable}{kept}")
    if status != 0 or unusable or lost:
        return status or 1
    if args.update_baseline and not args.suite_failed:
        store_baseline(args.run, args.baseline)
        print(f"::notice::baseline at {args.baseline} replaced by this run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
