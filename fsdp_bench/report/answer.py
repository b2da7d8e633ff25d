"""The short answer: one line per model, at most ANSWER_MAX_CHARS, that ends a sweep and
`visualize.py` on the terminal. On a busy machine the full recommendation names every tied
configuration (1,000+ characters); the terminal gets the fastest, how many are tied with it and
what would separate them, and report.md keeps the full list (`recommend.recommendation_lines`)."""

from __future__ import annotations

from fsdp_bench.report.recommend import SPEED, Recommendation, recommend, separator
from fsdp_bench.report.table import is_set, trained_rows
from fsdp_bench.report.why import short_name, why_slower
from fsdp_bench.results.metrics import M, label
from fsdp_bench.results.records import TableRow
from fsdp_bench.results.schema import memory_unit

# A person reads one terminal line or two; the issue that asked for this measured 767-1,476.
ANSWER_MAX_CHARS = 250
ANSWER_TIMING_WORD = " opt"  # before a non-intended optimizer timing: shorter than the report's


def _memory(row: TableRow, column: str) -> str:
    """`peak alloc 10.1 MiB`: what was measured, in the live lines' words and units; where the
    measured peak is missing (a memory probe that failed or was skipped), `peak alloc n/a, RSS 339 MiB`
    as they say it."""
    name = label(column).split(" (")[0]  # the registry's label without its unit, as on the live lines
    value, rss = row.get(column), row.get(M.peak_rss_gib)
    if isinstance(value, (int, float)) and value == value:
        return f"{name} {_size(value)}"
    if column != M.peak_rss_gib and isinstance(rss, (int, float)) and rss == rss:
        return f"{name} n/a, RSS {_size(rss)}"
    return f"{name} not measured"


def _size(gib: float) -> str:
    factor, unit = memory_unit(gib)
    value = factor * gib
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.{1 if unit == 'MiB' else 2}f} {unit}"


def _model(name: str) -> str:
    """A Hugging Face path's last part (`hf:.../mistral_gqa_tied` -> `hf:mistral_gqa_tied`): the
    whole path is in report.md, and a long one would take half the line."""
    return f"hf:{name.rstrip('/').rsplit('/', 1)[-1]}" if name.startswith("hf:") else name


def answer_line(rec: Recommendation, ranked: int) -> str:
    """One model's answer; `ranked` is how many trained configurations competed. Where a long
    model name, optimizer timing and budget meet, the pointer to the list, the memory and then the
    count over the budget go (all are in report.md), so the line stays within ANSWER_MAX_CHARS."""
    budget = "" if rec.budget_gib is None else f", budget {rec.budget_gib:g} GiB/device"
    head = f"Recommendation ({_model(rec.model)}{budget}): "
    if not rec.picks:
        return head + "no trained configuration fits; see report.md"
    best = rec.picks[0]
    memory = f", {_memory(best, rec.memory)}"
    bound = ", host-bound" if is_set(best.get(M.host_bound)) else ""
    listed = " (list: report.md)"
    tail = ""
    if len(rec.tied) > 1:
        tail = f"; {len(rec.tied)} of {ranked} tied within noise{listed}; to separate them: {separator(rec.tied)}"
    elif len(rec.picks) > 1:
        second = rec.picks[1]
        # its gain over the runner-up, as report.md's "+N% over" reads it (not the runner-up's shortfall)
        tail = f"; {100 * (best[SPEED] / second[SPEED] - 1):.0f}% ahead of {short_name(second, ANSWER_TIMING_WORD)}, beyond noise"
    # what the budget cost: the configurations over it, faster or not, left out
    over = f"; {rec.over_budget} over the budget left out" if rec.over_budget else ""
    text = f"{head}{short_name(best, ANSWER_TIMING_WORD)}, {best[SPEED]:,.0f} tok/s/dev{memory}{bound}{tail}{over}"
    for optional in (listed, memory, over):  # each is in report.md too
        if len(text) > ANSWER_MAX_CHARS and optional:
            text = text.replace(optional, "")
    return text


def why_line(rec: Recommendation) -> str | None:
    """`Why: <runner-up> is N ms slower per step than <winner>: ...`, the two steps taken apart
    (report.why), on a line of its own so the answer above stays short; None without parts."""
    if len(rec.picks) < 2:
        return None
    reason = why_slower(rec.picks[1], rec.picks[0])
    if not reason:
        return None
    return f"Why{' (a difference within noise)' if len(rec.tied) > 1 else ''}: {reason}"


def answer_lines(df, budget_gib: float | None = None) -> list[str]:
    """The short answer for each model in a comparison table (see the module docstring), each
    followed by its reason where the winner and the runner-up have their steps' parts."""
    ok = trained_rows(df)
    lines = []
    for rec in recommend(df, budget_gib):
        ranked = int(rec.rows_of(ok)[SPEED].notna().sum())
        lines.append(answer_line(rec, ranked))
        reason = why_line(rec)
        if reason:
            lines.append(reason)
    return lines
