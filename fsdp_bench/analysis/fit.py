"""Will it fit? Predicted peak memory per device for each strategy, model and world size, and
the largest per-device batch that fits a given device memory.

    python -m fsdp_bench.fit ...   (the CLI and chart: fsdp_bench.report.fit_chart)

The peak is modelled as what rank 0 holds at the top of a training step (fp32, AdamW):
    sharded parameters + AdamW state (2x parameters) + the unsharded buffers of the two largest
    units being gathered (current and prefetched; no-reshard strategies keep every unit whole;
    DDP's gradient buckets instead) + max(activations of the batch, gradients)
Activations per sample come from a measured case when calibrated (MemTracker's act + temp on
CPU), otherwise from the estimate below. Pure Python, apart from the chart; tests compare it to
simulated measurements.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fsdp_bench.analysis.activations import Activations, estimate_activations
from fsdp_bench.analysis.comm_model import Unit, model_units, padded_numel
from fsdp_bench.analysis.model_state import allocated_model_state_bytes, shard_size
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.plan.flavors import ModelFlavor, flavor_for
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import CaseResult
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
    precision: str = "fp32",
    buckets_from_start: bool | None = None,
    grad_sync: str = "every",
) -> dict[str, Any]:
    """The peak of one rank, from its parts, and the phase of the step where it falls.

    Top of backward: parameters (own shards), AdamW state, DDP's buckets, the gathered units, the
    micro-batch's activations, the loss's two vocab-wide gradients, with accumulation the earlier
    gradients. Optimizer step: parameters, gradients, AdamW state, buckets, the step's temporaries.
    `act_bytes_per_sample` (a calibration) replaces the counted activations, loss included; bf16/fp16
    `precision` keeps activations and gathered parameters at 2 bytes (DDP: autocast, fp32 states).
    `buckets_from_start`: DDP's buckets held from the start (default: not on CPU); `grad_sync` "last":
    reduce at the last micro-step only (`accumulated_gradient_bytes`)."""
    units = model_units(flavor)
    states = allocated_model_state_bytes(strategy, units, world_size, mesh=mesh)
    row, compute_bytes = catalog_strategy(strategy), 2 if precision in ("bf16", "fp16") else 4
    acts = estimate_activations(
        flavor, batch_size, seq_len, act_ckpt=act_ckpt, dtype_bytes=compute_bytes, autocast=row.autocasts
    )
    act, loss_temp = acts.total + acts.recompute, acts.loss_temp
    if act_bytes_per_sample is not None:
        act, loss_temp = act_bytes_per_sample * batch_size, 0
    parts = {
        **{key: states[key] for key in ("params", "grads", "optimizer")},
        "buckets": bucket_bytes(strategy, units),
        "gathered": gathered_bytes(strategy, units, world_size, compute_bytes, mesh=mesh),
        "activations": act,
        "loss_temp": loss_temp,
        "optimizer_temp": optimizer_temp_bytes(
            strategy, units, world_size, impl=optimizer_impl, device=device, mesh=mesh
        ),
    }
    if row.offload and device == "cuda":  # they live on the host: not the GPU's peak
        parts.update(params=0, grads=0, optimizer=0, optimizer_temp=0)
    deferred = grad_sync == "last" and grad_accum > 1
    parts["accumulated_grads"] = accumulated_gradient_bytes(parts["grads"], units, grad_accum, deferred, compute_bytes)
    held = device != "cpu" if buckets_from_start is None else buckets_from_start  # see _phase_bytes
    at_top = held or (grad_accum > 1 and not deferred)  # or an earlier micro-batch wrote them
    phases = _phase_bytes(parts, units, buckets_at_top=at_top, deferred=deferred)
    if acts.per_layer and act_bytes_per_sample is None:
        phases = _with_block_moments(phases, parts, strategy, units, world_size, acts, grad_accum, mesh, compute_bytes)
    phase = max(phases, key=phases.get)
    return {"peak_bytes": phases[phase], "phase": phase, "parts_bytes": parts, "phases_bytes": phases} | {
        "model_state_bytes": states["total"],
        "gathered_bytes": parts["gathered"],
        "activation_bytes": act,
    }


def predict_case_peak(
    case: Case, world_size: int | None = None, *, mesh: tuple[int, int] | None = None
) -> dict[str, Any]:
    """predict_peak_bytes for one case: its strategy, model, batch, sequence, accumulation,
    optimizer, device, activation checkpointing and precision, at `world_size` (default: its
    ranks) and the hybrid `mesh` the caller resolved."""
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
    )


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


def _with_block_moments(
    phases: dict[str, float],
    parts: dict[str, float],
    strategy: str,
    units: Sequence[Unit],
    world_size: int,
    acts: Activations,
    grad_accum: int,
    mesh: tuple[int, int] | None,
    dtype_bytes: int,
) -> dict[str, float]:
    """`phases` with the moments inside the blocks: on FSDP2 a block's backward and a block's
    forward all-gather copy-out, on DDP a block's backward. Which of them makes the peak changes
    with the world size (the top of backward at a few ranks, the padded buffers at hundreds) and
    the device (DDP's buckets), so every candidate is computed and the largest wins."""
    ddp = _ddp_block_backward_bytes(parts, units, acts, grad_accum)
    phases = {**phases, "backward": max(phases["backward"], ddp)}
    gathered = _fsdp2_full_units(strategy, units, world_size, mesh, dtype_bytes)
    if gathered is None:
        return phases
    # with accumulation the earlier micro-batches' gradients are alive in every block (sharded,
    # or unsharded when the reduction waits for the last micro-step)
    kept = parts["params"] + parts["optimizer"] + parts["accumulated_grads"]
    reshard = catalog_strategy(strategy).reshard_after_forward
    shard = shard_size(strategy, world_size, mesh)
    backward = kept + _block_backward_bytes(
        units, *gathered, acts, shard=shard, reshard=reshard, dtype_bytes=dtype_bytes
    )
    phases = {**phases, "backward": max(phases["backward"], backward)}
    return {"forward": kept + _block_forward_bytes(*gathered, acts, reshard=reshard), **phases}


def _phase_bytes(
    parts: dict[str, float], units: Sequence[Unit], *, buckets_at_top: bool, deferred: bool
) -> dict[str, float]:
    """The bytes alive at the top of backward and in the optimizer step, from the peak's parts.

    DDP's buckets are allocated when it wraps the model and live as long (seen on an H100:
    max_memory_allocated was above every tracked tensor by their size at the top of backward).
    CPU's measured peak is MemTracker's, which sees a bucket only from backward's first write
    into it (`buckets_at_top` False: the first micro-batch's top of backward is without them;
    the moment inside the blocks' backward, with them, is `_ddp_block_backward_bytes`; with the
    reduction `deferred`, the head's backward, `_ddp_deferred_head_bytes`)."""
    kept = parts["params"] + parts["optimizer"] + parts["buckets"]
    top = kept - (0 if buckets_at_top else parts["buckets"])
    backward = top + parts["gathered"] + parts["activations"] + parts["loss_temp"] + parts["accumulated_grads"]
    if deferred and parts["buckets"]:
        backward = max(backward, _ddp_deferred_head_bytes(parts, units))
    return {"backward": backward, "optimizer step": kept + parts["grads"] + parts["optimizer_temp"]}


# DDP fills its first bucket up to this size (torch's _DEFAULT_FIRST_BUCKET_BYTES), the rest
# up to bucket_cap_mb; a bucket is allocated whole at its first write
DDP_FIRST_BUCKET_BYTES = 1024 * 1024


def _ddp_deferred_head_bytes(parts: dict[str, float], units: Sequence[Unit], dtype_bytes: int = 4) -> float:
    """DDP's moment in the head's backward when the earlier micro-batches skipped the reduction
    (no_sync): the head's gradient is written into the first bucket, which no earlier micro-batch
    wrote, so it is allocated now, whole; beside it the accumulated gradients and the activations,
    the loss's temporaries about gone. Read off MemTracker (2 ranks, batch 2 x accum 2, peak in
    the final norm's or the head's backward): -1.7 % on qwen2_tiny, -3.0 % on gpt_tiny, +1.4 %
    on llama_odd_vocab, +0.4 % on gpt2_small_odd, where the top of backward without the bucket
    was -7.0 %, -6.9 %, -3.3 % and -0.04 %."""
    first_bucket = min(parts["buckets"], max(DDP_FIRST_BUCKET_BYTES, _head_grad_numel(units) * dtype_bytes))
    return parts["params"] + parts["optimizer"] + parts["accumulated_grads"] + first_bucket + parts["activations"]


def _head_grad_numel(units: Sequence[Unit]) -> int:
    """The head's gradients, made before the blocks' backward: the vocab matrix (the root's
    largest 2-D parameter; tied or not, its gradient is alive by then) and the root's 1-D ones."""
    root_shapes = next((u.shapes for u in units if u.is_root), ())
    return max((math.prod(s) for s in root_shapes if len(s) == 2), default=0) + sum(
        math.prod(s) for s in root_shapes if len(s) == 1
    )


def _ddp_block_backward_bytes(
    parts: dict[str, float], units: Sequence[Unit], acts: Activations, grad_accum: int, dtype_bytes: int = 4
) -> float:
    """DDP's largest moment inside the blocks' backward (0 for every other strategy): the buckets
    (written by then), the head's gradients, the gradients of this block and those above (a
    second copy beside the buckets: DDP's gradients are not bucket views; with accumulation every
    gradient instead), the residual stream's gradient and the activations of this block and those
    below (the loss's tensors and the final norm's are gone). On CPU, where the measured peak sees
    the buckets only from their first write, this is DDP's backward peak on the Llama-style tiny
    flavors (MemTracker: the last block's backward, 2,441,136 B on qwen2_tiny at 2 ranks, against
    2,638,184 B for the top of backward with the buckets); every block is tried."""
    if not parts["buckets"]:
        return 0
    blocks = [u for u in units if not u.is_root]
    below = sum(acts.per_layer) + acts.under_blocks
    made = _head_grad_numel(units)
    peak = 0.0
    for k in reversed(range(len(blocks))):
        made += blocks[k].numel
        grads = parts["accumulated_grads"] if grad_accum > 1 else made * dtype_bytes
        peak = max(peak, parts["params"] + parts["optimizer"] + parts["buckets"] + grads + acts.stream_grad + below)
        below -= acts.per_layer[k]
    return peak


def _fsdp2_full_units(
    strategy: str, units: Sequence[Unit], world_size: int, mesh: tuple[int, int] | None, dtype_bytes: int
) -> tuple[int, list[int]] | None:
    """FSDP2's padded unsharded bytes of the root and of each block (forward order); None where
    the strategy does not gather dim-0 shards (no FSDP2, one rank, no blocks)."""
    row = catalog_strategy(strategy)
    shard = shard_size(strategy, world_size, mesh)
    blocks = [u for u in units if not u.is_root]
    if not row.shards_parameters or shard == 1 or row.layout != "fsdp2_dim0" or not blocks:
        return None
    full = [padded_numel(row.layout, b, shard, dtype_bytes) * dtype_bytes for b in blocks]
    root = next((padded_numel(row.layout, u, shard, dtype_bytes) * dtype_bytes for u in units if u.is_root), 0)
    return root, full


def _block_backward_bytes(
    units: Sequence[Unit],
    root: int,
    full: Sequence[int],
    acts: Activations,
    *,
    shard: int,
    reshard: bool,
    dtype_bytes: int = 4,
) -> int:
    """The largest block's backward on FSDP2, at its end (its weight gradients made, before its
    post-backward): the root gathered, the block gathered, the next block's all-gather output
    (prefetched; without resharding everything stays gathered instead; at the block's pre-backward
    copy-out, its own all-gather output instead, with none of its gradients yet), the reduce-scatter input
    of the block above (FSDP2 keeps one until the next post-backward frees it before allocating
    its own, so a block's own reduce-scatter never meets its unsharded parameters), the head's
    unsharded gradients (the vocab matrix and the final norm, made before the blocks' backward),
    the residual stream's gradient, the block's unsharded gradients, the sharded gradients the
    blocks above already reduced (half the model's at 2 ranks: linear_tiny), and the activations of this
    block and those below it (the loss's tensors and the final norm's are gone). Read off
    torch's FSDPMemTracker at 512 simulated ranks (llama_odd_vocab, gpt2_small_odd): there every
    dim 0 pads up to the group size, so these buffers, not the activations, make the peak; a
    middle block (one reduce-scatter input above it) beats the last (none) and the first (fewer
    activations), so every block is tried."""
    blocks = [u for u in units if not u.is_root]
    head_grads = _head_grad_numel(units)
    below = acts.under_blocks
    everything = root + sum(full)
    peak = 0
    for k, block in enumerate(blocks):
        below += acts.per_layer[k]
        reduce_scatter = full[k + 1] if k + 1 < len(blocks) else 0
        alive = reduce_scatter + head_grads * dtype_bytes + acts.stream_grad + below
        if not reshard:
            peak = max(peak, everything + alive + block.numel * dtype_bytes)
            continue
        # the blocks above: their sharded gradients, made (counted with resharding only: without
        # it, adding them put linear_tiny at 2 ranks at +9.6 %, against +1.9 % left out)
        alive += sum(full[k + 1 :]) // shard
        # the block's end (the one below prefetched), and its pre-backward copy-out: its
        # all-gather output and unsharded parameters both alive, before any of its gradients
        end = root + full[k] + (full[k - 1] if k > 0 else 0) + block.numel * dtype_bytes
        peak = max(peak, end + alive, root + 2 * full[k] + alive)
    return peak


def _block_forward_bytes(root: int, full: Sequence[int], acts: Activations, *, reshard: bool) -> int:
    """The largest block's pre-forward on FSDP2, at its all-gather's copy-out: the block's
    all-gather output and its unsharded parameters are both alive, and so is the previous unit's
    all-gather output (FSDP2 keeps it until the next copy-out), beside the root and the block
    (without resharding: every unit gathered so far) and the activations of the blocks before
    it. At small world sizes the top of backward (every activation and the loss's tensors) is
    larger; at hundreds of ranks the padded buffers outweigh the activations and, without
    resharding, this moment of the last block is the step's peak (FSDPMemTracker, 512 simulated
    ranks: +0 B on llama_odd_vocab and gpt2_small_odd), so both moments are modelled and the
    caller takes the max."""
    before = acts.under_blocks
    peak = 0
    for k, size in enumerate(full):
        gathered = root + (size if reshard else sum(full[: k + 1]))
        previous_all_gather = full[k - 1] if k > 0 else root
        peak = max(peak, gathered + size + previous_all_gather + before)
        before += acts.per_layer[k]
    return peak


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
    precision: str = "fp32",
) -> int:
    """The largest per-device batch whose predicted peak, plus `margin`, fits `device_bytes`
    (0: not even 1)."""

    def fits(bs: int) -> bool:
        peak = predict_peak_bytes(
            strategy,
            flavor,
            world_size,
            bs,
            seq_len=seq_len,
            act_bytes_per_sample=act_bytes_per_sample,
            precision=precision,
            buckets_from_start=True,  # a device's budget: its allocator holds DDP's buckets throughout
        )["peak_bytes"]
        return peak * (1 + margin) <= device_bytes

    if not fits(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:  # peak grows with the batch, so bisect
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


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


def fit_table(
    models: Iterable[str],
    strategies: Iterable[str],
    *,
    device_memory_gib: float,
    seq_len: int,
    batch_size: int,
    world_sizes: Sequence[int] = WORLD_SIZES,
    calibration: Mapping[str, float] | None = None,
    precision: str = "fp32",
) -> list[dict[str, Any]]:
    """One row per (model, strategy, world size)."""
    rows = []
    for model in models:
        flavor = flavor_for(model)
        length = min(seq_len, flavor.max_seq_len or seq_len)
        per_sample = (calibration or {}).get(model)
        for strategy in strategies:
            for n in world_sizes:
                p = predict_peak_bytes(
                    strategy,
                    flavor,
                    n,
                    batch_size,
                    seq_len=length,
                    act_bytes_per_sample=per_sample,
                    precision=precision,
                    buckets_from_start=True,  # a device's budget, as in largest_batch
                )
                rows.append(
                    {
                        "model": model,
                        "strategy": strategy,
                        "world_size": n,
                        "seq_len": length,
                        "batch_size": batch_size,
                        "precision": precision,
                        "model_state_gib": p["model_state_bytes"] / GIB,
                        "gathered_gib": p["gathered_bytes"] / GIB,
                        "activation_gib": p["activation_bytes"] / GIB,
                        M.predicted_peak_gib: p["peak_bytes"] / GIB,
                        "fits": p["peak_bytes"] * (1 + FIT_MARGIN) <= device_memory_gib * GIB,
                        "fit_margin": FIT_MARGIN,
                        "peak_phase": p["phase"],
                        "device_memory_gib": device_memory_gib,
                        "max_batch_size": largest_batch(
                            strategy,
                            flavor,
                            n,
                            device_memory_gib * GIB,
                            seq_len=length,
                            act_bytes_per_sample=per_sample,
                            precision=precision,
                        ),
                        "activation_source": "measured" if per_sample is not None else "estimate",
                    }
                )
    return rows


def calibrate_from_results(results: Iterable[CaseResult]) -> dict[str, float]:
    """Activation bytes per sample by model, from ok cases' rank-0 MemTracker categories."""
    found: dict[str, float] = {}
    for result in results:
        if result.get("status") != "ok":
            continue
        rank0 = next((r for r in result.get("ranks", []) if r.get("rank") == 0), None)
        cats = (rank0 or {}).get("memory", {}).get("tracked_by_category_bytes") or {}
        if "act" in cats:
            found.setdefault(
                result["case"]["model"], (cats["act"] + cats.get("temp", 0)) / result["case"]["batch_size"]
            )
    return found
