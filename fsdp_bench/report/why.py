"""Why one configuration beat another: the step-time parts of two cases (`part_*_s_per_step`,
analysis.attribution) scaled to each case's measured median step and subtracted, the one or two
parts that grew most named with their milliseconds. Pure pandas, no matplotlib."""

from __future__ import annotations

from typing import Any

from fsdp_bench.analysis.attribution import PARTS, reason_text, scaled_parts
from fsdp_bench.plan.catalog import intended_timing
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import TableRow

WHY_COLUMN = M.why_vs_best
HOST_LABELS = {"device idle": "host time (device idle)", "no op or collective running": "host time (nothing running)"}


def short_name(row: TableRow, timing_word: str = ", optimizer") -> str:
    """`fsdp2 batch 8 x accum 1`, and the optimizer timing when it is not the intended one
    (`timing_word` before it: the short answer's is ` opt`)."""
    intended = row.get("optimizer_timing") in (None, intended_timing().name)
    timing = "" if intended else f"{timing_word} {row['optimizer_timing']}"
    return f"{row['strategy']} batch {row['batch_size']} x accum {row['grad_accum']}{timing}"


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    return float(value) if ok else None


PER_TOKENS = 1000  # cases doing different work per step are compared per this many tokens per device


def row_parts(row: TableRow, *, per_tokens: int | None = None) -> dict[str, float] | None:
    """The row's parts in seconds of its measured median step (or of the time it takes
    `per_tokens` tokens on one device); None without a measured probe."""
    step, window = _number(row.get(M.step_time_s_median)), _number(row.get(M.probe_step_s))
    parts = {p: _number(row.get(f"part_{p}_s_per_step")) for p in PARTS}
    if step is None or not window or any(v is None for v in parts.values()):
        return None
    scaled = scaled_parts({"window_s": window, **{f"{p}_s": v for p, v in parts.items()}}, step)
    if per_tokens is None:
        return scaled
    tokens = _number(row.get("tokens_per_optimizer_step"))
    ranks = _number(row.get("nproc")) or 1.0
    if not tokens:
        return None
    return {p: s * per_tokens * ranks / tokens for p, s in scaled.items()}


def why_slower(slower: TableRow, faster: TableRow) -> str | None:
    """`reason_text` for two table rows, or None when either has no parts. Rows doing different
    work per optimizer step (another batch or accumulation) are compared per PER_TOKENS tokens
    per device, the time that decides tokens/s."""
    same = slower.get("tokens_per_optimizer_step") == faster.get("tokens_per_optimizer_step")
    per_tokens = None if same else PER_TOKENS
    a, b = row_parts(slower, per_tokens=per_tokens), row_parts(faster, per_tokens=per_tokens)
    if a is None or b is None:
        return None
    host = HOST_LABELS.get(str(slower.get(M.parts_host_means)), "host time")
    per = "per step" if same else f"per {PER_TOKENS:,} tokens per device"
    return reason_text(short_name(slower), short_name(faster), a, b, host_label=host, per=per)


def add_why_vs_best(df):
    """The `why_vs_best` column: for every trained case but the fastest of its compare group, why
    it is slower than that fastest case (empty where the parts were not measured)."""
    if "compare_group" not in df or "is_best" not in df or M.probe_step_s not in df:
        return df
    best = {r["compare_group"]: r for r in df[df["is_best"] == True].to_dict("records")}  # noqa: E712
    texts = []
    for row in df.to_dict("records"):
        top = best.get(row.get("compare_group"))
        # a case tied at rank 1 with the one kept as `top` is no slower: it gets no reason either
        eligible = top is not None and row.get("trained") and not row.get("is_best")
        texts.append((why_slower(row, top) or "") if eligible else "")
    df[WHY_COLUMN] = texts
    return df


def why_lines(df) -> list[str]:
    """report.md's 'Why' section: per compare group, the winner's parts, then each other trained
    case's reason against it."""
    if WHY_COLUMN not in df:
        return []
    lines = []
    for group, rows in df[df["compare_group"].notna()].groupby("compare_group", sort=False):
        top = rows[rows["is_best"] == True].to_dict("records")  # noqa: E712
        parts = row_parts(top[0]) if top else None
        if parts is None:
            continue
        said = ", ".join(f"{p.replace('_', ' ')} {1e3 * s:,.1f} ms" for p, s in parts.items())
        lines.append(f"{group}: fastest {short_name(top[0])} ({said} of its {1e3 * sum(parts.values()):,.1f} ms step)")
        lines += [f"  {text}" for text in rows[WHY_COLUMN] if text]
    return lines
