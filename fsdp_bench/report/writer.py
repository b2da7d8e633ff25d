"""Turn a run folder into comparison.csv, per_rank.csv, charts, report.md and report.html.

`visualize.py` and the pytest plugin both call `write_report`, so the session's outputs and a
regenerated report are the same files. Only the files named in OWNED_FILES are ever written;
nothing else in the run folder is touched. No torch import.
"""

from __future__ import annotations

from pathlib import Path

from fsdp_bench.report.charts import CHART_FILES, draw_charts
from fsdp_bench.report.charts.style import RunData
from fsdp_bench.report.page import Page, render_html, render_markdown
from fsdp_bench.report.summary import summary_lines
from fsdp_bench.report.table import build_per_rank_table, build_table
from fsdp_bench.results.io import write_text_atomic
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.load import load_environment_file, load_run, load_tune_answer
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


def load_report_inputs(run_dir: Path) -> tuple[list[CaseResult], Environment | None, list[str]]:
    """The readable case results, the environment, and one line per problem found."""
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    if not run_dir.is_dir():
        raise ResultError(f"{run_dir}: not a folder")
    if not layout.cases_dir.is_dir():
        problems = [f"{layout.cases_dir}: missing; the run has no case results"]
        results: list[CaseResult] = []
    else:
        results, problems = load_run(run_dir)
        if not results and not problems:
            problems.append(f"{layout.cases_dir}: holds no case results (did the sweep run any case?)")
    seen: set[str] = set()
    unique = []
    for result in results:
        if not isinstance(result.get("case"), dict):
            problems.append(f"{layout.result_file(str(result.get('case_id')))}: 'case' is not an object")
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
    return unique, env, problems


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
        results, env, notes = load_report_inputs(run_dir)
    except ResultError as exc:
        return [], [str(exc)]
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
        summary=summary_lines(df, budget_gib),
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
