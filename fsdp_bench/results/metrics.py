"""The metric registry: every aggregated metric a case file carries, with its unit, which way is
better, its label, where it shows, and how it is measured. Table columns, best-marking, the
comparison's direction, chart axes and the docs' metrics table are all derived from it
(`python -m fsdp_bench.results.metrics` prints the markdown table the docs hold).

Stdlib only: the lowest layer, so every other package may ask it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

HIGHER, LOWER = "higher", "lower"
# Where a metric shows besides the CSV (every metric is a comparison.csv column):
TABLE, LIVE, CHART = "table", "live", "chart"  # report table column, terminal [i/N] line, a chart axis


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    doc: str
    better: str | None = None  # HIGHER, LOWER or None (no direction: a fact, not a score)
    label: str = ""  # short column / axis label with the unit; the name when empty
    shows: frozenset[str] = frozenset()

    @property
    def numeric(self) -> bool:
        """A number (or a yes/no) per case; labels, text and lists are not."""
        return self.unit not in ("label", "text") and not self.unit.endswith("(list)")

    @property
    def title(self) -> str:
        return self.label or self.name


def _m(name: str, unit: str, doc: str, better: str | None = None, label: str = "", *shows: str) -> Metric:
    return Metric(name, unit, doc, better, label, frozenset(shows))


# The registry is a table, one metric per row, kept compact by hand.
# fmt: off
_STEP = ("per measured step, the slowest rank's time (a synchronous step ends with its last rank); "
         "percentiles by linear interpolation")
_COMM = "--bench-profile only: union of {what} intervals per profiled step (rank mean)"

METRICS: tuple[Metric, ...] = (
    _m("tokens_per_s_per_device", "1/s", "global tokens per optimizer step / median step time / world size",
       HIGHER, "tokens/s/device", TABLE, LIVE, CHART),
    _m("tokens_per_s", "1/s", "global tokens per optimizer step / median step time", HIGHER, "tokens/s"),
    _m("samples_per_s", "1/s", "global samples per optimizer step / median step time", HIGHER, "samples/s"),
    _m("step_time_s_median", "s", _STEP, LOWER, "step time median (s)", TABLE, LIVE, CHART),
    _m("step_time_s_mean", "s", _STEP, LOWER, "step time mean (s)"),
    _m("step_time_s_stdev", "s", _STEP),
    _m("step_time_s_p10", "s", _STEP, LOWER, "step time p10 (s)"),
    _m("step_time_s_p90", "s", _STEP, LOWER, "step time p90 (s)", TABLE),
    _m("step_time_s_min", "s", _STEP),
    _m("step_time_s_max", "s", _STEP),
    _m("step_time_s_median_ci_low", "s", "lower end of the median's distribution-free confidence interval "
       "(order statistics of the measured steps)"),
    _m("step_time_s_median_ci_high", "s", "upper end of the same interval"),
    _m("step_time_median_ci_level_pct", "%", "the interval's confidence level: results.stats.CONFIDENCE (95) "
       "when it reaches it, else the lower level its few steps reach"),
    _m("step_time_median_ci_halfwidth_pct", "%", "the wider side of that interval in percent of the median",
       LOWER, "median +- (%)", TABLE),
    _m("step_time_cv_pct", "%", "stdev / mean of the measured steps", LOWER, "step time CV (%)", LIVE),
    _m("time_per_optimizer_step_s", "s", "= step_time_s_median; one step = grad_accum micro-batches + one "
       "optimizer step", LOWER),
    _m("steps_measured", "count", "measured steps (adaptive measurement: they differ between cases, and so does the "
       "step loss_last is read after)", None, "steps measured", TABLE),
    _m("measure_timed_share_pct", "%", "timed steps / wall time of the measured stretch (start of the stage of the "
       "first measured step to the start of the checkpoint, probes or end), the rank with the least; the rest is "
       "bookkeeping between and after the steps (analysis.case_time). Null for files without stage times", None,
       "timed share of measure (%)", TABLE),
    _m("measurement_stop_reason", "label", "what ended the measured steps: ci_target (interval within "
       "--bench-target-ci-pct), time_cap (--bench-measure-cap-s), max_steps, fixed_steps (no target)"),
    _m("loss_first", "loss", "rank-mean loss of the first step (warmup included)", None, "loss first", TABLE),
    _m("loss_last", "loss", "rank-mean loss of the last step", None, "loss last", TABLE),
    _m("loss_finite", "bool", "every rank's loss was a finite number at every step; false: training diverged (NaN or "
       "inf), so the case did not train and is never ranked (results.trained)"),
    _m("loss_max_abs_dev_vs_ddp", "loss", "filled by the report: max over steps of abs(rank-mean loss minus the "
       "DDP case with the same model, world size, batch, grad accum, seq_len, seed, lr, precision); a diverged "
       "(non-finite) loss is inf; empty when there is no such DDP case", LOWER),
    _m("loss_dev_onset_step_vs_ddp", "step", "filled by the report: the first step (1-based, warmup included) at "
       "which abs(rank-mean loss minus the same DDP case's) passes rounding size, 1e-5 "
       "(analysis.aggregate.LOSS_ROUNDING_TOL); empty when no step does or there is no such DDP case. A case "
       "past 0.001 whose onset is after step 10 is read as fp32 rounding that training amplified"),
    _m("params_changed", "bool", "parameter fingerprint (sum, norm per local shard) differs after the measured "
       "steps, on every rank", None, "params changed", TABLE),
    _m("update_norm_min", "L2", "smallest per-step update norm over ranks and steps: 0 means some step did "
       "not train"),
    _m("optimizer_tensors_not_model_params", "count", "tensors the optimizer steps that are not parameters "
       "the model trains with (an optimizer built before sharding, not fixed)"),
    _m("peak_allocated_gib", "GiB", "CUDA: max_memory_allocated over the measured steps (peak reset after "
       "warmup); CPU: the MemTracker probe's peak of live tensor bytes (FSDP1, which MemTracker refuses: "
       "the profiler's memory events over two probe steps)", LOWER, "peak alloc (GiB)", TABLE, LIVE,
       CHART),
    _m("peak_reserved_gib", "GiB", "CUDA: max_memory_reserved over the measured steps (none on CPU)", LOWER,
       "peak reserved (GiB)", TABLE, LIVE, CHART),
    _m("peak_rss_gib", "GiB", "ru_maxrss of the rank process (whole run)", LOWER, "peak RSS (GiB)", TABLE, LIVE, CHART),
    *(_m(f"breakdown_{part}_gib", "GiB", f"MemTracker's probe step, snapshot at its peak: {what}; rank with "
         "the largest total. FSDP1 on CPU: its profiled peak's blocks by where each was made (gradients by "
         "address); on CUDA: absent, breakdown_null_reason says why", None, "", CHART)
      for part, what in (("params", "PARAM+BUFFER"), ("grads", "GRAD"), ("optimizer", "OPT"),
                         ("activations", "ACT"), ("other", "TEMP+OTH"))),
    _m("expected_model_state_gib", "GiB", "ZeRO formula for the strategy (see the model-state section)", None, "",
       CHART),
    _m("measured_model_state_gib", "GiB", "bytes of the distinct storages behind local params, their .grad and "
       "optimizer state, read after optimizer.step() (largest rank)"),
    _m("model_state_measured_over_expected", "ratio", "measured / expected"),
    _m("predicted_peak_gib", "GiB", "analysis.fit's prediction for rank 0, recorded before the measurement"),
    _m("predicted_model_state_gib", "GiB", "analysis.fit's model-state prediction for rank 0"),
    _m("peak_prediction_error_pct", "%", "(predicted - measured) / measured peak, rank 0"),
    _m("peak_estimate_error_pct", "%", "(estimated - measured) / measured peak, rank 0: the fake-tensor "
       "estimator (worker.estimate) against a real rank"),
    _m("model_state_prediction_error_pct", "%", "(predicted - measured) / measured model state, rank 0"),
    _m("flops_per_token", "FLOP", "formula 6N + 12·L·H·Q·T (fsdp_bench/analysis/flops.py): N = parameters that "
       "multiply activations, L layers, H query heads, Q head size, T = seq_len"),
    _m("flops_per_token_counter", "FLOP", "torch.utils.flop_counter.FlopCounterMode over the FLOP probe step on rank 0 "
       "/ that rank's tokens per step; every fused attention kernel counted with the grouped-query-aware "
       "formula (analysis.flops.sdpa_*_flops)"),
    _m("flop_formula_over_counter", "ratio", "formula / counter"),
    _m("tflops_per_s_per_device", "TFLOP/s", "flops_per_token × tokens_per_s_per_device / 1e12", HIGHER),
    _m("mfu_pct", "%", "achieved / dense datasheet peak for the device and training dtype (PEAK_TFLOPS); null "
       "+ mfu_null_reason on CPU or an unknown device", HIGHER, "MFU (%)", TABLE, CHART),
    _m("hfu_pct", "%", "the same with flops_per_token_counter (hardware FLOPs executed)", HIGHER, "HFU (%)"),
    _m("peak_tflops_per_device", "TFLOP/s", "the datasheet peak used"),
    _m("comm_total_s_per_step", "s", _COMM.format(what="communication"), None, "", CHART),
    _m("comm_exposed_s_per_step", "s", "union(comm) minus its overlap with union(compute), not a sum of "
       "self-times", LOWER, "exposed comm (s/step)", TABLE, CHART),
    *(_m(f"comm_{kind}_s_per_step", "s", _COMM.format(what=f"{kind} collective") + " (present when it ran)")
      for kind in ("all_gather", "reduce_scatter", "all_reduce", "broadcast")),
    _m("compute_s_per_step", "s", _COMM.format(what="compute"), None, "", CHART),
    _m("optimizer_s_per_step", "s", "union of Optimizer.step spans per profiled step", None, "", CHART),
    _m("data_host_s_per_step", "s", "step time covered by neither compute nor communication", LOWER, "", CHART),
    _m("gpu_util_pct_mean", "%", "NVML sampled: mean of NVML's utilization readings taken while timed steps ran "
       "(the share of the driver's 1/6-1 s sample periods in which any kernel ran, periods that straddle the "
       "work around the step; needs nvidia-ml-py): not a busy measure, see gpu_busy_pct; null + "
       "gpu_util_null_reason otherwise", HIGHER, "NVML sampled util (%)", CHART),
    _m("gpu_busy_pct", "%", "share of the median timed step in which the GPU runs kernels, copies or memsets: "
       "their union on the device timeline of the untimed torch.profiler probe steps / the rank's median step "
       "time (analysis.busy); the least busy rank; CUDA only, null + gpu_busy_null_reason on CPU or with "
       "--bench-no-probes", None, "GPU busy (%)", TABLE, LIVE, CHART),
    _m("gpu_idle_ms_per_step", "ms", "median timed step minus the GPU's busy time in it, same rank", None,
       "GPU idle (ms/step)", TABLE, LIVE),
    _m("host_bound", "bool", "gpu_busy_pct < analysis.busy.HOST_BOUND_BUSY_PCT (80): the GPU waits on the host "
       "for over a fifth of the step, so host overhead decides the step time", None, "host-bound", TABLE, LIVE),
    *(_m(f"part_{part}_s_per_step", "s", f"the step taken apart: {what}, in the untimed profiled probe steps of "
         "the rank the others wait for (the most step time not waiting in a collective); the parts are "
         "disjoint and sum to "
         "probe_step_s (analysis.attribution)", LOWER, f"{short} (s/step)", *shows)
      for part, what, short, shows in (
          ("compute", "ops (CPU) or kernels (CUDA) running", "compute", (CHART,)),
          ("comm_exposed", "a collective in flight with no compute running", "exposed comm", (CHART,)),
          ("optimizer", "inside Optimizer.step", "optimizer", (CHART,)),
          ("data", "the batch fetch", "data", (CHART,)),
          ("host", "nothing running: Python, hooks, launches, waits (CUDA: the device idle)", "host", (CHART,)))),
    *(_m(f"part_comm_{kind}_s_per_step", "s", f"part_comm_exposed_s_per_step's {kind} share (present when it ran)")
      for kind in ("all_gather", "reduce_scatter", "all_reduce", "broadcast")),
    _m("probe_step_s", "s", "the step the parts sum to: the median of the probe's steps timed without the profiler, "
       "right after the timed ones (the profiled window when those are missing)"),
    _m("probe_window_s", "s", "the profiled window the parts were measured in (the profiler lengthens it)"),
    _m("probe_vs_median_pct", "%", "(probe_step_s - that rank's median timed step) / the median: whether the "
       "probe's moment was a typical one"),
    _m("probe_profiler_overhead_pct", "%", "(probe_window_s - probe_step_s) / probe_step_s: what the profiler "
       "itself added, taken out of the parts (each keeps its share of the window)"),
    _m("parts_rank", "rank", "the rank whose step the parts describe"),
    _m("parts_host_means", "label", "what part_host_s_per_step counts on this device"),
    _m("why_vs_best", "text", "filled by the report: the one or two parts that account for most of the case's "
       "step-time difference to the fastest case doing the same work (parts scaled to each median step)"),
    _m("repeats", "count", "--bench-repeats: torchrun processes the case ran in", None, "repeats", TABLE, LIVE),
    _m("repeat_step_time_s_medians", "s (list)", "--bench-repeats: each repeat's step_time_s_median, in repeat order (a list)"),
    _m("repeat_spread_pct", "%", "(max - min) / median of the repeats' step-time medians", None,
       "spread between repeats (%)", TABLE, LIVE),
    _m("run_drift_pct", "%", "filled by the report: the run's drift between repeats, one run's 95% half-width (analysis."
       "drift) pooled over every trained case's repeat medians, the same on every row; each case's tokens/s band is at "
       "least that over sqrt(its repeats) when cases are ranked, as --bench-tune ranks them (empty: no case repeated)"),
    _m("effective_sharding", "label", "the sharding every rank really ran, in the strategy catalog's words "
       "(replicated, full_shard, shard_grad_op, hybrid_...): what a strategy name promised, checked", None,
       "sharding done", TABLE),
    _m("rank0_peak_allocated_gib", "GiB", "rank 0's measured peak_allocated, beside predicted_peak_gib (also rank 0)"),
    _m("<metric>_null_reason", "text", "why <metric> is null (mfu, gpu_util, gpu_busy, breakdown, parts): the "
       "device, a missing package, or the probe that did not run"),
    # --bench-simulate-world-size (analysis.simulation): what the case would move and take at a world size
    # it did not run; <cluster> is one of analysis.comm_model.CLUSTERS, <kind> a collective
    _m("comm_<kind>_bytes_per_step", "bytes", "simulated: bytes of <kind> (all_gather, reduce_scatter, "
       "all_reduce) one rank sends per optimizer step at the simulated world size (analysis.comm_model)"),
    _m("simulated_compute_s_per_step", "s", "simulated: the measured median step of the one real rank, taken as "
       "the compute of every simulated rank"),
    _m("predicted_comm_s_per_step_<cluster>", "s", "simulated: that traffic's time on <cluster>'s links"),
    _m("predicted_step_time_s_<cluster>_overlap", "s", "simulated: max(compute, communication) on <cluster>", LOWER),
    _m("predicted_step_time_s_<cluster>_no_overlap", "s", "simulated: compute + communication on <cluster>", LOWER),
)
# fmt: on
# A row whose name holds <placeholder> is a family: one row for names that differ in one word
# read from another module (a cluster, a collective), so the registry need not copy those lists.
# The most literal row first: `..._no_overlap` before `..._overlap`, which would also match it.
_FAMILIES = tuple(
    (re.compile("^" + re.sub(r"<[a-z]+>", "[a-z0-9_]+?", m.name) + "$"), m)
    for m in sorted(METRICS, key=lambda m: -len(re.sub(r"<[a-z]+>", "", m.name)))
    if "<" in m.name
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS if "<" not in m.name}
HIGHER_IS_BETTER = frozenset(m.name for m in METRICS if m.better == HIGHER)
LOWER_IS_BETTER = frozenset(m.name for m in METRICS if m.better == LOWER)


def registered(name: str) -> Metric | None:
    """The registry's row for a metric name, a family's row for a name of that family, else None."""
    if name in BY_NAME:
        return BY_NAME[name]
    return next((m for pattern, m in _FAMILIES if pattern.match(name)), None)


def shown_in(where: str) -> tuple[Metric, ...]:
    return tuple(m for m in METRICS if where in m.shows)


def label(name: str) -> str:
    """The column or axis label of a metric (its name when it is not registered)."""
    metric = registered(name)
    return metric.title if metric is not None else name


def markdown_table() -> str:
    """The docs' metrics table; a test holds the docs to it."""
    lines = ["| metric | unit | better | method |", "|---|---|---|---|"]
    for m in METRICS:
        lines.append(f"| `{m.name}` | {m.unit} | {m.better or ''} | {m.doc.replace('|', '/')} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - prints the table for the docs
    sys.stdout.write(markdown_table() + "\n")


class _Names:
    """`M.tokens_per_s_per_device == "tokens_per_s_per_device"`: code outside the modules that
    record a metric names it through the registry, so a misspelt or unregistered name fails at
    once instead of reading as a missing column."""

    def __init__(self, names) -> None:
        for name in names:
            setattr(self, name, name)


M = _Names(BY_NAME)
