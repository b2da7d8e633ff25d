#!/usr/bin/env python
"""Turn a fsdp-bench run folder into comparison.csv, charts and a report, or compare two runs.

python visualize.py                 # the newest run under results/ with a finished case
python visualize.py RUN_DIR [...]   # those runs
python visualize.py --compare BASE_RUN NEW_RUN [--threshold PCT]
                                    # compare.csv/.md/.png in NEW_RUN (or --out); exit 1 on a
                                    # regression beyond PCT percent (default 5)
python visualize.py --history RUN RUN [...] | RUNS_FOLDER [--out DIR]
                                    # history.csv/.md/.html/.png: each case across runs, the runs
                                    # changed beyond noise flagged (default --out: RUNS_FOLDER/history
                                    # or the first run's parent's history/)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsdp_bench.plan.case import CaseError
from fsdp_bench.plan.option_values import positive_gib, writable_dir
from fsdp_bench.plan.options import project_results_dir
from fsdp_bench.plan.sweep import Sweep
from fsdp_bench.report.writer import condensed_notes, write_report
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.load import first_readable_case, newest_finished_run
from fsdp_bench.results.schema import ResultError


class _OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line naming the problem (argparse would add a usage block)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """Every option of visualize.py (the workflow test parses the workflows' command lines with it)."""
    parser = _OneLineParser(prog="visualize.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs", nargs="*", type=Path, help="run folders (default: the newest under --results-dir with a finished case)"
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=project_results_dir(Path(__file__).resolve().parent, Sweep.results_dir),
        help="where runs live (default: the project's results/, wherever this runs from, as for the sweep)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write outputs here instead of into the run folder")
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BASE_RUN", "NEW_RUN"),
        help="compare two runs; exit 1 when a case regresses beyond --threshold",
    )
    parser.add_argument(
        "--history",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="runs in order (or folders of runs): each case across them, runs changed beyond noise flagged",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=5.0,
        help="percent change in the wrong direction that counts as a regression (default: 5)",
    )
    parser.add_argument(
        "--budget-gib", default=None, help="memory budget per device for the recommendation, in GiB (default: none)"
    )
    parser.add_argument(
        "--no-charts",
        action="store_true",
        help="write comparison.csv, per_rank.csv and the report without charts (they take about 45 ms a case)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.compare and args.history:
        print("visualize.py: give either --compare or --history, not both", file=sys.stderr)
        return 2
    if args.compare:
        return compare_main(args)
    if args.history:
        return history_main(args)
    try:  # every argument is checked before anything is written
        budget = parse_budget(args.budget_gib)
        runs = args.runs or [_newest_finished(args.results_dir)]
        outs = out_dirs(runs, args.out)
        for run in runs:
            if problem := run_folder_problem(run):
                raise ResultError(problem)
        if args.out is not None:
            writable_dir("--out", str(args.out))
        check_out(runs, args.out)
        for run in runs:  # the arguments first, then what the runs hold
            check_drawable(run)
    except (ResultError, CaseError) as exc:
        print(f"visualize.py: {exc}", file=sys.stderr)
        return 2
    status = 0
    for run, out in zip(runs, outs):
        written, notes = write_report(run, out, budget_gib=budget, charts=not args.no_charts)
        for note in condensed_notes(notes):
            print(f"visualize.py: {note}", file=sys.stderr)
        for line in closing_lines(run, written, budget):
            print(line)
        if not written:
            status = 2  # the run folder went away or became unreadable while the report was drawn
    return status


def parse_budget(text: str | None) -> float | None:
    """--budget-gib as a finite number of GiB above 0: 'inf' or '1e400' would pass every case as
    fitting and print 'budget inf GiB/device'. The rule is the sweep's --bench-budget-gib's."""
    if text is None:
        return None
    try:
        return positive_gib("--budget-gib", text)
    except CaseError:
        raise ResultError(f"--budget-gib: {text} is not a positive number of GiB") from None


def threshold_problem(threshold: float) -> str | None:
    """Why --threshold is not a percentage a comparison can use, in one line; None when it is."""
    return None if threshold >= 0 else f"--threshold: {threshold:g} is not a non-negative percentage"


def run_folder_problem(path: Path) -> str | None:
    """Why `path` is not a run folder, in one line; None when it is one."""
    if not path.exists():
        return f"{path}: not a fsdp-bench run folder (the path does not exist)"
    if not RunLayout(path).is_run():
        return f"{path}: not a fsdp-bench run folder (no cases/ or env.json)"
    return None


def check_drawable(run: Path) -> None:
    """ResultError unless the run folder `run` holds at least one case file that reads: a report
    of no case is no answer, and is refused before anything is written."""
    layout = RunLayout(run)
    if not layout.cases_dir.is_dir():
        raise ResultError(f"{run}: no cases/ folder; the run has no case results")
    count, first = first_readable_case(run)
    if count == 0:
        raise ResultError(f"{layout.cases_dir}: holds no case results (did the sweep run any case?)")
    if first is not None:
        raise ResultError(f"{run}: none of its {count} case files can be read; the first: {first}")


def out_dirs(runs: list[Path], out: Path | None) -> list[Path | None]:
    """Where each run's report goes: --out itself for one run, a folder per run inside it for several."""
    return [out / run.name if out is not None and len(runs) > 1 else out for run in runs]


def check_out(runs: list[Path], out: Path | None) -> None:
    """ResultError when a report would land in another run's folder, replacing that run's
    report.md and comparison.csv (or, for several runs, filling it with their folders)."""
    if out is None:
        return
    if len(runs) > 1 and RunLayout(out).is_run():
        raise ResultError(f"--out: {out} is a fsdp-bench run folder; give a new folder for the {len(runs)} reports")
    for run, dest in zip(runs, out_dirs(runs, out)):
        if RunLayout(dest).is_run() and dest.resolve() != run.resolve():
            raise ResultError(
                f"--out: {dest} is another fsdp-bench run folder; its report would be replaced by {run}'s "
                "(give a new folder, or no --out to write into the run)"
            )


def closing_lines(run: Path, written: list[Path], budget_gib: float | None) -> list[str]:
    """What was written (one line: ten paths one a line buried the answer), then the short answer
    and the run folder, last, as at the end of a sweep."""
    if not written:
        return []
    from fsdp_bench.report.answer import answer_lines
    from fsdp_bench.report.table import build_table
    from fsdp_bench.report.writer import read_report_inputs

    folder = written[0].parent
    lines = [f"written in {folder}: {', '.join(p.name for p in written)}"]
    inputs = read_report_inputs(run)
    lines += answer_lines(build_table(inputs.results), budget_gib)
    if inputs.unreadable:  # the answer was chosen without them: say so beside it, not only above
        lines.append(
            f"{inputs.unreadable} of {inputs.case_files} case files could not be read (named above); "
            "the answer is chosen without them"
        )
    report = folder / "report.md"
    return [*lines, f"results: {run}" + (f"  (report: {report})" if report in written else "")]


def _newest_finished(results_dir: Path) -> Path:
    """The newest run with an ok case, saying which and which newer ones it passed over."""
    run, skipped = newest_finished_run(results_dir)
    if skipped:
        names = ", ".join(p.name for p in skipped)
        print(f"visualize.py: skipped {len(skipped)} newer run(s) without a finished case: {names}", file=sys.stderr)
    print(f"visualize.py: newest run with a finished case: {run}", file=sys.stderr)
    return run


def compare_main(args: argparse.Namespace) -> int:
    from fsdp_bench.report.compare import compare_runs, write_comparison
    from fsdp_bench.results.stats import NOISY_CV_PCT

    base, new = args.compare
    try:
        if args.runs:
            raise ResultError("give either run folders or --compare BASE NEW, not both")
        if problem := threshold_problem(args.threshold):
            raise ResultError(problem)
        for run in (base, new):
            if problem := run_folder_problem(run):
                raise ResultError(problem)
        if Path(base).resolve() == Path(new).resolve():
            raise ResultError(f"--compare: {base} and {new} are the same run; give the base run and a new one")
        out = args.out if args.out is not None else new
        writable_dir("--out", str(out))
    except (ResultError, CaseError) as exc:
        print(f"visualize.py: {exc}", file=sys.stderr)
        return 2
    comparison, problems = compare_runs(base, new, threshold_pct=args.threshold)
    for problem in problems:
        print(f"visualize.py: {problem}", file=sys.stderr)
    for line in comparison.env_differences:
        print(f"visualize.py: warning: runs differ: {line}", file=sys.stderr)
    for path in write_comparison(comparison, out, base=base, new=new, threshold_pct=args.threshold):
        print(path)
    from fsdp_bench.report.compare_noise import detectable_span, noise_sentence

    print(
        f"{len(comparison.rows)} case(s) in both runs, {len(comparison.only_base)} only in base, "
        f"{len(comparison.only_new)} only in new, {len(comparison.regressions)} regression(s) "
        f"beyond {args.threshold:g}%"
    )
    print(noise_sentence(comparison))
    total = len(comparison.rows)
    for verdict in ("faster", "within noise", "inconclusive"):
        rows = [r for r in comparison.rows if r.get("verdict") == verdict]
        if rows:
            span = detectable_span(rows)
            seen = f" (smallest detectable step-time change {span})" if span else ""
            print(f"{len(rows)} case(s) {verdict}{seen}{_which([r['case_id'] for r in rows], total)}")
    noisy = [r["case_id"] for r in comparison.rows if r.get("noisy")]
    if noisy:
        print(f"noisy (step-time CV > {NOISY_CV_PCT:g}%){_which(noisy, total)}")
    for line in comparison.regressions:
        print(f"REGRESSION {line}")
    span = detectable_span(r for r in comparison.rows if r.get("verdict") == "regression")
    if span:
        print(f"regressions judged at a smallest detectable step-time change of {span}")
    return 1 if comparison.regressions else 0


def history_main(args: argparse.Namespace) -> int:
    from fsdp_bench.report.history import build_history, collect_run_dirs
    from fsdp_bench.report.history_page import write_history

    try:
        if args.runs:
            raise ResultError("give either run folders or --history RUN ..., not both")
        if problem := threshold_problem(args.threshold):
            raise ResultError(problem)
        runs = collect_run_dirs(args.history)
        first = args.history[0]
        out = args.out or ((first if not RunLayout(first).is_run() else first.parent) / "history")
        writable_dir("--out", str(out))
    except (ResultError, CaseError, OSError) as exc:
        print(f"visualize.py: {exc}", file=sys.stderr)
        return 2
    history = build_history(runs, threshold_pct=args.threshold)
    for note in history.notes:
        print(f"visualize.py: {note}", file=sys.stderr)
    for path in write_history(history, out, threshold_pct=args.threshold):
        print(path)
    print(f"{len(runs)} runs; {len(history.flagged)} flagged (a case changed beyond noise and {args.threshold:g}%)")
    for run, cases in history.flagged.items():
        print(f"FLAGGED {run}: {', '.join(cases)}")
    return 0


def _which(ids: list[str], total: int) -> str:
    """': a, b, c' naming the cases, or ': all of them' when every compared case is one (a list of
    every case id would fill the terminal and say nothing)."""
    return ": all of them" if len(ids) == total > 3 else f": {', '.join(ids)}"


if __name__ == "__main__":
    sys.exit(main())
