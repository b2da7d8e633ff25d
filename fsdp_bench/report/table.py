"""The comparison table: one row per case (comparison.csv) and one per case x rank (per_rank.csv).

Pure pandas over loaded results; no torch, no matplotlib. Column names carry their units.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fsdp_bench.analysis.busy import is_host_bound
from fsdp_bench.analysis.case_time import case_time_split
from fsdp_bench.plan.case import timing_order
from fsdp_bench.plan.catalog import strategy_order
from fsdp_bench.results.metrics import HIGHER_IS_BETTER, LOWER_IS_BETTER, M
from fsdp_bench.results.metrics import label as metric_label
from fsdp_bench.results.records import CaseResult, RankRecord, TableRow
from fsdp_bench.results.schema import GIB
from fsdp_bench.results.trained import untrained_reason

# The axes a person compares along, in sort order; the CSV starts with them.
AXES = ("model", "strategy", "batch_size", "grad_accum", "optimizer_timing")
LEAD_COLUMNS = (
    "case_id",
    *AXES,
    "nproc",
    "global_batch_size",
    "seq_len",
    "tokens_per_optimizer_step",
    "compare_group",
    "trained",
    "rank_in_group",
    "is_best",
    "status",
    "reason",
)
# The column of the model a case is ranked and summarised within (model_settings).
MODEL_SETTING = "model_setting"
# What ranks cases against each other: the same work per optimizer step (model, seq_len, tokens
# per optimizer step = batch * grad-accum * ranks * seq_len) at the same precision.
RANK_METRIC = M.tokens_per_s_per_device

# The columns of the report's table (the CSV has every metric), shown only when some case has them:
# the case's axes and verdicts, labelled here, and the metrics the registry shows in the table.
_CASE_LABELS = {
    "strategy": "strategy",
    "batch_size": "batch",
    "grad_accum": "accum",
    "optimizer_timing": "optimizer built",
    "status": "status",
    "rank_in_group": "rank (same work)",
}
REPORT_COLUMN_ORDER = (
    "strategy",
    "batch_size",
    "grad_accum",
    "optimizer_timing",
    "status",
    M.tokens_per_s_per_device,
    M.step_time_s_median,
    M.step_time_median_ci_halfwidth_pct,
    M.step_time_s_p90,
    M.peak_allocated_gib,
    M.peak_reserved_gib,
    M.peak_rss_gib,
    M.mfu_pct,
    M.gpu_busy_pct,
    M.gpu_idle_ms_per_step,
    M.host_bound,
    M.comm_exposed_s_per_step,
    M.measure_timed_share_pct,
    M.effective_sharding,
    M.loss_first,
    M.loss_last,
    M.steps_measured,  # loss_last is after this many measured steps, which adaptive measurement varies
    M.params_changed,
    M.repeats,
    M.repeat_spread_pct,
    "rank_in_group",
)
REPORT_COLUMNS = tuple((name, _CASE_LABELS.get(name) or metric_label(name)) for name in REPORT_COLUMN_ORDER)


def flatten_case(result: CaseResult) -> TableRow:
    """One comparison.csv row. Cases that did not finish keep their axes, status and reason, but
    no metrics: a half-measured number from a case that then failed would mislead."""
    case = dict(result.get("case") or {})
    row: TableRow = {"case_id": result.get("case_id")}
    row.update(case)
    row.update(result.get("work") or {})  # global batch, tokens per step, like-for-like group
    row["status"] = result.get("status")
    row["reason"] = result.get("reason") or ""
    row["returncode"] = result.get("returncode")
    row["duration_s"] = result.get("duration_s")
    row["started_utc"] = result.get("started_utc")
    row.update(case_time_split(result))  # what the case cost the sweep, whatever its status
    if result.get("status") == "ok":
        for key, value in (result.get("metrics") or {}).items():
            if isinstance(value, (int, float, str, bool)) or value is None:
                row[key] = value
    return row


def _sorted(df):
    if df.empty:
        return df
    keys = df.assign(
        _s=df["strategy"].map(strategy_order) if "strategy" in df else 0,
        _t=df["optimizer_timing"].map(timing_order) if "optimizer_timing" in df else 0,
    )
    by = [c for c in ("model", "_s", "strategy", "batch_size", "grad_accum", "_t", "case_id") if c in keys]
    return keys.sort_values(by, kind="stable").drop(columns=["_s", "_t"]).reset_index(drop=True)


def build_table(results: Iterable[CaseResult]):
    """The comparison DataFrame: lead columns first, then every metric any case has."""
    import pandas as pd

    from fsdp_bench.analysis.aggregate import loss_dev_onset_step_vs_ddp, loss_max_abs_dev_vs_ddp
    from fsdp_bench.analysis.drift import run_drift
    from fsdp_bench.report.why import add_why_vs_best
    from fsdp_bench.results.stats import mean_across_ranks

    results = list(results)
    rows = [flatten_case(r) for r in results]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=list(LEAD_COLUMNS))
    # Each finished case's loss curve (rank mean per step) against the matching DDP case's.
    curves = {
        r["case_id"]: mean_across_ranks(x["losses"] for x in r["ranks"])
        for r in results
        if r.get("status") == "ok" and r.get("ranks") and all(x.get("losses") for x in r["ranks"])
    }
    deviation = loss_max_abs_dev_vs_ddp(rows, curves)
    df[M.loss_max_abs_dev_vs_ddp] = [deviation.get(c) for c in df["case_id"]]
    onset = loss_dev_onset_step_vs_ddp(rows, curves)
    df[M.loss_dev_onset_step_vs_ddp] = pd.array([onset.get(c) for c in df["case_id"]], dtype="Int64")
    df[MODEL_SETTING] = _model_settings(df)
    drift = run_drift(results)  # one figure for the whole run: what a fresh process tree changes
    df[M.run_drift_pct] = float("nan") if drift is None else drift.pct
    df = add_why_vs_best(add_ranking(df))
    lead = [c for c in LEAD_COLUMNS if c in df.columns]
    df = df[lead + [c for c in df.columns if c not in lead]]
    return _sorted(df)


def model_settings(df):
    """Each row's model, with its sequence length and precision ("gpt_tiny sl128 bf16") where the
    table holds that model at several: what the recommendation, the summary lines and the chart
    panels rank within. Tokens/s at another sequence length or precision is not the same work (a
    longer sequence costs more per token, a lower precision computes something else); batch size,
    accumulation, strategy and optimizer timing are the knobs they choose among. build_table's
    tables carry it as a column, decided once over every case (failed ones too), so a subset of
    the table is labelled as the whole is."""
    return df[MODEL_SETTING] if MODEL_SETTING in df else _model_settings(df)


def _model_settings(df):
    import pandas as pd

    if "model" not in df:
        return pd.Series("", index=df.index, dtype="object")
    model = df["model"]
    seq = df["seq_len"] if "seq_len" in df else pd.Series(None, index=df.index, dtype="object")
    precision = df["precision"] if "precision" in df else pd.Series(None, index=df.index, dtype="object")
    setting = [
        " ".join(([f"sl{s:g}"] if isinstance(s, (int, float)) and s == s else []) + ([p] if isinstance(p, str) else []))
        for s, p in zip(seq, precision)
    ]
    setting = pd.Series(setting, index=df.index, dtype="object")
    several = setting.groupby(model).transform("nunique") > 1
    return model.where(~several, model.astype(str) + " " + setting)


def did_train(row: Mapping[str, Any]) -> bool:
    """`learned`, with its peers: the cases that may be ranked or called best.

    A simulated rank (--bench-simulate-world-size) trains alone on a fake process group whose
    collectives are free, so its speed is no strategy's: a CPU run recommended one simulated
    fsdp1_full_shard "35% ahead of fsdp2, beyond noise" by that free communication. Its memory is
    real: the peak prediction is judged on it (`learned`)."""
    return learned(row) and row.get("simulate") is not True


def learned(row: Mapping[str, Any]) -> bool:
    """Finished ok and the model learned: parameters changed, the loss finite and moving
    (results.trained)."""
    return row.get("status") == "ok" and untrained_reason(row) is None


def add_ranking(df):
    """trained, rank_in_group (1 = fastest by tokens/s/device among cases that trained, within
    the result's like-for-like `compare_group`, results.work) and is_best."""
    import pandas as pd

    for column in ("tokens_per_optimizer_step", "compare_group"):
        if column not in df:  # no result knew its work (a case folder without its fields)
            df[column] = None
    records = df.to_dict("records")
    df["trained"] = [did_train(r) for r in records]
    rank = pd.Series([None] * len(df), index=df.index, dtype="object")
    if RANK_METRIC in df:
        speed = pd.to_numeric(df[RANK_METRIC], errors="coerce")
        eligible = df["trained"] & speed.notna() & df["compare_group"].notna()
        ranks = speed[eligible].groupby(df.loc[eligible, "compare_group"]).rank(ascending=False, method="min")
        rank.loc[ranks.index] = ranks.astype(int)
    df["rank_in_group"] = rank
    df["is_best"] = rank == 1
    return df


def _gib(value: Any) -> float | None:
    return value / GIB if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def flatten_rank(result: CaseResult, rank: RankRecord) -> TableRow:
    """One per_rank.csv row: where this rank got to, its memory and its own step times."""
    from fsdp_bench.results.stats import summarize_step_times

    case = result.get("case") or {}
    error = rank.get("error") or {}
    memory = rank.get("memory") or {}
    row: TableRow = {
        "case_id": result.get("case_id"),
        **{k: case.get(k) for k in AXES},
        "case_status": result.get("status"),
        "rank": rank.get("rank"),
        "world_size": rank.get("world_size"),
        "host": rank.get("host"),
        "rank_status": rank.get("status"),
        "stage": rank.get("stage"),
        "error_type": error.get("type"),
        "error_message": error.get("message"),
        "device_name": rank.get("device_name"),
        "n_params": rank.get("n_params"),
        M.params_changed: rank.get(M.params_changed),
        "memory_method": memory.get("method"),
    }
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes"):
        row[key.replace("_bytes", "_gib")] = _gib(memory.get(key))
    times = rank.get("step_times_s") or []
    stats = summarize_step_times(times) if times else {}
    for key in (M.step_time_s_median, M.step_time_s_p10, M.step_time_s_p90):
        row[key] = stats.get(key)
    row[M.steps_measured] = len(times)
    row.update(_rank_busy(rank))
    row.update(_rank_parts(rank))
    losses = rank.get("losses") or []
    row[M.loss_first] = losses[0] if losses else None
    row[M.loss_last] = losses[-1] if losses else None
    for name, value in (rank.get("memory_breakdown_bytes") or {}).items():
        row[f"breakdown_{name}_gib"] = _gib(value)
    for name, value in (rank.get("expected_model_state_bytes") or {}).items():
        if isinstance(value, str):  # its layout and method, beside the byte counts
            row[f"expected_model_state_{name}"] = value
        else:
            row[f"expected_model_state_{name}_gib"] = _gib(value)
    for name, value in (rank.get("allocator") or {}).items():
        if isinstance(value, (int, float)):
            row[f"allocator_{name}"] = value
    for entry in rank.get("stages") or []:
        for kind in ("allocated", "reserved", "rss"):
            value = _gib(entry.get(f"{kind}_bytes"))
            if value is not None:
                row[f"stage_{entry.get('stage')}_{kind}_gib"] = value
    return row


def _rank_busy(rank: RankRecord) -> TableRow:
    """This rank's GPU busy share (its own probe step against its own median step)."""
    busy = rank.get("gpu_busy") or {}
    return {
        M.gpu_busy_pct: busy.get("pct"),
        M.gpu_idle_ms_per_step: busy.get("idle_ms_per_step"),
        M.host_bound: is_host_bound(busy.get("pct")),
    }


def _rank_parts(rank: RankRecord) -> TableRow:
    """This rank's own step taken apart (the case's columns are the waited-for rank's)."""
    from fsdp_bench.analysis.attribution import PARTS

    parts = rank.get("step_parts") or {}
    if not parts.get("window_s"):
        return {}
    return {M.probe_step_s: parts["window_s"], **{f"part_{p}_s_per_step": parts.get(f"{p}_s") for p in PARTS}}


def build_per_rank_table(results: Iterable[CaseResult]):
    import pandas as pd

    rows = [flatten_rank(r, rank) for r in results for rank in (r.get("ranks") or []) if isinstance(rank, dict)]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["case_id", *AXES, "case_status", "rank"])
    df = _sorted(df)
    # keep the case order from _sorted, ranks ascending inside a case
    order = {cid: i for i, cid in enumerate(dict.fromkeys(df["case_id"]))}
    return (
        df.assign(_c=df["case_id"].map(order))
        .sort_values(["_c", "rank"], kind="stable")
        .drop(columns="_c")
        .reset_index(drop=True)
    )


def is_set(value: Any) -> bool:
    """Whether a flag column (host_bound, ...) holds True in a row: a Python or a numpy bool;
    False, None and NaN (not measured) are not set."""
    return value is not None and value == value and bool(value)


def ok_rows(df):
    return df[df["status"] == "ok"] if "status" in df else df.iloc[0:0]


def trained_rows(df):
    """Finished cases that trained: the only ones that may be ranked or called best."""
    return df[df["trained"] == True] if "trained" in df else ok_rows(df)  # noqa: E712


def unranked(df):
    """The finished cases never ranked (not among `trained_rows`), as (simulated ones, whose
    communication is free; the others, which did not train)."""
    out = ok_rows(df).loc[lambda d: ~d.index.isin(trained_rows(df).index)]
    simulated = out[out["simulate"] == True] if "simulate" in out else out.iloc[0:0]  # noqa: E712
    return simulated, out.drop(simulated.index)


def left_out(df, column: str | None = None) -> str:
    """Why cases are not among `trained_rows(df)` (and, with `column`, why trained ones lack it):
    "" when none is, else e.g. "left out: 1 did not train (id); 2 oom (id, id)". Every ranking,
    chart and "best" line says this rather than dropping cases silently."""
    if df.empty or "status" not in df:
        return ""
    kept = trained_rows(df)
    parts = []
    simulated, untrained = unranked(df)
    if len(simulated):
        parts.append(f"{len(simulated)} simulated, communication free ({', '.join(simulated['case_id'])})")
    if len(untrained):
        parts.append(f"{len(untrained)} did not train ({', '.join(untrained['case_id'])})")
    for status, rows in df[df["status"] != "ok"].groupby("status"):
        parts.append(f"{len(rows)} {status} ({', '.join(rows['case_id'])})")
    if column is not None:
        lacking = kept[kept[column].isna()] if column in kept else kept
        if len(lacking):
            parts.append(f"{len(lacking)} without {column} ({', '.join(lacking['case_id'])})")
    return "left out: " + "; ".join(parts) if parts else ""


def best_index(df, column: str, group_by: str = "compare_group") -> set[int]:
    """Row labels holding the best value of `column` among cases that trained, per like-for-like
    group (same model, seq_len, tokens per optimizer step and precision)."""
    if column not in df.columns or (column not in HIGHER_IS_BETTER and column not in LOWER_IS_BETTER):
        return set()
    import pandas as pd

    ok = trained_rows(df)
    values = pd.to_numeric(ok[column], errors="coerce")
    best: set[int] = set()
    for _, idx in ok.groupby(group_by).groups.items() if group_by in ok else [(None, ok.index)]:
        part = values.loc[idx].dropna()
        if part.empty:
            continue
        target = part.max() if column in HIGHER_IS_BETTER else part.min()
        best.update(part.index[part == target])
    return best
