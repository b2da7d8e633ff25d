"""What the sweep itself cost: each case's wall time split into launch, setup, train, probes and
exit (see `fsdp_bench.analysis.case_time`), summed over the run, for report.md, report.html and
the terminal. A user sees whether the measured steps or the fixed cost around them dominate."""

from __future__ import annotations

from fsdp_bench.analysis.case_time import sweep_time_split, time_split_columns

_HEADER = ("part", "seconds (all cases)", "share", "seconds per case")
_NOTE = (
    "launch = torchrun and interpreters up to rank 0's first stage; setup = process group, data, "
    "model, sharding, optimizer; train = first step, warmup and measured steps; probes = untimed "
    "probe steps (FLOPs, memory breakdown, profiler, checkpoint); exit = final barrier and teardown."
)


def time_rows(df) -> list[tuple[str, str, str, str]]:
    """One row per part plus the total, or [] when no case recorded its stage times."""
    columns = time_split_columns()
    if df.empty or not set(columns) <= set(df.columns):
        return []
    timed = df[df[columns].notna().all(axis=1)]
    if timed.empty:
        return []
    split = sweep_time_split(timed.to_dict("records"))
    total = sum(split.values())
    n = len(timed)
    rows = [
        (part, f"{seconds:.1f}", f"{100 * seconds / total:.0f} %" if total else "-", f"{seconds / n:.2f}")
        for part, seconds in split.items()
    ]
    return rows + [(f"total ({n} cases)", f"{total:.1f}", "100 %", f"{total / n:.2f}")]


def time_line(df) -> str | None:
    """The terminal's one line: where the cases' time went."""
    rows = time_rows(df)
    if not rows:
        return None
    parts = ", ".join(f"{part} {seconds} s" for part, seconds, _, _ in rows[:-1])
    return f"time in cases: {rows[-1][1]} s ({parts})"


def time_blocks(df) -> list:
    """The report's section ([] when no case recorded its stage times)."""
    from fsdp_bench.report.document import Cell, Heading, Paragraph, Row, Table, plain

    rows = time_rows(df)
    if not rows:
        return []
    table = Table(_HEADER, tuple(Row((Cell(r[0], left=True), *(Cell(c) for c in r[1:]))) for r in rows))
    return [Heading("Where the sweep's time went"), Paragraph(plain(_NOTE), note=True), table]
