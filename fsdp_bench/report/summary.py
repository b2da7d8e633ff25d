"""One short, automatically derived line per question a person choosing a strategy asks.

Pure functions over the comparison table (and loss curves); each returns lines, or none when the
run cannot answer the question.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fsdp_bench.analysis.aggregate import LOSS_MATCH_TOL, LOSS_ROUNDING_TOL
from fsdp_bench.analysis.busy import HOST_BOUND_BUSY_PCT, host_bound_detail
from fsdp_bench.plan.catalog import PRECISIONS, intended_timing, is_baseline, strategy_order, timings_before_shard
from fsdp_bench.report.table import is_set, left_out, model_settings, ok_rows, trained_rows
from fsdp_bench.results.metrics import M
from fsdp_bench.results.schema import FAILED_STATUSES, memory_unit
from fsdp_bench.results.stats import CONFIDENCE_PCT, NOISY_CV_PCT

# A loss curve within rounding of DDP's for this many steps that parts from it later has drifted
# by rounding (analysis.aggregate.loss_dev_onset_step_vs_ddp): a wrong gradient or a lost update
# shows from the first optimizer steps, while the rounding drift seen on CPU took 43 steps to pass
# rounding size and 45 to pass 1e-3.
LOSS_PARITY_STEPS = 10


def _strategies(df) -> list[str]:
    return sorted(df["strategy"].unique(), key=lambda s: (strategy_order(s), s))


def _fmt(value: float, digits: int = 3) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _main_slice(df):
    """Optimizer built after sharding (the correct program) at the smallest grad-accum, per model."""
    intended = df["optimizer_timing"] == intended_timing().name
    part = df[intended] if intended.any() else df
    return part[part["grad_accum"] == part["grad_accum"].min()]


def largest_batch_that_fits(df) -> list[str]:
    lines = []
    for model, mdf in df.groupby(model_settings(df)):
        part = _main_slice(mdf)
        items = []
        for strategy in _strategies(part):
            rows = part[part["strategy"] == strategy]
            ok = sorted(rows[rows["status"] == "ok"]["batch_size"])
            bad = rows[rows["status"].isin(FAILED_STATUSES)]
            tried = max(rows["batch_size"])
            if not ok:
                items.append(
                    f"{strategy} none ({', '.join(sorted(set(bad['status'])))})" if len(bad) else f"{strategy} none"
                )
                continue
            fits = ok[-1]
            above = bad[bad["batch_size"] > fits].sort_values("batch_size")
            if len(above):
                items.append(
                    f"{strategy} {fits} (batch {above.iloc[0]['batch_size']}: {above.iloc[0]['status'].upper()})"
                )
            else:
                items.append(f"{strategy} {fits}" + (" (largest tried)" if fits == tried else ""))
        if items:
            lines.append(
                f"Largest batch that fits ({model}, grad accum {part['grad_accum'].min()}): {'; '.join(items)}."
            )
    return lines


def _gain_text(best, second) -> str:
    """ "+N% over X" with the gain's range from the two tokens/s intervals, or "within noise"."""
    from fsdp_bench.report.recommend import noise_band, noise_rule, speeds_overlap

    speed = M.tokens_per_s_per_device
    gain = 100 * (best[speed] / second[speed] - 1)
    if speeds_overlap(dict(best), dict(second)):
        return f"{second['strategy']} within noise ({gain:+.0f}%; {noise_rule(best)}, overlap)"
    a, b = noise_band(dict(best)), noise_band(dict(second))
    return (
        f"+{gain:.0f}% over {second['strategy']} (at least +{100 * (a[0] / b[1] - 1):.0f}% at "
        f"{CONFIDENCE_PCT}% confidence)"
    )


def _host_decided(best, second) -> str:
    """', decided by host overhead (both host-bound)' when the two cases compared are host-bound."""
    if is_set(best.get(M.host_bound)) and is_set(second.get(M.host_bound)):
        return ", decided by host overhead (both host-bound)"
    return ""


def fastest_per_batch(df) -> list[str]:
    lines = []
    for model, every in df.groupby(model_settings(df)):
        main = _main_slice(every)
        mdf, part = trained_rows(every), trained_rows(main)
        if M.tokens_per_s_per_device not in part:
            continue
        part = part[part[M.tokens_per_s_per_device].notna()]
        omitted = left_out(main, M.tokens_per_s_per_device)
        items = []
        for size, rows in part.groupby("batch_size"):
            ranked = rows.sort_values(M.tokens_per_s_per_device, ascending=False)
            best = ranked.iloc[0]
            text = f"batch {size}: {best['strategy']} ({_fmt(best[M.tokens_per_s_per_device])} tokens/s/device"
            if len(ranked) > 1:
                text += ", " + _gain_text(best, ranked.iloc[1]) + _host_decided(best, ranked.iloc[1])
            items.append(text + ")")
        if items:
            accums = sorted(set(mdf["grad_accum"]))
            covers = f"grad accum {part['grad_accum'].min()}" + (
                f" only (the run also has {', '.join(str(a) for a in accums if a != part['grad_accum'].min())})"
                if len(accums) > 1
                else ""
            )
            lines.append(
                f"Fastest strategy ({model}, cases that trained, {covers}): {'; '.join(items)}"
                + (f"; {omitted}" if omitted else "")
                + "."
            )
    return lines


_MEMORY_COLUMNS = (
    (M.peak_allocated_gib, "peak allocated"),
    (M.peak_reserved_gib, "peak reserved"),
    (M.peak_rss_gib, "peak RSS"),
)


def memory_saved_vs_ddp(df) -> list[str]:
    lines = []
    ok = ok_rows(df)
    for model, mdf in ok.groupby(model_settings(ok)):
        part = _main_slice(mdf)
        ddp = part[part["strategy"].map(is_baseline)]
        if ddp.empty:
            continue
        size = int(ddp["batch_size"].max())
        at = part[part["batch_size"] == size]
        base = at[at["strategy"].map(is_baseline)].iloc[0]
        for column, label in _MEMORY_COLUMNS:
            if column not in at or base.get(column) is None or base[column] != base[column] or not base[column] > 0:
                continue
            items = []
            factor, unit = memory_unit(float(at[column].max()))  # one unit in the line (issue #39)
            for strategy in _strategies(at):
                if is_baseline(strategy):
                    continue
                value = at[at["strategy"] == strategy].iloc[0].get(column)
                if value is None or value != value:
                    continue
                saved = 100 * (1 - value / base[column])
                items.append(
                    f"{strategy} {'saves' if saved >= 0 else 'uses'} {abs(saved):.0f}%"
                    f"{'' if saved >= 0 else ' more'} ({_fmt(factor * value)} {unit})"
                )
            if items:
                ddp = f"{_fmt(factor * base[column])} {unit}"
                lines.append(f"Memory vs ddp ({model}, batch {size}, {label}, ddp {ddp}): {'; '.join(items)}.")
                break  # the allocator's number when there is one; RSS only as a fallback
    return lines


def _span(low: int, high: int) -> str:
    """ "28", or "12-28" when the counts differ."""
    return str(low) if low == high else f"{low}-{high}"


def _stale_cause(frozen) -> str:
    """Why the frozen cases did not train, from what the workers observed (never from names)."""
    column = M.optimizer_tensors_not_model_params
    counts = frozen[column].dropna() if column in frozen else frozen.iloc[0:0]
    stale = counts[counts > 0]
    if stale.empty:
        return "the records do not show why (no optimizer tensor was seen outside the model)."
    return (
        f"in {len(stale)} of them the optimizer steps {_span(int(stale.min()), int(stale.max()))} tensors that are "
        f"not the model's parameters (observed after sharding), so the model's weights are never updated."
    )


def optimizer_timing_effect(df) -> list[str]:
    lines = []
    ok = ok_rows(df)
    if M.params_changed not in ok:
        return lines
    for row in timings_before_shard():
        timing = row.name
        rows = ok[ok["optimizer_timing"] == timing]
        if rows.empty:
            continue
        frozen = rows[rows[M.params_changed] == False]  # noqa: E712 (pandas mask, not identity)
        label = row.label
        if len(frozen):
            names = ", ".join(sorted(set(frozen["strategy"]), key=strategy_order))
            lines.append(
                f"{label}: parameters never changed in {len(frozen)} of {len(rows)} cases ({names}); "
                f"{_stale_cause(frozen)}"
            )
        else:
            lines.append(f"{label}: parameters changed in all {len(rows)} cases; training works.")
    return lines


LOW_PRECISIONS = tuple(p.name for p in PRECISIONS.values() if p.low)


def loss_agreement(df) -> list[str]:
    """Do the strategies train the same model: each case's loss curve against the same DDP case's.

    A curve past the tolerance is a mismatch unless it stayed within rounding (LOSS_ROUNDING_TOL)
    of DDP's for the first LOSS_PARITY_STEPS steps: then it is fp32 rounding that training
    amplified (analysis.aggregate.loss_dev_onset_step_vs_ddp), said as such."""
    if M.loss_max_abs_dev_vs_ddp not in df:
        return []
    ok = ok_rows(df)
    if ok.empty:  # mapping an empty column gives objects, and '&' on them warns (pandas 4)
        return []
    ok = ok[ok[M.loss_max_abs_dev_vs_ddp].notna() & ~ok["strategy"].map(is_baseline).astype(bool)]
    if ok.empty:
        return []
    off = ok[ok[M.loss_max_abs_dev_vs_ddp] > LOSS_MATCH_TOL]
    if off.empty:
        return [f"Loss curves match ddp within {LOSS_MATCH_TOL:g} in all {len(ok)} comparable cases."]
    onset = off[M.loss_dev_onset_step_vs_ddp] if M.loss_dev_onset_step_vs_ddp in off else None
    late = off[onset > LOSS_PARITY_STEPS] if onset is not None else off.iloc[0:0]
    early = off.drop(late.index)
    lines = [_loss_mismatch(early, len(ok))] if not early.empty else []
    if not late.empty:
        worst = late.sort_values(M.loss_max_abs_dev_vs_ddp, ascending=False).iloc[0]
        lead = (
            f"Loss curves match ddp within {LOSS_MATCH_TOL:g} in {len(ok) - len(late)} of {len(ok)} comparable cases; "
            f"the other {len(late)}"
            if early.empty
            else f"{len(late)} other case(s)"
        )
        lines.append(
            f"{lead} stay within rounding ({LOSS_ROUNDING_TOL:g}) of it for their first {LOSS_PARITY_STEPS} steps and "
            f"part from it later (from step {int(late[M.loss_dev_onset_step_vs_ddp].min())} on; largest "
            f"{worst[M.loss_max_abs_dev_vs_ddp]:.3g} apart in loss at one step, {worst['case_id']}): sums added in another order round "
            "differently and training amplifies that over the steps, while a sharding error shows in the first steps."
        )
    return lines


def _loss_mismatch(off, compared: int) -> str:
    worst = off.sort_values(M.loss_max_abs_dev_vs_ddp, ascending=False).iloc[0]
    line = (
        f"Loss curves differ from ddp by more than {LOSS_MATCH_TOL:g} in {len(off)} of {compared} cases "
        f"(largest: {worst['case_id']}, {worst[M.loss_max_abs_dev_vs_ddp]:.3g} apart in loss at one step)."
    )
    if "precision" in off and off["precision"].isin(LOW_PRECISIONS).any():
        # Seen on an H100 at bf16: 0.77 apart after 4 steps, 0.08-0.37 after 25, in every FSDP case.
        line += (
            " At bf16/fp16 that is expected, not a sharding error: ddp runs under autocast over fp32"
            " parameters (norms and softmax in fp32), FSDP casts the parameters and computes everything"
            " in low precision. Loss parity is checked at --bench-precision fp32."
        )
    return line


def failures(df, unreadable: int = 0) -> list[str]:
    """How many cases finished. `unreadable`: the run's case files that could not be read (the
    report writer counts them); df has no row for them, so without the count a run with a
    corrupt file would read 'All N cases finished'."""
    counts = df["status"].value_counts()
    bad = {s: int(counts.get(s, 0)) for s in ("oom", "timeout", "failed", "skipped") if counts.get(s, 0)}
    text = ", ".join(f"{n} {s}" for s, n in bad.items())
    if unreadable:
        read = f"{len(df)} of {len(df) + unreadable} case files read, {unreadable} unreadable (see Problems)"
        if not bad:
            return [f"{read}; the {len(df)} read finished."]
        return [f"{read}; {int(counts.get('ok', 0))} of the {len(df)} read finished; {text} (see Failed cases)."]
    if not bad:
        return [f"All {len(df)} cases finished."]
    return [f"{int(counts.get('ok', 0))} of {len(df)} cases finished; {text} (see Failed cases)."]


def timing_noise(df) -> list[str]:
    ok = ok_rows(df)
    if M.step_time_cv_pct not in ok or ok[M.step_time_cv_pct].isna().all():
        return []
    noisy = ok[ok[M.step_time_cv_pct] > NOISY_CV_PCT]
    if noisy.empty:
        return [f"Step times are steady: coefficient of variation <= {NOISY_CV_PCT:g}% in every case."]
    return [
        f"Step times vary by more than {NOISY_CV_PCT:g}% (CV) in {len(noisy)} of {len(ok)} cases: treat small "
        f"throughput differences as noise (busy machine, or too few steps): {', '.join(noisy['case_id'])}."
    ]


def best_mfu(df) -> list[str]:
    """The highest MFU of each model (model_settings), among cases that trained."""
    ok = trained_rows(df)  # a case that did not train is never called best
    if M.mfu_pct not in ok or ok[M.mfu_pct].isna().all():
        return []
    lines = []
    scopes = model_settings(df)
    several = ok.groupby(model_settings(ok)).ngroups > 1
    for model, rows in ok[ok[M.mfu_pct].notna()].groupby(model_settings(ok)):
        best = rows.loc[rows[M.mfu_pct].idxmax()]
        omitted = left_out(df[scopes == model], M.mfu_pct)
        name = f" ({model})" if several else ""
        lines.append(
            f"Highest MFU{name}: {best[M.mfu_pct]:.1f}% ({best['case_id']})" + (f"; {omitted}" if omitted else "") + "."
        )
    return lines


def exposed_communication(df) -> list[str]:
    ok = ok_rows(df)
    cols = (M.comm_exposed_s_per_step, M.step_time_s_median)
    if any(c not in ok for c in cols):
        return []
    ok = ok[ok[M.comm_exposed_s_per_step].notna() & (ok[M.step_time_s_median] > 0)]
    if ok.empty:
        return []
    share = (100 * ok[M.comm_exposed_s_per_step] / ok[M.step_time_s_median]).groupby(ok["strategy"]).median()
    items = [f"{s} {share[s]:.0f}%" for s in sorted(share.index, key=strategy_order)]
    return [f"Exposed communication as a share of step time (median over cases): {', '.join(items)}."]


def host_bound_cases(df) -> list[str]:
    """Which cases the host holds back: GPU busy under HOST_BOUND_BUSY_PCT of the step, with the
    idle time per step (only where the busy share was measured: CUDA, probes on)."""
    ok = ok_rows(df)
    if M.host_bound not in ok or M.gpu_busy_pct not in ok or ok[M.gpu_busy_pct].isna().all():
        return []
    ok = ok[ok[M.gpu_busy_pct].notna()]
    bound = ok[ok[M.host_bound] == True]  # noqa: E712 (pandas mask, not identity)
    if bound.empty:
        return [f"GPU-bound: the GPU is busy at least {HOST_BOUND_BUSY_PCT:.0f}% of the step in all {len(ok)} cases."]
    items = [
        f"{r['case_id']} ({host_bound_detail(r[M.gpu_busy_pct], r[M.gpu_idle_ms_per_step])})"
        for r in bound.sort_values(M.gpu_busy_pct).to_dict("records")
    ]
    return [
        f"Host-bound (GPU busy under {HOST_BOUND_BUSY_PCT:.0f}% of the step) in {len(bound)} of {len(ok)} cases: "
        "the host's overhead (Python, hooks, kernel launches) sets their step time, so the order among them "
        f"measures the host more than the strategies; a larger batch or torch.compile shrinks that share: "
        f"{'; '.join(items)}."
    ]


QUESTIONS: Sequence[tuple[str, Callable[[Any], list[str]]]] = (
    ("Did every case finish?", failures),
    ("Largest batch that fits per strategy", largest_batch_that_fits),
    ("Fastest strategy at each batch size", fastest_per_batch),
    ("Memory saved vs DDP", memory_saved_vs_ddp),
    ("Does building the optimizer before sharding train?", optimizer_timing_effect),
    ("Do strategies train the same model?", loss_agreement),
    ("How much communication is exposed?", exposed_communication),
    ("Is the GPU kept busy?", host_bound_cases),
    ("Best hardware utilization", best_mfu),
    ("Are the timings trustworthy?", timing_noise),
)


def summary_lines(df, budget_gib: float | None = None) -> list[tuple[str, str]]:
    """(question, answer line) for every question the run can answer; the recommendation first."""
    from fsdp_bench.report.recommend import recommendation_lines

    if df.empty:
        return []
    first = [("Which configuration should I use?", line) for line in recommendation_lines(df, budget_gib)]
    return first + [(question, line) for question, answer in QUESTIONS for line in answer(df)]
