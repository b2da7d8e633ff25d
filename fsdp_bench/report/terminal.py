"""The end of a sweep on the terminal: the report written, then cases by status, the fastest trained
case of each like-for-like group and what the sweep's time went to; and, as the terminal's very
last lines (after pytest's own summary), the short answer (report.answer) and where the run and its
report are; the full recommendation, every tied configuration named, is in report.md."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from pathlib import Path

from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import CaseResult


def summary_body_lines(results: list[CaseResult], kept: Collection[str] = (), df=None) -> list[str]:
    """Cases by status, the fastest trained case per group of like-for-like cases, where the time
    went. `kept`: ids of the cases a resume kept from the run folder; they count in the statuses
    (said how many), not in this session's time. `df`: the results' table when the caller has it."""
    from fsdp_bench.report.recommend import tied_with_best
    from fsdp_bench.report.table import build_table, unranked

    counts = Counter(r.get("status") for r in results)
    by_status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda x: str(x[0])))
    lines = [f"cases: {by_status or 'none finished'}"]
    kept = {r.get("case_id") for r in results} & set(kept)
    if kept:
        lines[0] += f" ({len(kept)} kept from the resumed run)"
    df = build_table(results) if df is None else df
    if "is_best" in df:
        for row in df[df["is_best"] == True].to_dict("records"):  # noqa: E712
            tied = tied_with_best(df, row)
            lines.append(
                f"best of {row['compare_group']}: {row['case_id']} ({row[M.tokens_per_s_per_device]:,.0f} tok/s/dev)"
                + (f"; {tied} more within noise of it" if tied else "")
            )
    simulated, untrained = unranked(df)
    if len(simulated):  # a fake process group: its communication is free, its memory is the answer
        lines.append(
            f"simulated, communication free (never ranked; see their memory): {', '.join(simulated['case_id'])}"
        )
    if len(untrained):
        lines.append(f"not trained (never ranked): {', '.join(untrained['case_id'])}")
    spent = _time_line(df, kept)
    return lines + ([spent] if spent else [])


def _time_line(df, kept: set[str]) -> str | None:
    """Where this session's time in cases went: a kept case's time was spent by an earlier
    session, and counted here it made the total exceed the session's own wall time."""
    from fsdp_bench.report.cost import time_line

    if not kept:
        return time_line(df)
    spent = time_line(df[~df["case_id"].isin(kept)]) if "case_id" in df else None
    not_counted = f"{len(kept)} case(s) kept from the resumed run not counted"
    return f"{spent}; {not_counted}" if spent else f"time in cases: none run in this session ({not_counted})"


def closing_lines(run_dir: Path, recommendation: list[str], report: bool = False) -> list[str]:
    """The terminal's last lines: the short answer, then where the run (and its report) is."""
    where = f"results: {run_dir}" + (f"  (report: {run_dir / 'report.md'})" if report else "")
    return [*recommendation, where]


def with_run_status(closing: list[str], partial: str | None, resume: str | None) -> list[str]:
    """`closing_lines` with what the run is: a partial run says so before its answer (which
    counts only the cases that ran), and the command that finishes the run comes last, where
    the user looks after a stop."""
    head = []
    if partial:
        answered = len(closing) > 1  # closing_lines: the recommendation's lines, then where the run is
        head = [partial + ("; the recommendation below is from those only" if answered else "")]
    return [*head, *closing, *([resume] if resume else [])]


def no_case_line(skip_reasons: list[str]) -> str:
    """One line when every selected case was skipped before launch (pytest's own summary says
    only `1 skipped`): that no case ran, and each reason with how many cases it skipped."""
    counts = Counter(skip_reasons)
    reasons = "; ".join(f"{n} x {reason}" if n > 1 else reason for reason, n in counts.items())
    n = len(skip_reasons)
    which = "the selected case was" if n == 1 else f"all {n} selected cases were"
    return f"fsdp-bench: no case ran: {which} skipped before launch: {reasons}"


def report_lines(run_dir: Path, results: list[CaseResult]) -> list[str]:
    """`report_sections` as one list (body, then the closing lines)."""
    body, closing = report_sections(run_dir, results)
    return body + closing


def report_sections(
    run_dir: Path,
    results: list[CaseResult],
    *,
    write: bool = True,
    budget_gib: float | None = None,
    kept: Collection[str] = (),
) -> tuple[list[str], list[str]]:
    """Write the run's report; return what to print in the fsdp-bench section (what was written,
    the sweep's summary) and the closing lines (`closing_lines`). `write=False`
    (--bench-no-report): nothing to print but where the run is. `budget_gib`: the sweep's
    --bench-budget-gib, which the page's and the last line's recommendation respect. `kept`: the
    cases a resume kept (summary_body_lines).

    KeyboardInterrupt passes through (the caller turns it into one line); any other failure of
    the report is one line, since the results are safe on disk either way.
    """
    from fsdp_bench.report.answer import answer_lines
    from fsdp_bench.report.table import build_table
    from fsdp_bench.report.writer import condensed_notes, write_report

    if not write:
        return [], closing_lines(run_dir, [])
    try:
        written, notes = write_report(run_dir, budget_gib=budget_gib)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - a chart's bug must not hide the results
        return [f"report not written: {type(exc).__name__}: {exc}"], closing_lines(run_dir, [])
    lines = [f"note: {note}" for note in condensed_notes(notes)]
    for suite, scaled in sorted(
        {
            (r["case"].get("suite"), r["case"].get("scaled_down"))
            for r in results
            if r.get("case", {}).get("scaled_down")
        }
    ):
        lines.append(f"note: suite {suite} ran scaled down ({scaled})")
    lines.append(f"table and charts: {', '.join(p.name for p in written)}")
    df = build_table(results)  # once for the summary and the answer (write_report built its own)
    lines += summary_body_lines(results, kept, df)
    return lines, closing_lines(run_dir, answer_lines(df, budget_gib), report=True)
