"""Untimed probe steps after the measured ones: FLOP counting, model-state bytes, the memory
breakdown, the GPU busy share and profiling, plus the model facts the FLOPs formula needs.

Each probe runs one real training step (so the model keeps training) outside every timed region;
nothing here runs during the measured steps. Inside the timed region only the memory timeline's
allocator reads run (CUDA only).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fsdp_bench.plan.case import PARTS_PROBE_PLAIN_STEPS, PARTS_PROBE_WINDOWS, PROFILED_STEPS, Case
from fsdp_bench.results.layout import CaseDir
from fsdp_bench.results.readings import BREAKDOWN_PARTS, PeakPrediction, StepParts
from fsdp_bench.results.records import RankRecord
from fsdp_bench.worker.probe_guard import ProbeGuard
from fsdp_bench.worker.training import local_tensor

# MemTracker's categories folded into the five the results report.
BREAKDOWN_CATEGORIES = {
    "param": "params",
    "buffer": "params",
    "grad": "grads",
    "opt": "optimizer",
    "act": "activations",
    "temp": "other",
    "oth": "other",
}


def count_matmul_params(model: nn.Module) -> int:
    """N of the FLOPs formula: unique parameters minus lookup-only embedding tables.

    An embedding weight that is also some Linear's weight (GPT-2 tying) is an output projection
    and stays in N once.
    """
    unique = {id(p): p for p in model.parameters()}
    linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    lookup = {
        id(p): p
        for m in model.modules()
        if isinstance(m, nn.Embedding)
        for p in m.parameters()
        if id(p) not in linear_weights
    }
    return sum(p.numel() for i, p in unique.items() if i not in lookup)


def attention_shape(model: nn.Module) -> dict[str, int]:
    """Layers, heads and head size of the attention (zeros for attention-free models).

    Hugging Face models say it in their config (head count of the queries: the 12*L*H*Q*T
    attention term counts the score and value matmuls, which grouped-query attention does not
    shrink); the project's GPT says it in its modules.
    """
    config = getattr(getattr(model, "lm", None), "config", None)
    if config is not None:
        layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", 0)
        heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", 0)
        hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", 0)
        head_dim = getattr(config, "head_dim", None) or (hidden // heads if heads else 0)
        return {"n_layers": int(layers), "n_heads": int(heads), "head_dim": int(head_dim)}
    blocks = getattr(model, "blocks", None)
    attn = getattr(blocks[0], "attn", None) if blocks is not None and len(blocks) else None
    if attn is None:
        return {"n_layers": 0, "n_heads": 0, "head_dim": 0}
    n_embd = attn.proj.in_features
    return {"n_layers": len(blocks), "n_heads": attn.n_head, "head_dim": n_embd // attn.n_head}


def _sdpa_flop_mapping() -> dict[Any, Callable[..., int]]:
    """Every fused attention kernel counted by one formula (`analysis.flops.sdpa_*_flops`).

    Two gaps in torch's own table are closed this way: FlopCounterMode does not know the CPU flash
    kernel, and torch 2.11's SDPA formula asserts that query, key and value have equal head
    counts, so a grouped-query model (Llama 3, Qwen2, Mistral: transformers passes
    `enable_gqa=True`) raised inside the probe. The formula is the one torch >= 2.13 uses.
    """
    from fsdp_bench.analysis.flops import sdpa_backward_flops, sdpa_forward_flops

    # FlopCounterMode keys its registry by overload packet and hands formulas shapes, not tensors.
    def fwd_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_forward_flops(query_shape, key_shape, value_shape)

    def bwd_flop(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_backward_flops(grad_out_shape, query_shape, key_shape, value_shape)

    aten = torch.ops.aten
    kernels = (
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    )
    mapping: dict[Any, Callable[..., int]] = {}
    for name in kernels:
        for op_name, formula in ((name, fwd_flop), (f"{name}_backward", bwd_flop)):
            op = getattr(aten, op_name, None)
            if op is not None:
                mapping[op] = formula
    return mapping


def _inplace_addmm_flop_mapping() -> dict[Any, Callable[..., int]]:
    """`addmm_` counted as torch counts `addmm`: torch's table has no in-place matmuls, and the
    chunked loss (worker.models.loss) adds each slice's head-weight gradient with `addmm_`, so a
    third of the output head's FLOPs went uncounted (6 T V H for the full loss, 4 T V H chunked)."""

    def addmm_flop(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
        (m, k), (_, n) = a_shape, b_shape
        return 2 * m * k * n

    return {torch.ops.aten.addmm_: addmm_flop}


def count_step_flops(step: Callable[[], Any]) -> int:
    """FLOPs this rank executes in one training step, as torch.utils.flop_counter counts them
    (matmuls, convolutions, attention; includes activation-checkpoint recompute)."""
    from torch.utils.flop_counter import FlopCounterMode

    mapping = {**_sdpa_flop_mapping(), **_inplace_addmm_flop_mapping()}
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with counter:
        step()
    return int(counter.get_total_flops())


def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one flat buffer count once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        local = local_tensor(t)
        storage = local.untyped_storage()
        seen[storage.data_ptr() or id(storage)] = storage.nbytes()
    return sum(seen.values())


def _state_tensors(optimizer) -> list[torch.Tensor]:
    return [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]


def resident_model_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Params, grads and optimizer state resident on this rank right now, by distinct storage."""
    params = list(model.parameters())
    state = _state_tensors(optimizer)
    out = {
        "params": _storage_bytes(params),
        "grads": _storage_bytes(p.grad for p in params),
        "optimizer": _storage_bytes(state),
    }
    out["total"] = out["params"] + out["grads"] + out["optimizer"]
    return out


def resident_state_by_category(model: nn.Module, optimizer) -> dict[str, int]:
    """Everything MemTracker follows of a model between steps, by distinct storage: parameters
    with buffers, gradients and optimizer state (the base a profiled peak counts up from)."""
    state = resident_model_state_bytes(model, inner_optimizer(optimizer))
    return {
        "params": state["params"] + _storage_bytes(model.buffers()),
        "grads": state["grads"],
        "optimizer": state["optimizer"],
    }


def measure_model_state_after_step(
    step: Callable[[], Any], optimizer: torch.optim.Optimizer, model: nn.Module
) -> dict[str, int]:
    """Run `step` and read the model state after optimizer.step(), before zero_grad frees grads."""
    seen: dict[str, int] = {}
    handle = inner_optimizer(optimizer).register_step_post_hook(
        lambda opt, args, kwargs: seen.update(resident_model_state_bytes(model, opt))
    )
    try:
        step()
    finally:
        handle.remove()
    return seen


def inner_optimizer(optimizer):
    """The torch optimizer itself: accelerate's AcceleratedOptimizer wraps it in `.optimizer` and
    is no torch.optim.Optimizer, so hooks and state belong on the wrapped one."""
    inner = getattr(optimizer, "optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer


def fold_breakdown(by_category: dict[str, int]) -> dict[str, int]:
    """MemTracker's categories folded into params/grads/optimizer/activations/other."""
    out = dict.fromkeys(BREAKDOWN_PARTS, 0)
    for name, value in by_category.items():
        out[BREAKDOWN_CATEGORIES.get(name, "other")] += int(value)
    return out


PROBES_OFF = "probe steps not run (--bench-no-probes)"
# A simulated rank's peers are fake: their collectives return at once, so a profiled step would
# show no exposed communication and a "why" built on it would be wrong; its communication comes
# from the model instead (predicted_step_time_s_*). Skipping the probe saves 8 steps per simulated case.
SIMULATED_NO_PARTS = "not measured on a simulated rank: its peers' collectives are fakes that take no time"


def memtracker_refusal(model: torch.nn.Module) -> str | None:
    """Why torch's MemTracker cannot follow this model (None: it can).

    Asked before trying: MemTracker raises FSDP1's refusal from inside the forward pass, after
    FSDP1 has unsharded some parameters, and the interrupted step leaves FSDP1 unable to run
    another one.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel

    if any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
        return (
            "MemTracker refuses FSDP1: with use_orig_params=True its parameters are views into the "
            "flat parameter, not leaf tensors, so MemTracker cannot register its post-accumulate-grad "
            "hooks on them ('post accumulate grad hooks cannot be registered on non-leaf tensors')"
        )
    return None


def _units_and_mesh(case: Case, world_size: int, rank: int) -> dict[str, Any]:
    """The case's model units and hybrid mesh for the allocated model-state expectation
    ({} when the model has no unit model: the textbook figure alone is recorded then)."""
    from fsdp_bench.analysis.comm_model import GPUS_PER_NODE, model_units
    from fsdp_bench.plan.case import hybrid_mesh_shape
    from fsdp_bench.plan.catalog import strategy as catalog_strategy
    from fsdp_bench.plan.flavors import flavor_for

    try:
        units = model_units(flavor_for(case.model))
    except (ValueError, KeyError, OSError):
        return {}
    mesh = None
    if catalog_strategy(case.strategy).hybrid:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", min(world_size, GPUS_PER_NODE)))
        mesh = hybrid_mesh_shape(case.mesh, world_size=world_size, ranks_per_node=local)
    return {"units": units, "mesh": mesh, "rank": rank}


def predicted_memory(case: Case, world_size: int, rank: int) -> PeakPrediction:
    """analysis.fit's predicted peak and allocated model state for this case, recorded before
    the measurement is known (fp32 AdamW model, estimated activations; see analysis.fit)."""
    from fsdp_bench.analysis.fit import predict_case_peak

    found = _units_and_mesh(case, world_size, rank)
    if not found:
        return {"null_reason": f"no parameter-shape model for {case.model}"}
    p = predict_case_peak(case, world_size, mesh=found["mesh"])
    return {
        "peak_bytes": p["peak_bytes"],
        "model_state_bytes": p["model_state_bytes"],
        "activation_bytes": p["activation_bytes"],
        "gathered_bytes": p["gathered_bytes"],
        "phase": p["phase"],
        "parts_bytes": p["parts_bytes"],
        "phases_bytes": p["phases_bytes"],
        "method": "analysis.fit.predict_peak_bytes (parts counted from the config, not calibrated)",
    }


def _probe_flops_and_state(
    case: Case, model, optimizer, step: Callable[[], Any], *, record: RankRecord, guard: ProbeGuard, rank: int
) -> None:
    """One step under FlopCounterMode that also reads the model state after optimizer.step()."""
    from fsdp_bench.analysis.flops import flops_per_token
    from fsdp_bench.analysis.model_state import expected_model_state_bytes

    flops = record["flops"]
    if not case.probes:
        counted, measured, reason = 0, {}, PROBES_OFF
    else:

        def probe() -> tuple[int, dict[str, int]]:
            seen: dict[str, int] = {}
            total = count_step_flops(lambda: seen.update(measure_model_state_after_step(step, optimizer, model)))
            return total, seen

        value, reason = guard.run("flops", probe)
        counted, measured = value if value is not None else (0, {})
    if reason is not None:
        flops["counter_null_reason"] = record["measured_model_state_null_reason"] = reason
    tokens_per_rank_step = case.batch_size * case.grad_accum * case.seq_len
    flops["counter_per_step"] = counted or None
    flops["per_token_counter"] = counted / tokens_per_rank_step if counted else None
    flops["per_token_formula"] = flops_per_token(seq_len=case.seq_len, **flops["formula_inputs"])
    flops["formula_over_counter"] = flops["per_token_formula"] / flops["per_token_counter"] if counted else None
    record["measured_model_state_bytes"] = measured or None
    record["expected_model_state_bytes"] = expected_model_state_bytes(
        case.strategy,
        n_params=record["n_params"],
        world_size=record["world_size"],
        param_bytes=record["param_bytes"],
        grad_bytes=record["param_bytes"],
        optimizer_bytes=2 * record["param_bytes"],
        **_units_and_mesh(case, record["world_size"], rank),
    )


def _probe_breakdown(
    case: Case,
    model,
    optimizer,
    step: Callable[..., Any],
    *,
    record: RankRecord,
    guard: ProbeGuard,
    device: torch.device,
) -> None:
    """One step under MemTracker: the peak's breakdown by category (and the CPU peak)."""
    from fsdp_bench.worker.memory import track_step_memory

    refusal = up_front = memtracker_refusal(model) if case.probes else PROBES_OFF
    if refusal is None:
        tracked, refusal = guard.run("memtracker", lambda: track_step_memory(step, [model], optimizer, device=device))
    if refusal is None:
        record["memory"]["tracked_by_category_bytes"] = tracked["by_category_bytes"]
        record["memory"]["tracked_peak_bytes"] = tracked["peak_bytes"]
        record["memory_breakdown_bytes"] = fold_breakdown(tracked["by_category_bytes"])
        if device.type == "cpu":  # CPU has no allocator peak: the tracked peak is the peak
            record["memory"]["peak_allocated_bytes"] = tracked["peak_bytes"]
    else:
        # No number beats a wrong one: the breakdown is null with the reason; the model state
        # above (read by storage, not by MemTracker) still stands.
        record["memory_breakdown_bytes"] = None
        record["memory_breakdown_null_reason"] = refusal
        if device.type == "cpu":  # on CUDA the allocator's peak stands without the breakdown
            record["memory"]["method"] = f"unavailable: {refusal}"
            # FSDP1 only: where MemTracker failed on another strategy, the profiled reading is no
            # stand-in (on ddp it read 2.8-12.2% low: docs/metrics.md, "FSDP1's CPU peak")
            if up_front not in (None, PROBES_OFF):
                _probe_profiled_peak(model, optimizer, step, record=record, guard=guard)


def _probe_profiled_peak(model, optimizer, step: Callable[..., Any], *, record: RankRecord, guard: ProbeGuard) -> None:
    """Two steps under the profiler's memory events: the CPU peak MemTracker could not give."""
    from fsdp_bench.worker.profiled_peak import profiled_step_peak

    peak, reason = guard.run(
        "profiled_peak",
        lambda: profiled_step_peak(step, model=model, resident=resident_state_by_category(model, optimizer)),
    )
    reason = reason or (peak or {}).get("null_reason")
    record["memory"]["profiled_peak"] = peak if reason is None else {"null_reason": reason}
    if reason is None:
        record["memory"]["peak_allocated_bytes"] = peak["peak_bytes"]
        record["memory"]["method"] = (
            "profiled_probe_steps: torch.profiler memory events over 2 untimed steps, the peak in "
            "the second plus the resident state (MemTracker refuses FSDP1); its breakdown by each "
            "block's allocation site, gradients by address (worker.profiled_peak)"
        )
        record["memory_breakdown_bytes"] = peak["breakdown_bytes"]
        record.pop("memory_breakdown_null_reason", None)


def _probe_step_parts(
    case: Case, step: Callable[[], Any], *, record: RankRecord, guard: ProbeGuard, device: torch.device
) -> None:
    """One step under the profiler, on every device: the step taken apart (`step_parts`: compute,
    exposed communication by collective, optimizer, data, host; analysis.attribution) and, on
    CUDA, the GPU busy share of this rank's timed step, both from the same events.

    It runs after the measured steps' peaks were read (worker.loop reads them before any probe),
    so the profiler's buffers never enter a reported peak; no trace file is written."""
    from fsdp_bench.analysis.busy import NO_CUDA_KERNELS, NO_DEVICE_TIMELINE, busy_record
    from fsdp_bench.worker.profiling import attribute_events, probe_step_events, time_plain_steps

    if not case.probes or case.simulate:
        reason = PROBES_OFF if not case.probes else SIMULATED_NO_PARTS
        record["gpu_busy"] = {"pct": None, "null_reason": reason}
        record["step_parts"] = {"null_reason": reason}
        return

    def parts_and_plain_steps() -> StepParts:
        plain = time_plain_steps(step, device_type=device.type)  # first: the moment nearest the timed loop
        parts = attribute_events(probe_step_events(step, device_type=device.type), device_type=device.type)
        parts["plain_step_s"] = plain
        return parts

    parts, reason = guard.run("step_parts", parts_and_plain_steps)
    reason = reason or parts.get("null_reason")
    record["step_parts"] = parts if reason is None else {"null_reason": reason}
    if reason is None:
        record["step_parts"]["method"] = (
            f"{PARTS_PROBE_PLAIN_STEPS} steps timed without the profiler, then torch.profiler over 1 unmarked and {PARTS_PROBE_WINDOWS} marked untimed steps (analysis.attribution)"
        )
    if device.type != "cuda":
        record["gpu_busy"] = {"pct": None, "null_reason": NO_DEVICE_TIMELINE}
        return
    probe = parts.pop("busy", None) if reason is None else None
    busy = busy_record(probe or {"null_reason": reason or NO_CUDA_KERNELS}, record["step_times_s"])
    busy["method"] = (
        f"torch.profiler over {PARTS_PROBE_WINDOWS} untimed probe steps: union of kernel/memcpy/memset intervals / timed median"
    )
    record["gpu_busy"] = busy


def run_probes(
    case: Case,
    model,
    optimizer,
    train_step: Callable[..., Any],
    *,
    record: RankRecord,
    device: torch.device,
    rank: int,
    out_dir: Path | None,
    fault: str | None = None,
) -> ProbeGuard:
    """The untimed probe steps: the step's parts (and the GPU busy share), FLOPs + model state,
    memory breakdown, then profiling if asked.

    `train_step(on_phase=None)` runs one optimizer step exactly as the timed loop does. Every
    probe runs under a `ProbeGuard` (returned: its `must_leave` tells the caller the process
    group is no longer safe to use); `fault` is a contributor's fault for the first probe step.
    """
    guard = ProbeGuard(
        model=model,
        optimizer=optimizer,
        device=device,
        rank=rank,
        world_size=record["world_size"],
        record=record,
        fault=fault,
    )
    step = guard.wrap_step(train_step)
    # The step's parts first: their plain steps then follow the timed loop as closely as they can
    # (after the FLOP and MemTracker probes, five plain gpt_tiny steps read within 15% of the timed
    # median on 35 of 48 ranks of a quiet sweep; right after the timed loop, 41 of 48).
    _probe_step_parts(case, step, record=record, guard=guard, device=device)
    _probe_flops_and_state(case, model, optimizer, step, record=record, guard=guard, rank=rank)
    record["prediction"] = predicted_memory(case, record["world_size"], rank)
    _probe_breakdown(case, model, optimizer, step, record=record, guard=guard, device=device)
    if case.profile:
        from fsdp_bench.worker.profiling import profile_steps

        trace_dir = CaseDir(Path(out_dir)).profile_dir if out_dir is not None else None
        profile, reason = guard.run(
            "profile",
            lambda: profile_steps(
                step, n_steps=PROFILED_STEPS, device_type=device.type, rank=rank, trace_dir=trace_dir
            ),
        )
        record["profile"] = profile if reason is None else {"null_reason": reason}
    return guard
