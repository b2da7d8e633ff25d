"""Turn a run folder into comparison.csv, per_rank.csv, charts, report.md and report.html.

`visualize.py` and the pytest plugin both call `write_report`, so the session's outputs and a
regenerated report are the same files. Only the files named in OWNED_FILES are ever written;
nothing else in the run folder is touched. No torch import.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fsdp_bench.report.charts import CHART_FILES, draw_charts
from fsdp_bench.report.charts.style import RunData
from fsdp_bench.report.page import Page, render_html, render_markdown
from fsdp_bench.report.summary import QUESTIONS, failures, summary_lines
from fsdp_bench.report.table import build_per_rank_table, build_table
from fsdp_bench.results.io import write_text_atomic
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.load import load_environment_file, load_tune_answer, read_case_files
from fsdp_bench.results.records import CaseResult, Environment, TuneAnswer
from fsdp_bench.results.schema import ResultError

TABLE_FILES = ("comparison.csv", "per_rank.csv")
PAGE_FILES = ("report.md", "report.html")
OWNED_FILES = TABLE_FILES + CHART_FILES + PAGE_FILES


def load_environment(run_dir: Path) -> tuple[Environment | None, str | None]:
    """env.json, or None and the one-line problem."""
    try:
        return load_environment_file(RunLayout(Path(run_dir)).env_file), None
    except ResultError as exc:
        return None, f"{exc}; the environment section is left unknown"


@dataclass
class ReportInputs:
    """What a report is drawn from, and how many of the run's case files could not be read: a
    report that counted only the readable ones would say every case finished (each problem is
    also a line in `problems`)."""

    results: list[CaseResult]
    env: Environment | None
    problems: list[str]
    case_files: int = 0
    unreadable: int = 0


def read_report_inputs(run_dir: Path) -> ReportInputs:
    """The readable case results, the environment, one line per problem found, and the counts."""
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    if not run_dir.is_dir():
        raise ResultError(f"{run_dir}: not a folder")
    read: dict[Path, CaseResult] = {}
    unreadable: dict[Path, str] = {}
    if not layout.cases_dir.is_dir():
        problems = [f"{layout.cases_dir}: missing; the run has no case results"]
    else:
        read, unreadable = read_case_files(run_dir)
        problems = list(unreadable.values())
        if not read and not problems:
            problems.append(f"{layout.cases_dir}: holds no case results (did the sweep run any case?)")
    seen: set[str] = set()
    unique = []
    bad_case = 0
    for path, result in read.items():
        if not isinstance(result.get("case"), dict):
            problems.append(f"{path}: 'case' is not an object")
            bad_case += 1
            continue
        if result["case_id"] in seen:
            continue
        seen.add(result["case_id"])
        unique.append(result)
    env, env_problem = load_environment(run_dir)
    if env_problem:
        problems.append(env_problem)
    if unique and not any(r.get("status") == "ok" for r in unique):
        problems.append(f"{run_dir}: no case finished ok ({len(unique)} cases); charts need finished cases")
    return ReportInputs(unique, env, problems, len(read) + len(unreadable), len(unreadable) + bad_case)


def load_report_inputs(run_dir: Path) -> tuple[list[CaseResult], Environment | None, list[str]]:
    """The readable case results, the environment, and one line per problem found."""
    inputs = read_report_inputs(run_dir)
    return inputs.results, inputs.env, inputs.problems


def load_tuning(run_dir: Path) -> tuple[list[TuneAnswer], list[str]]:
    """The run's --bench-tune answers, and one line per unreadable one."""
    found, problems = [], []
    for path in RunLayout(Path(run_dir)).tune_files():
        try:
            found.append(load_tune_answer(path))
        except ResultError as exc:
            problems.append(f"{exc}; its tuning section is left out")
    return found, problems


def write_report(
    run_dir: Path, out_dir: Path | None = None, budget_gib: float | None = None, *, charts: bool = True
) -> tuple[list[Path], list[str]]:
    """Write the table, charts and report page for a run; returns the files written and one note
    per problem (unreadable files, charts skipped for lack of data). `charts=False` (visualize.py
    --no-charts) writes the tables and the page only: the charts draw bars per case, about 45 ms a
    case in all (a report of 458 cases: 3.5-4.3 s without them, 24-26 s with, 2026-11-29)."""
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run_dir
    try:
        inputs = read_report_inputs(run_dir)
    except ResultError as exc:
        return [], [str(exc)]
    results, env, notes = inputs.results, inputs.env, inputs.problems
    if env and env.get("planted_faults"):
        notes = [
            f"planted faults (FSDP_BENCH_FAULTS={env['planted_faults']}): this run was slowed or broken on purpose; "
            "its timings are not the machine's",
            *notes,
        ]
    out_dir.mkdir(parents=True, exist_ok=True)
    df = build_table(results)
    written = []
    for name, table in (("comparison.csv", df), ("per_rank.csv", build_per_rank_table(results))):
        path = out_dir / name
        write_text_atomic(path, table.to_csv(index=False))
        written.append(path)
    tuning, tune_notes = load_tuning(run_dir)
    notes += tune_notes
    run = RunData(
        df=df, results={r["case_id"]: r for r in results}, title=_models(df), budget_gib=budget_gib, tuning=tuning
    )
    outcomes = draw_charts(run, out_dir) if charts else []
    written += [o.path for o in outcomes if o.path is not None]
    chart_notes = [o.note for o in outcomes if o.path is None]
    page = Page(
        run_name=run_dir.resolve().name,
        env=env,
        df=df,
        summary=report_summary(df, budget_gib, inputs.unreadable),
        charts=outcomes if charts else None,
        problems=list(notes),
        files=list(TABLE_FILES),
        tuning=tuning,
    )
    for name, render in (("report.md", render_markdown), ("report.html", render_html)):
        path = out_dir / name
        write_text_atomic(path, render(page))
        written.append(path)
    return written, notes + chart_notes


def report_summary(df, budget_gib: float | None, unreadable: int) -> list[tuple[str, str]]:
    """The page's summary; with case files that could not be read, 'Did every case finish?'
    counts them and the recommendation says it chose without them (the table has no row for a
    file it could not read, so the summary alone would call a run with a corrupt file complete)."""
    lines = summary_lines(df, budget_gib)
    if not unreadable or not lines:
        return lines
    finished = next(q for q, answer in QUESTIONS if answer is failures)
    # summary_lines puts the recommendation first and 'Did every case finish?' right after it
    at = next(i for i, (q, _) in enumerate(lines) if q == finished)
    caveat = [
        (
            lines[0][0],
            f"{unreadable} case file(s) could not be read (see Problems): this recommendation is chosen "
            "without their cases, and one of them may have been the better pick.",
        )
    ]
    counted = [(finished, line) for line in failures(df, unreadable)]
    return [*lines[:at], *(caveat if at else []), *counted, *lines[at + 1 :]]


def condensed_notes(notes: list[str]) -> list[str]:
    """The notes for a terminal: every chart skipped for lack of data in one line (a CPU run skips
    six, each with its reason in report.md; six lines pushed the answer off the screen), every
    other note as it is."""
    skipped = [n.split(" ", 1)[0] for n in notes if n.split(" ", 1)[0] in CHART_FILES and " skipped: " in n]
    rest = [n for n in notes if n.split(" ", 1)[0] not in skipped]
    if not skipped:
        return rest
    return [*rest, f"{len(skipped)} chart(s) skipped for lack of data (why: report.md): {', '.join(skipped)}"]


def _models(df) -> str:
    if df.empty or "model" not in df:
        return ""
    return ", ".join(sorted(map(str, df["model"].dropna().unique())))
