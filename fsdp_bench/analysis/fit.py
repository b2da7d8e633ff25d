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

from typing import Any, Iterable, Mapping, Sequence

from fsdp_bench.analysis.comm_model import Unit, model_units, padded_numel
from fsdp_bench.analysis.model_state import allocated_model_state_bytes, shard_size
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.analysis.hf_units import hf_dims
from fsdp_bench.plan.flavors import ModelFlavor, flavor_for, load_config_dict
from fsdp_bench.results.schema import GIB
from fsdp_bench.results.metrics import M

WORLD_SIZES = (1, 8, 64, 512)


def activation_bytes_per_sample(flavor: ModelFlavor, seq_len: int, dtype_bytes: int = 4) -> int:
    """Estimated activations kept for backward per sample, without checkpointing.

    GPT: 17 * d values per token per layer (Korthikanti et al. 2022 count 34 * d bytes in 16-bit,
    with fused attention so no seq x seq term), plus logits, the loss's softmax and the logits'
    gradient (3 x vocab per token).
    Linear stack: input and ReLU output per layer, plus the target.
    Hugging Face (llama/qwen2/mistral/gpt2, dims from the config): per token per layer
    10 * hidden (norm inputs and outputs, q, k, v, attention output, o_proj and residual) plus
    4 * intermediate (gate, up, activation, their product; gpt2: c_fc out, gelu out, counted
    alike), plus 3 x vocab per token for logits, softmax and logits' gradient. An upper-bound
    estimate (GQA's smaller k/v are counted at full width); calibrate with a measured run.
    """
    c = flavor.config
    if flavor.family == "hf":
        dims = hf_dims(load_config_dict(flavor))
        per_token = dims["layers"] * (10 * dims["hidden"] + 4 * dims["intermediate"]) + 3 * dims["vocab"]
        return per_token * seq_len * dtype_bytes
    if flavor.family == "gpt":
        per_token = 17 * c["n_embd"] * c["n_layer"] + 3 * c["vocab_size"]
    else:
        per_token = 2 * c["dim"] * c["n_layers"] + 2 * c["dim"]
    return per_token * seq_len * dtype_bytes


def gathered_bytes(strategy: str, units: Sequence[Unit], world_size: int, dtype_bytes: int = 4, *,
                   mesh: tuple[int, int] | None = None) -> int:
    """Unsharded parameter buffers alive at the peak, beyond the rank's own shards."""
    row = catalog_strategy(strategy)
    if row.family == "ddp":  # the reducer's flat gradient buckets: a second copy of every gradient
        return sum(u.numel for u in units) * dtype_bytes
    shard = shard_size(strategy, world_size, mesh)
    if shard == 1 and (not row.shards_parameters or row.family == "fsdp1"):
        return 0  # the parameters are already whole (FSDP1 falls back to NO_SHARD on one rank)
    full = sorted((padded_numel(row.layout, u, shard, dtype_bytes) * dtype_bytes for u in units), reverse=True)
    return sum(full) if not row.reshard_after_forward else sum(full[:2])


def predict_peak_bytes(strategy: str, flavor: ModelFlavor, world_size: int, batch_size: int, *, seq_len: int,
                       act_bytes_per_sample: float | None = None, mesh: tuple[int, int] | None = None,
                       grad_accum: int = 1) -> dict[str, float]:
    """The peak of one rank: parameters, optimizer state and gathered units, plus the larger of
    the activations and the gradients (a step's gradients grow as its activations are freed).
    With gradient accumulation the first micro-batches' gradients stay while the next one's
    activations are built, so both count (the golden runs under-predicted grad-accum 2 cases by
    up to 25 % without this)."""
    units = model_units(flavor)
    states = allocated_model_state_bytes(strategy, units, world_size, mesh=mesh)
    act = (act_bytes_per_sample if act_bytes_per_sample is not None
           else activation_bytes_per_sample(flavor, seq_len)) * batch_size
    gathered = gathered_bytes(strategy, units, world_size, mesh=mesh)
    live = act + states["grads"] if grad_accum > 1 else max(act, states["grads"])
    peak = states["params"] + states["optimizer"] + gathered + live
    return {"peak_bytes": peak, "model_state_bytes": states["total"], "gathered_bytes": gathered,
            "activation_bytes": act}


def largest_batch(strategy: str, flavor: ModelFlavor, world_size: int, device_bytes: float, *, seq_len: int,
                  act_bytes_per_sample: float | None = None, limit: int = 1 << 16) -> int:
    """The largest per-device batch whose predicted peak fits `device_bytes` (0: not even 1)."""
    per_sample = (act_bytes_per_sample if act_bytes_per_sample is not None
                  else activation_bytes_per_sample(flavor, seq_len))

    def fits(bs: int) -> bool:
        return predict_peak_bytes(strategy, flavor, world_size, bs, seq_len=seq_len,
                                  act_bytes_per_sample=per_sample)["peak_bytes"] <= device_bytes

    if not fits(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:  # peak grows with the batch, so bisect
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def fit_table(models: Iterable[str], strategies: Iterable[str], *, device_memory_gib: float, seq_len: int,
              batch_size: int, world_sizes: Sequence[int] = WORLD_SIZES,
              calibration: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """One row per (model, strategy, world size)."""
    rows = []
    for model in models:
        flavor = flavor_for(model)
        length = min(seq_len, flavor.max_seq_len or seq_len)
        per_sample = (calibration or {}).get(model)
        for strategy in strategies:
            for n in world_sizes:
                p = predict_peak_bytes(strategy, flavor, n, batch_size, seq_len=length, act_bytes_per_sample=per_sample)
                rows.append({
                    "model": model, "strategy": strategy, "world_size": n, "seq_len": length, "batch_size": batch_size,
                    "model_state_gib": p["model_state_bytes"] / GIB, "gathered_gib": p["gathered_bytes"] / GIB,
                    "activation_gib": p["activation_bytes"] / GIB, M.predicted_peak_gib: p["peak_bytes"] / GIB,
                    "fits": p["peak_bytes"] <= device_memory_gib * GIB, "device_memory_gib": device_memory_gib,
                    "max_batch_size": largest_batch(strategy, flavor, n, device_memory_gib * GIB, seq_len=length,
                                                    act_bytes_per_sample=per_sample),
                    "activation_source": "measured" if per_sample is not None else "estimate",
                })
    return rows


def calibrate_from_results(results: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Activation bytes per sample by model, from ok cases' rank-0 MemTracker categories."""
    found: dict[str, float] = {}
    for result in results:
        if result.get("status") != "ok":
            continue
        rank0 = next((r for r in result.get("ranks", []) if r.get("rank") == 0), None)
        cats = (rank0 or {}).get("memory", {}).get("tracked_by_category_bytes") or {}
        if "act" in cats:
            found.setdefault(result["case"]["model"], (cats["act"] + cats.get("temp", 0)) / result["case"]["batch_size"])
    return found
