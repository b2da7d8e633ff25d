"""A case's headline metrics from its ranks' records: throughput, memory, model state, FLOPs and
MFU, profile times, utilization and GPU busy share, and the loss deviation from DDP (pure, no torch)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from fsdp_bench.analysis.attribution import PARTS, critical_rank, scaled_parts
from fsdp_bench.analysis.busy import is_host_bound
from fsdp_bench.analysis.case_time import measure_timed_share_pct
from fsdp_bench.plan.catalog import is_baseline, sharding_word
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import Metrics, RankRecord, TableRow
from fsdp_bench.results.schema import GIB
from fsdp_bench.results.stats import mean_across_ranks, slowest_rank_step_times, summarize_step_times


def effective_sharding(ranks: Sequence[RankRecord]) -> str | None:
    """The sharding the ranks really ran (FSDP1 at one rank runs NO_SHARD whatever it was asked
    for), when they all agree."""
    sharding = {r.get("effective_sharding") for r in ranks if isinstance(r, dict)}
    if len(sharding) != 1 or None in sharding:
        return None
    return sharding_word(str(sharding.pop()))  # records made before the words were the catalog's


def case_metrics(case, ranks: Sequence[RankRecord], simulation: dict[str, Any] | None = None) -> Metrics:
    """A case's headline metrics from its rank records (one run's, or every repeat's pooled), with
    a simulated case's modelled metrics on top: the one merge the runner and the repeats share."""
    metrics = (
        aggregate_rank_metrics(
            tokens_per_step=case.tokens_per_step,
            samples_per_step=case.global_batch_size,
            world_size=case.nproc,
            ranks=ranks,
        )
        if ranks
        else {}
    )
    if simulation:
        metrics.update(simulation.get("metrics", {}))
    return metrics


def aggregate_rank_metrics(
    *, tokens_per_step: int, samples_per_step: int, world_size: int, ranks: Sequence[RankRecord]
) -> Metrics:
    """The case's headline metrics from its ranks' raw records.

    Throughput uses the median of the slowest-rank step times; losses are averaged over ranks
    (each rank's loss is the mean over its share of the global batch, so the mean is the
    global batch's loss); memory is the largest rank's.
    """
    times = [r["step_times_s"] for r in ranks if r.get("step_times_s")]
    metrics: Metrics = {}
    if times and len(times) == len(ranks):
        steps = slowest_rank_step_times(times)
        metrics.update(summarize_step_times(steps))
        median = metrics["step_time_s_median"]
        metrics["tokens_per_s"] = tokens_per_step / median
        metrics["tokens_per_s_per_device"] = tokens_per_step / median / world_size
        metrics["samples_per_s"] = samples_per_step / median
        metrics["steps_measured"] = len(steps)
        reasons = {r.get("measurement_stop_reason") for r in ranks} - {None}
        if len(reasons) == 1:  # every rank decided alike (analysis.adaptive); records before it have none
            metrics["measurement_stop_reason"] = reasons.pop()
        # The rank whose measured stretch held the most untimed work; null if a rank cannot say.
        shares = [measure_timed_share_pct(r) for r in ranks]
        metrics["measure_timed_share_pct"] = None if None in shares else min(shares)
    losses = [r["losses"] for r in ranks if r.get("losses")]
    if losses and len(losses) == len(ranks):
        curve = mean_across_ranks(losses)
        metrics["loss_first"] = curve[0]
        metrics["loss_last"] = curve[-1]
        metrics["loss_finite"] = all(isinstance(x, (int, float)) and math.isfinite(x) for rank in losses for x in rank)
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes"):
        values = [r["memory"][key] for r in ranks if r.get("memory", {}).get(key) is not None]
        if values:
            metrics[key.replace("_bytes", "_gib")] = max(values) / GIB
    sharding = effective_sharding(ranks)
    if sharding:
        metrics[M.effective_sharding] = sharding
    changed = [r["params_changed"] for r in ranks if r.get("params_changed") is not None]
    if changed:
        metrics["params_changed"] = all(changed)
    stale = [r["optimizer_vs_model"]["not_model_parameters"] for r in ranks if r.get("optimizer_vs_model")]
    if stale:  # observed: optimizer tensors that are not the model's parameters (largest rank)
        metrics["optimizer_tensors_not_model_params"] = max(stale)
    metrics.update(aggregate_measurements(ranks, metrics))
    return metrics


def _max_rank(ranks: Sequence[RankRecord], key: str, sub: str) -> float | None:
    values = [(r.get(key) or {}).get(sub) for r in ranks]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _mean_rank(ranks: Sequence[RankRecord], key: str, sub: str) -> float | None:
    values = [(r.get(key) or {}).get(sub) for r in ranks]
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def aggregate_measurements(ranks: Sequence[RankRecord], headline: Metrics) -> Metrics:
    """Memory breakdown, model state, FLOPs/MFU, profile and utilization metrics (schema 2).

    Memory figures are the largest rank's (the rank that runs out first); profile times are the
    mean over ranks; FLOPs per token are rank 0's (every rank runs the same model on equal shares).
    """
    out: Metrics = {}
    if not ranks:
        return out
    with_breakdown = [r for r in ranks if r.get("memory_breakdown_bytes")]
    if with_breakdown:
        peak = max(with_breakdown, key=lambda r: sum(r["memory_breakdown_bytes"].values()))
        for cat, value in peak["memory_breakdown_bytes"].items():
            out[f"breakdown_{cat}_gib"] = value / GIB
    else:
        reasons = [r.get("memory_breakdown_null_reason") for r in ranks if r.get("memory_breakdown_null_reason")]
        if reasons:
            out["breakdown_null_reason"] = reasons[0]
    expected = _max_rank(ranks, "expected_model_state_bytes", "total")
    measured = _max_rank(ranks, "measured_model_state_bytes", "total")
    if expected is not None:
        out["expected_model_state_gib"] = expected / GIB
    if measured is not None:
        out["measured_model_state_gib"] = measured / GIB
    if expected and measured is not None:
        out["model_state_measured_over_expected"] = measured / expected
    out.update(prediction_metrics(ranks[0], headline, measured))
    if "step_time_s_median" in headline:
        out["time_per_optimizer_step_s"] = headline["step_time_s_median"]
    out.update(_flops_metrics(ranks[0], headline))
    for key in (
        "comm_total_s_per_step",
        "comm_exposed_s_per_step",
        "compute_s_per_step",
        "optimizer_s_per_step",
        "data_host_s_per_step",
    ):
        value = _mean_rank(ranks, "profile", key)
        if value is not None:
            out[key] = value
    kinds = {k for r in ranks for k in ((r.get("profile") or {}).get("comm_by_kind_s_per_step") or {})}
    for kind in sorted(kinds):
        values = [((r.get("profile") or {}).get("comm_by_kind_s_per_step") or {}).get(kind, 0.0) for r in ranks]
        out[f"comm_{kind}_s_per_step"] = statistics.fmean(values)
    utils = [r["gpu_util"] for r in ranks if r.get("gpu_util")]
    if utils:
        means = [u["pct_mean"] for u in utils if u.get("pct_mean") is not None]
        out["gpu_util_pct_mean"] = statistics.fmean(means) if means else None
        if not means:
            out["gpu_util_null_reason"] = utils[0].get("null_reason")
    out.update(busy_metrics(ranks))
    out.update(parts_metrics(ranks))
    norms = [r["update_norms"] for r in ranks if r.get("update_norms")]
    if norms:
        out["update_norm_min"] = min(min(n) for n in norms)
    return out


def busy_metrics(ranks: Sequence[RankRecord]) -> Metrics:
    """gpu_busy_pct, gpu_idle_ms_per_step and host_bound from the least busy rank: a synchronous
    step waits for its slowest rank, and the others' NCCL kernels, spinning while they wait for
    it, read as busy, so the rank mean would hide the one rank the step waits on."""
    busy = [r["gpu_busy"] for r in ranks if r.get("gpu_busy")]
    if not busy:
        return {}  # records made before the busy probe
    measured = [b for b in busy if b.get("pct") is not None]
    if not measured:
        return {"gpu_busy_pct": None, "host_bound": None, "gpu_busy_null_reason": busy[0].get("null_reason")}
    least = min(measured, key=lambda b: b["pct"])
    return {
        "gpu_busy_pct": least["pct"],
        "gpu_idle_ms_per_step": least["idle_ms_per_step"],
        "host_bound": is_host_bound(least["pct"]),
    }


def parts_metrics(ranks: Sequence[RankRecord]) -> Metrics:
    """The case's parts (`part_*_s_per_step`), from the rank the others wait for
    (analysis.attribution.critical_rank), in seconds of that rank's steps timed without the profiler
    right before it (`probe_step_s`): each part keeps its share of the profiled window, so the
    profiler's own cost (`probe_profiler_overhead_pct`; on CPU about 1.5 us per recorded op) is
    taken out of every part alike. `probe_vs_median_pct` says how typical the probe's moment was
    against the rank's measured median."""
    recorded = [r.get("step_parts") for r in ranks]
    if not any(recorded):
        return {}  # records made before the parts probe
    rank = critical_rank(recorded)
    if rank is None:
        reason = next((p.get("null_reason") for p in recorded if p and p.get("null_reason")), None)
        return {"parts_null_reason": reason or "no rank measured its step's parts"}
    parts = recorded[rank]
    window, plain = parts["window_s"], parts.get("plain_step_s")
    step = plain or window  # records from before the plain steps keep their window
    seconds = scaled_parts(parts, step)
    out: Metrics = {f"part_{p}_s_per_step": seconds[p] for p in PARTS}
    for kind, s in sorted((parts.get("comm_exposed_by_kind_s") or {}).items()):
        out[f"part_comm_{kind}_s_per_step"] = s * step / window
    out.update(parts_rank=rank, parts_host_means=parts.get("host_means"), probe_step_s=step, probe_window_s=window)
    if plain:
        out["probe_profiler_overhead_pct"] = 100.0 * (window / plain - 1.0)
    times = ranks[rank].get("step_times_s") or []
    if times:
        out["probe_vs_median_pct"] = 100.0 * (step / statistics.median(times) - 1.0)
    return out


# A prediction is flagged when it misses the measurement by more than this (report.md says so).
PEAK_PREDICTION_TOLERANCE_PCT = 10.0
MODEL_STATE_PREDICTION_TOLERANCE_PCT = 1.0


def _error_pct(predicted: float, measured: float | None) -> float | None:
    return 100.0 * (predicted - measured) / measured if measured else None


def prediction_metrics(rank0: RankRecord, headline: Metrics, measured_state: float | None) -> Metrics:
    """Predicted peak and model state (rank 0's `prediction`) beside the measured ones, with the
    signed error in % of the measurement (positive: the prediction is too high)."""
    pred = rank0.get("prediction") or {}
    if pred.get("peak_bytes") is None:
        return {}
    out: Metrics = {
        "predicted_peak_gib": pred["peak_bytes"] / GIB,
        "predicted_model_state_gib": pred["model_state_bytes"] / GIB,
    }
    peak = (rank0.get("memory") or {}).get("peak_allocated_bytes")
    # The prediction is rank 0's, so it is judged against rank 0's peak (not the largest rank's).
    out["rank0_peak_allocated_gib"] = peak / GIB if peak is not None else None
    out["peak_prediction_error_pct"] = _error_pct(pred["peak_bytes"], peak)
    out["model_state_prediction_error_pct"] = _error_pct(pred["model_state_bytes"], measured_state)
    return out


def _flops_metrics(rank0: RankRecord, headline: Metrics) -> Metrics:
    """FLOPs per token (formula and counter), achieved TFLOP/s, MFU and HFU from rank 0's record."""
    from fsdp_bench.analysis.flops import achieved_tflops_per_device, lookup_peak_tflops, utilization_pct

    out: Metrics = {}
    flops = rank0.get("flops") or {}
    if flops.get("per_token_formula"):
        out["flops_per_token"] = flops["per_token_formula"]
        out["flops_per_token_counter"] = flops.get("per_token_counter")
        out["flop_formula_over_counter"] = flops.get("formula_over_counter")
        if "tokens_per_s_per_device" in headline:
            tps = headline["tokens_per_s_per_device"]
            achieved = achieved_tflops_per_device(flops["per_token_formula"], tps)
            out["tflops_per_s_per_device"] = achieved
            peak_tflops, reason = lookup_peak_tflops(
                rank0.get("device_name"), rank0.get("compute_dtype") or rank0.get("dtype", "float32")
            )
            out["mfu_pct"] = utilization_pct(achieved, peak_tflops)
            counter = flops.get("per_token_counter")
            out["hfu_pct"] = utilization_pct(achieved_tflops_per_device(counter, tps), peak_tflops) if counter else None
            if peak_tflops is None:
                out["mfu_null_reason"] = reason
            else:
                out["peak_tflops_per_device"] = peak_tflops
    return out


# Loss curves closer than this to the same DDP case's match it (the report's parity check).
LOSS_MATCH_TOL = 1e-3
# What fp32 sums added in another order give: the default CPU sweep's grad-accum 2 curves stayed
# within 2.4e-7 of DDP's for their first 10 steps (tests/data/loss_drift_cpu). A gap past this is
# more than rounding.
LOSS_ROUNDING_TOL = 1e-5


def _loss_gaps_vs_ddp(rows: Sequence[TableRow], curves: dict[str, Sequence[float]]) -> dict[str, list[float] | None]:
    """Per case id, |loss - DDP's loss| at each step both ran (None without a matching DDP case).

    `rows` carry case_id and the axes; a case is compared with the DDP case that has the same
    model, world size, batch size, grad accum, seq_len, seed, lr and precision. `curves` maps case
    ids to their rank-mean loss per step."""
    axes = ("model", "nproc", "batch_size", "grad_accum", "seq_len", "seed", "lr", "precision")
    ddp = {tuple(r.get(a) for a in axes): r["case_id"] for r in rows if is_baseline(r.get("strategy"))}
    out: dict[str, list[float] | None] = {}
    for r in rows:
        ref = ddp.get(tuple(r.get(a) for a in axes))
        a, b = curves.get(r["case_id"]), curves.get(ref) if ref else None
        # a diverged loss (NaN, inf) is as far off as can be: NaN compares False and would read as a match
        gaps = [abs(x - y) for x, y in zip(a, b)] if a and b else None
        out[r["case_id"]] = [g if math.isfinite(g) else math.inf for g in gaps] if gaps is not None else None
    return out


def loss_max_abs_dev_vs_ddp(rows: Sequence[TableRow], curves: dict[str, Sequence[float]]) -> dict[str, float | None]:
    """Per case id, the largest |loss - DDP's loss| over the steps both ran (see _loss_gaps_vs_ddp)."""
    return {c: max(g) if g else None for c, g in _loss_gaps_vs_ddp(rows, curves).items()}


def loss_dev_onset_step_vs_ddp(rows: Sequence[TableRow], curves: dict[str, Sequence[float]]) -> dict[str, int | None]:
    """Per case id, the first step (1-based, warmup included) whose |loss - DDP's loss| passes
    LOSS_ROUNDING_TOL, more than rounding; None when none does or there is no DDP case.

    Where it starts tells a sharding error from rounding: a wrong gradient or a lost update shows
    in the first steps, even one small enough to stay under LOSS_MATCH_TOL there, while fp32 sums
    added in another order (a reduce-scatter against DDP's bucketed all-reduce, gradient
    accumulation) differ by ~1e-7 and training amplifies that: the default CPU sweep's grad-accum 2
    cases stayed within 2.4e-7 for their first 10 steps, passed 1e-5 at step 43 and 1e-3 at 45."""
    onset: dict[str, int | None] = {}
    for case_id, gaps in _loss_gaps_vs_ddp(rows, curves).items():
        onset[case_id] = next((i + 1 for i, g in enumerate(gaps or ()) if g > LOSS_ROUNDING_TOL), None)
    return onset
