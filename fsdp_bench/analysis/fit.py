"""Will it fit? Predicted peak memory per device for each strategy, model and world size, and
the largest per-device batch that fits a given device memory.

    python -m fsdp_bench.fit ...   (the CLI and chart: fsdp_bench.report.fit_chart)

The peak is modelled from its parts, counted here (parameters, gradients and AdamW state as
allocated, DDP's buckets, FSDP's gathered units, activations, the loss's and the optimizer step's
temporaries, the gradients earlier micro-batches leave), at the moments of the step where it can
fall (analysis.peak_moments); the largest moment is the peak. Activations per sample come from a
measured case when calibrated (MemTracker's act + temp on CPU), otherwise from
analysis.activations. Pure Python, apart from the chart; tests compare it to measurements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from fsdp_bench.analysis.activations import estimate_activations
from fsdp_bench.analysis.comm_model import Unit, model_units, padded_numel
from fsdp_bench.analysis.hf_units import hf_dims, tied_embeddings
from fsdp_bench.analysis.model_state import allocated_model_state_bytes, shard_size
from fsdp_bench.analysis.peak_moments import phase_bytes, with_block_moments
from fsdp_bench.plan.case import Case, CaseError
from fsdp_bench.plan.catalog import DEFAULT_PRECISION
from fsdp_bench.plan.catalog import precision as precision_row
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.plan.flavors import ModelFlavor, flavor_for, load_config_dict
from fsdp_bench.results.metrics import M
from fsdp_bench.results.readings import PeakPrediction
from fsdp_bench.results.records import CaseResult, TableRow
from fsdp_bench.results.schema import GIB

WORLD_SIZES = (1, 8, 64, 512)


def activation_bytes_per_sample(flavor: ModelFlavor, seq_len: int, dtype_bytes: int = 4) -> int:
    """Activations one sample keeps for backward (analysis.activations: counted per tensor)."""
    return estimate_activations(flavor, 1, seq_len, dtype_bytes=dtype_bytes).total


def gathered_bytes(
    strategy: str, units: Sequence[Unit], world_size: int, dtype_bytes: int = 4, *, mesh: tuple[int, int] | None = None
) -> int:
    """Unsharded parameter buffers alive at the top of backward, beyond the rank's own shards:
    the unit being computed and the one prefetched (FSDP2: the root, holding the head, and the
    last block), every unit when nothing is resharded after forward; DDP's reducer buckets (a
    second copy of every gradient, alive for the whole step) are counted apart (`bucket_bytes`)."""
    row = catalog_strategy(strategy)
    if not row.shards_parameters and row.layout == "whole":
        return 0
    shard = shard_size(strategy, world_size, mesh)
    if shard == 1 and (not row.shards_parameters or row.layout == "fsdp1_flat"):
        return 0  # the parameters are already whole (FSDP1 falls back to NO_SHARD on one rank)
    full = [padded_numel(row.layout, u, shard, dtype_bytes) * dtype_bytes for u in units]
    if not row.reshard_after_forward:
        return sum(full)
    root = next((f for u, f in zip(units, full) if u.is_root), 0)
    blocks = [f for u, f in zip(units, full) if not u.is_root]
    if shard == 1:  # FSDP2 on one rank copies its shards straight into the unsharded parameters
        return root  # (torch's world_size == 1 path): no all-gather output of the last block is kept
    return root + (blocks[-1] if blocks else 0)


def bucket_bytes(strategy: str, units: Sequence[Unit], dtype_bytes: int = 4) -> int:
    """DDP's reducer buckets: a flat copy of every gradient, kept between steps."""
    row = catalog_strategy(strategy)
    return sum(u.numel for u in units) * dtype_bytes if row.layout == "whole" else 0


def optimizer_temp_bytes(
    strategy: str,
    units: Sequence[Unit],
    world_size: int,
    *,
    impl: str = "auto",
    device: str = "cpu",
    mesh: tuple[int, int] | None = None,
    dtype_bytes: int = 4,
) -> int:
    """AdamW's temporaries inside optimizer.step(), by implementation. The for-loop version
    (torch's choice on CPU) builds `exp_avg_sq.sqrt() / bias_correction2_sqrt` for one
    parameter at a time: two tensors the size of the largest local parameter. foreach (torch's
    choice on CUDA) takes the square root of every state at once: one copy of all local
    parameters. fused: none."""
    impl = ("foreach" if device == "cuda" else "plain") if impl == "auto" else impl
    if impl == "fused":
        return 0
    row = catalog_strategy(strategy)
    shard = shard_size(strategy, world_size, mesh)
    local = [_local_numel(row.layout, s, shard) for u in units for s in u.shapes]
    if impl == "foreach":
        return sum(local) * dtype_bytes
    return 2 * max(local, default=0) * dtype_bytes


def _local_numel(layout: str, shape: tuple[int, ...], shard: int) -> int:
    """Rank 0's elements of one parameter (dim-0 shards; FSDP1's flat chunk approximated alike)."""
    if layout == "whole" or shard == 1:
        return math.prod(shape)
    dim0 = shape[0] if shape else 1
    return min(dim0, math.ceil(dim0 / shard)) * math.prod(shape[1:])


PHASES = ("forward", "backward", "optimizer step")


def predict_peak_bytes(
    strategy: str,
    flavor: ModelFlavor,
    world_size: int,
    batch_size: int,
    *,
    seq_len: int,
    act_bytes_per_sample: float | None = None,
    mesh: tuple[int, int] | None = None,
    grad_accum: int = 1,
    optimizer_impl: str = "auto",
    device: str = "cpu",
    act_ckpt: bool = False,
    precision: str = DEFAULT_PRECISION,
    buckets_from_start: bool | None = None,
    grad_sync: str = "every",
    loss: str = "full",
    gloo: bool = False,
    torch_version: str | None = None,
) -> PeakPrediction:
    """The peak of one rank, from its parts, and the phase of the step where it falls. Top of
    backward: own shards, AdamW state, DDP's buckets, gathered units, activations, the loss's two
    vocab-wide gradients, with accumulation the earlier gradients. Optimizer step: parameters,
    gradients, AdamW state, buckets, the step's temporaries (DDP + accumulation + tied head: a copy).
    `act_bytes_per_sample` (a calibration) replaces the counted activations, loss included; bf16/fp16
    `precision` keeps activations and gathered parameters at 2 bytes (DDP: autocast, fp32 states).
    `buckets_from_start`: DDP's buckets held from the start (default: not on CPU); `grad_sync` "last":
    reduce at the last micro-step only; `loss` as --bench-loss; `gloo`: real gloo ranks; `torch_version`: whose FSDP2."""
    units = model_units(flavor)
    states = allocated_model_state_bytes(strategy, units, world_size, mesh=mesh)
    row, compute_bytes = catalog_strategy(strategy), precision_row(precision).bytes
    acts = estimate_activations(
        flavor, batch_size, seq_len, act_ckpt=act_ckpt, dtype_bytes=compute_bytes, autocast=row.autocasts, loss=loss
    )
    counted = (acts.total + acts.recompute, acts.loss_temp)
    act, loss_temp = counted if act_bytes_per_sample is None else (act_bytes_per_sample * batch_size, 0)
    temp = optimizer_temp_bytes(strategy, units, world_size, impl=optimizer_impl, device=device, mesh=mesh)
    parts = {key: states[key] for key in ("params", "grads", "optimizer")} | {
        "buckets": bucket_bytes(strategy, units),
        "gathered": gathered_bytes(strategy, units, world_size, compute_bytes, mesh=mesh),
        "activations": act,
        "loss_temp": loss_temp,
        "optimizer_temp": temp,
    }
    if row.offload and device == "cuda":  # they live on the host: not the GPU's peak
        parts.update(params=0, grads=0, optimizer=0, optimizer_temp=0)
    deferred = grad_sync == "last" and grad_accum > 1
    parts |= _accumulation_parts(parts, flavor, units, grad_accum, deferred, compute_bytes)
    held = device != "cpu" if buckets_from_start is None else buckets_from_start  # see phase_bytes
    at_top = held or (grad_accum > 1 and not deferred)  # or an earlier micro-batch wrote them
    tied = tied_head_numel(flavor)  # a calibration's log-probabilities are unknown: none dropped
    head = {"tied_head_numel": tied, "logprobs": acts.logprobs if act_bytes_per_sample is None else 0}
    phases = phase_bytes(parts, units, buckets_at_top=at_top, deferred=deferred, **head)
    if acts.per_layer and act_bytes_per_sample is None:
        moment_args = (strategy, units, world_size, acts, grad_accum, mesh, compute_bytes)
        moments = {"tied_head_numel": tied, "deferred": deferred, "buckets_at_top": at_top}
        phases = with_block_moments(phases, parts, *moment_args, **moments, gloo=gloo, torch_version=torch_version)
    phase = max(phases, key=phases.get)
    sizes = {"model_state_bytes": states["total"], "gathered_bytes": parts["gathered"], "activation_bytes": act}
    return {"peak_bytes": phases[phase], "phase": phase, "parts_bytes": parts, "phases_bytes": phases} | sizes


def predict_case_peak(
    case: Case, world_size: int | None = None, *, mesh: tuple[int, int] | None = None, torch_version: str | None = None
) -> PeakPrediction:
    """predict_peak_bytes for one case: its strategy, model, batch, sequence, accumulation,
    optimizer, device, activation checkpointing, precision and loss, at `world_size` (default: its
    ranks) and the hybrid `mesh` the caller resolved; gloo's copies where it runs gloo (Case.runs_gloo);
    the FSDP2 of `torch_version` (default: the installed torch's)."""
    return predict_peak_bytes(
        case.strategy,
        flavor_for(case.model),
        world_size or case.nproc,
        case.batch_size,
        seq_len=case.seq_len,
        mesh=mesh,
        grad_accum=case.grad_accum,
        optimizer_impl=case.optimizer_impl,
        device=case.device,
        act_ckpt=case.act_ckpt,
        precision=case.precision,
        grad_sync=case.grad_sync,
        loss=case.loss,
        gloo=case.runs_gloo(world_size),
        torch_version=torch_version,
    )


def _accumulation_parts(
    parts: dict[str, float], flavor: ModelFlavor, units: Sequence[Unit], grad_accum: int, deferred: bool, dtype: int
) -> dict[str, float]:
    """The parts gradient accumulation adds: the earlier micro-batches' gradients, DDP's tied copy."""
    return {
        "accumulated_grads": accumulated_gradient_bytes(parts["grads"], units, grad_accum, deferred, dtype),
        "tied_grad_copy": tied_gradient_copy_bytes(flavor, parts["buckets"], grad_accum),
    }


def tied_gradient_copy_bytes(flavor: ModelFlavor, buckets: float, grad_accum: int, dtype_bytes: int = 4) -> int:
    """DDP with accumulation keeps a second copy of a tied embedding's gradient (vocab x hidden)
    beside its buckets through the optimizer step: the shared weight's two gradients are summed
    out of place into a new tensor at every later micro-step. Read off MemTracker (dev seed 19, a
    tied Llama-style config with 1.84 M parameters, 2 ranks, batch 2 x accum 2 with the reduction
    last, peak in the optimizer step): 'grad' was 1,615,680 B (its 1683 x 240 embedding) above the
    same case without accumulation, and the prediction -3.43 % without this part; untied configs
    (dev seed 0) were exact without it. 0 without buckets, accumulation or a tied head."""
    if not buckets or grad_accum == 1:
        return 0
    return tied_head_numel(flavor) * dtype_bytes


def tied_head_numel(flavor: ModelFlavor) -> int:
    """The elements of a tied embedding (vocab x hidden): 0 where the head has its own weight or
    the model takes no tokens."""
    if not flavor.takes_tokens:
        return 0
    if flavor.from_hf_config:
        config = load_config_dict(flavor)
        if not tied_embeddings(config):
            return 0
        dims = hf_dims(config)
        return dims["vocab"] * dims["hidden"]
    if not flavor.architecture.tied_by_default:
        return 0
    return flavor.config["vocab_size"] * flavor.config["n_embd"]


def accumulated_gradient_bytes(
    grads: float, units: Sequence[Unit], grad_accum: int, deferred: bool, compute_bytes: int
) -> float:
    """The gradients earlier micro-batches leave alive during a later one's backward: none without
    accumulation; the rank's own gradients as stored (DDP whole, FSDP sharded) when every
    micro-step reduces. With the reduction deferred to the last micro-step an FSDP rank holds the
    whole model's unsharded gradients instead (in the compute dtype, which is FSDP's reduce dtype
    here): gpt_small, 2 ranks, batch 4 x accum 2, fsdp2 and fsdp2_no_reshard measured 8.68 MB
    (the unsharded minus the sharded gradients) above the same case reducing every micro-step."""
    if grad_accum == 1:
        return 0
    if not deferred:
        return grads
    return max(grads, sum(u.numel for u in units) * compute_bytes)


# A "fits" answer must hold when measured: the predicted peak times (1 + FIT_MARGIN) must be
# within the budget. The worst peak-prediction error scripts/measure_peak_prediction.py printed
# was under this (see the README's memory-prediction paragraph); the budget applies to the
# tensor peak (CUDA: max_memory_allocated; reserved memory sits above it by the allocator's gap).
FIT_MARGIN = 0.07


def largest_batch(
    strategy: str,
    flavor: ModelFlavor,
    world_size: int,
    device_bytes: float,
    *,
    seq_len: int,
    act_bytes_per_sample: float | None = None,
    limit: int = 1 << 16,
    margin: float = FIT_MARGIN,
    precision: str = DEFAULT_PRECISION,
    device: str = "cpu",
    also_fits: Callable[[int], bool] | None = None,
    loss: str = "full",
) -> int:
    """The largest per-device batch whose predicted peak, plus `margin`, fits `device_bytes`
    and that `also_fits` (on CPU: the host's memory, `fit_table`) allows (0: not even 1)."""

    def fits(bs: int) -> bool:
        peak = predict_peak_bytes(
            strategy,
            flavor,
            world_size,
            bs,
            seq_len=seq_len,
            act_bytes_per_sample=act_bytes_per_sample,
            precision=precision,
            device=device,
            buckets_from_start=True,  # a device's budget: its allocator holds DDP's buckets throughout
            loss=loss,
        )["peak_bytes"]
        return peak * (1 + margin) <= device_bytes and (also_fits is None or also_fits(bs))

    if not fits(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:  # peak grows with the batch, so bisect
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


# fit's work: each row bisects its largest batch (about 17 predictions, twice that with the host
# check on CPU), and each prediction walks every layer (cProfile: comm_model's padded sizes and
# _local_numel per parameter). Measured on a 2-core machine at load 8: 5,000 layers x 4 rows, 22 s
# wall (4.6 s CPU); a 100,000-layer config at the default 44 rows gave no answer in 10 minutes. The
# bound (about 56 s there) refuses the rest before any work, in one line, as the sweep refuses
# what it cannot run.
MAX_LAYER_ROWS = 50_000


def fit_work_problem(model: str, rows: int) -> str | None:
    """Why fit will not answer `rows` rows (strategies x world sizes) of `model`: its layers times
    the rows exceed MAX_LAYER_ROWS; None when it will. Reads the config only."""
    flavor = flavor_for(model)
    if not flavor.from_hf_config:
        return None  # the shipped flavors are small
    layers = hf_dims(load_config_dict(flavor))["layers"]
    if layers * rows <= MAX_LAYER_ROWS:
        return None
    return (
        f"{model} has {layers:,} layers x {rows} rows (strategies x world sizes): over the {MAX_LAYER_ROWS:,} "
        "layer-rows fit answers within a minute or two; ask for fewer strategies or world sizes, or fewer layers"
    )


def gib_text(value_bytes: float, budget_bytes: float | None = None) -> str:
    """GiB with two decimals, or as many more as it takes not to read like the budget when the
    two differ (0.30237 GiB against a 0.3 GiB budget is not "0.30 GiB")."""
    digits = 2
    while (
        budget_bytes is not None
        and digits < 9
        and value_bytes != budget_bytes
        and f"{value_bytes / GIB:.{digits}f}" == f"{budget_bytes / GIB:.{digits}f}"
    ):
        digits += 1
    return f"{value_bytes / GIB:.{digits}f} GiB"


HostCheck = Callable[[Case], "str | None"]  # a case -> why the host would not run it (None: it would)


def fit_table(
    models: Iterable[str],
    strategies: Iterable[str],
    *,
    device_memory_gib: float,
    seq_len: int,
    batch_size: int,
    world_sizes: Sequence[int] = WORLD_SIZES,
    calibration: Mapping[str, float] | None = None,
    precision: str = DEFAULT_PRECISION,
    device: str = "cpu",
    host_check: HostCheck | None = None,
    loss: str = "full",
) -> list[TableRow]:
    """One row per (model, strategy, world size). `host_check` (on CPU, where every rank is a
    process of this host: analysis.host_memory.host_check, the sweep guard's figure and line)
    refuses a row's case and bounds its largest batch beside the device budget."""
    rows = []
    kind = {"precision": precision, "device": device, "loss": loss}  # every row's
    for model in models:
        flavor = flavor_for(model)
        length = min(seq_len, flavor.max_seq_len or seq_len)
        per_sample = (calibration or {}).get(model)
        for strategy in strategies:
            for n in world_sizes:
                host = _row_host_check(host_check, model, strategy, n, length, **kind)
                rows.append(
                    _fit_row(
                        model, flavor, strategy, n, length, per_sample, host, batch_size, device_memory_gib, **kind
                    )
                )
    return rows


def _fit_row(
    model,
    flavor,
    strategy,
    n,
    length,
    per_sample,
    host,
    batch_size,
    budget_gib,
    *,
    precision: str,
    device: str,
    loss: str,
) -> TableRow:
    """One (model, strategy, world size) row of fit_table, at its precision, device and loss."""
    p = predict_peak_bytes(
        strategy,
        flavor,
        n,
        batch_size,
        seq_len=length,
        act_bytes_per_sample=per_sample,
        precision=precision,
        device=device,
        buckets_from_start=True,  # a device's budget, as in largest_batch
        loss=loss,
    )
    refusal = host(batch_size) if host else None
    return {
        "model": model,
        "strategy": strategy,
        "world_size": n,
        "seq_len": length,
        "batch_size": batch_size,
        "precision": precision,
        "device": device,
        "model_state_gib": p["model_state_bytes"] / GIB,
        "gathered_gib": p["gathered_bytes"] / GIB,
        "activation_gib": p["activation_bytes"] / GIB,
        M.predicted_peak_gib: p["peak_bytes"] / GIB,
        "fits": p["peak_bytes"] * (1 + FIT_MARGIN) <= budget_gib * GIB and refusal is None,
        "fit_margin": FIT_MARGIN,
        "peak_phase": p["phase"],
        "device_memory_gib": budget_gib,
        "host_refusal": refusal or "",
        "max_batch_size": largest_batch(
            strategy,
            flavor,
            n,
            budget_gib * GIB,
            seq_len=length,
            act_bytes_per_sample=per_sample,
            precision=precision,
            device=device,
            also_fits=(lambda bs: host(bs) is None) if host else None,
            loss=loss,
        ),
        "activation_source": "measured" if per_sample is not None else "estimate",
    }


def _row_host_check(
    check: HostCheck | None, model: str, strategy: str, world_size: int, seq_len: int, **kind: str
) -> Callable[[int], str | None] | None:
    """batch size -> `check` of the row's case at that batch; None without a check."""
    if check is None:
        return None

    def refusal(batch_size: int) -> str | None:
        try:
            case = Case(
                strategy=strategy, model=model, nproc=world_size, batch_size=batch_size, seq_len=seq_len, **kind
            )
        except CaseError:  # a combination no case allows (a hybrid mesh on one rank): none to check
            return None
        return check(case)

    return refusal


def calibrate_from_results(results: Iterable[CaseResult]) -> dict[str, float]:
    """Activation bytes per sample by model, from ok cases' rank-0 MemTracker categories.

    A record without activation bytes calibrates nothing: before the breakdown read the rank's own
    device, a CUDA rank with CPU offload recorded the host's categories (the H100 fsdp2_offload
    cases: 0 activations), which would have set the model's activations to 0."""
    found: dict[str, float] = {}
    for result in results:
        if result.get("status") != "ok":
            continue
        rank0 = next((r for r in result.get("ranks", []) if r.get("rank") == 0), None)
        cats = (rank0 or {}).get("memory", {}).get("tracked_by_category_bytes") or {}
        activations = cats.get("act", 0) + cats.get("temp", 0)
        if activations > 0:
            found.setdefault(result["case"]["model"], activations / result["case"]["batch_size"])
    return found
