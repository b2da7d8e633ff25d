"""Will it fit? Predicted peak memory per device for each strategy, model and world size, and
the largest per-device batch that fits a given device memory.

    python -m fsdp_bench.fit --models gpt_124m,gpt_350m --device-memory-gib 80 --out fit/
    python -m fsdp_bench.fit --calibrate results/<run>   # activation bytes measured by a run

The peak is modelled as what rank 0 holds at the top of a training step (fp32, AdamW):
    sharded parameters + AdamW state (2x parameters) + the unsharded buffers of the two largest
    units being gathered (current and prefetched; no-reshard strategies keep every unit whole;
    DDP's gradient buckets instead) + max(activations of the batch, gradients)
Activations per sample come from a measured case when calibrated (MemTracker's act + temp on
CPU), otherwise from the estimate below. Pure Python, apart from the chart; tests compare it to
simulated measurements.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from fsdp_bench.case import HYBRID_STRATEGIES, STRATEGIES, hybrid_mesh_shape
from fsdp_bench.comm_model import GPUS_PER_NODE, Unit, fsdp1_flat_numel, fsdp2_padded_numel, model_units
from fsdp_bench.metrics import GIB
from fsdp_bench.models.flavors import MODEL_FLAVORS, ModelFlavor

WORLD_SIZES = (1, 8, 64, 512)
ADAM_STATES = 2  # exp_avg and exp_avg_sq, fp32 like the parameters
_REPLICATED = {"ddp", "fsdp1_no_shard"}
_NO_RESHARD = {"fsdp1_shard_grad_op", "fsdp2_no_reshard"}


def activation_bytes_per_sample(flavor: ModelFlavor, seq_len: int, dtype_bytes: int = 4) -> int:
    """Estimated activations kept for backward per sample, without checkpointing.

    GPT: 17 * d values per token per layer (Korthikanti et al. 2022 count 34 * d bytes in 16-bit,
    with fused attention so no seq x seq term), plus logits, the loss's softmax and the logits'
    gradient (3 x vocab per token).
    Linear stack: input and ReLU output per layer, plus the target.
    """
    c = flavor.config
    if flavor.family == "gpt":
        per_token = 17 * c["n_embd"] * c["n_layer"] + 3 * c["vocab_size"]
    else:
        per_token = 2 * c["dim"] * c["n_layers"] + 2 * c["dim"]
    return per_token * seq_len * dtype_bytes


def _padded(strategy: str, unit: Unit, shard: int, dtype_bytes: int) -> int:
    if strategy.startswith("fsdp2"):
        return fsdp2_padded_numel(unit, shard)
    return fsdp1_flat_numel(unit, shard, dtype_bytes)


def shard_size(strategy: str, world_size: int, mesh: tuple[int, int] | None = None) -> int:
    """Ranks one parameter is sharded over: 1 when replicated, the shard dim for hybrids."""
    if strategy in _REPLICATED:
        return 1
    if strategy in HYBRID_STRATEGIES:
        return (mesh or hybrid_mesh_shape("", world_size=world_size, ranks_per_node=min(world_size, GPUS_PER_NODE)))[1]
    return world_size


def model_state_bytes(strategy: str, units: Sequence[Unit], world_size: int, *, mesh: tuple[int, int] | None = None,
                      dtype_bytes: int = 4) -> dict[str, int]:
    """Parameters, gradients and AdamW state rank 0 holds between steps (its shards)."""
    if strategy in _REPLICATED:
        numel = sum(u.numel for u in units)
    else:
        shard = shard_size(strategy, world_size, mesh)
        numel = sum(_padded(strategy, u, shard, dtype_bytes) // shard for u in units)
    params = numel * dtype_bytes
    return {"params": params, "grads": params, "optimizer": ADAM_STATES * params,
            "total": (2 + ADAM_STATES) * params}


def gathered_bytes(strategy: str, units: Sequence[Unit], world_size: int, dtype_bytes: int = 4, *,
                   mesh: tuple[int, int] | None = None) -> int:
    """Unsharded parameter buffers alive at the peak, beyond the rank's own shards."""
    if strategy == "ddp":  # the reducer's flat gradient buckets: a second copy of every gradient
        return sum(u.numel for u in units) * dtype_bytes
    shard = shard_size(strategy, world_size, mesh)
    if shard == 1 and (strategy in _REPLICATED or strategy.startswith("fsdp1")):
        return 0  # the parameters are already whole (FSDP1 falls back to NO_SHARD on one rank)
    full = sorted((_padded(strategy, u, shard, dtype_bytes) * dtype_bytes for u in units), reverse=True)
    return sum(full) if strategy in _NO_RESHARD else sum(full[:2])


def predict_peak_bytes(strategy: str, flavor: ModelFlavor, world_size: int, batch_size: int, *, seq_len: int,
                       act_bytes_per_sample: float | None = None, mesh: tuple[int, int] | None = None) -> dict[str, float]:
    units = model_units(flavor)
    states = model_state_bytes(strategy, units, world_size, mesh=mesh)
    act = (act_bytes_per_sample if act_bytes_per_sample is not None
           else activation_bytes_per_sample(flavor, seq_len)) * batch_size
    gathered = gathered_bytes(strategy, units, world_size, mesh=mesh)
    peak = states["params"] + states["optimizer"] + gathered + max(act, states["grads"])
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
        flavor = MODEL_FLAVORS[model]
        length = min(seq_len, flavor.max_seq_len or seq_len)
        per_sample = (calibration or {}).get(model)
        for strategy in strategies:
            for n in world_sizes:
                p = predict_peak_bytes(strategy, flavor, n, batch_size, seq_len=length, act_bytes_per_sample=per_sample)
                rows.append({
                    "model": model, "strategy": strategy, "world_size": n, "seq_len": length, "batch_size": batch_size,
                    "model_state_gib": p["model_state_bytes"] / GIB, "gathered_gib": p["gathered_bytes"] / GIB,
                    "activation_gib": p["activation_bytes"] / GIB, "predicted_peak_gib": p["peak_bytes"] / GIB,
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


def write_fit(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """fit.csv and one chart per model: predicted peak per device against world size."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "fit.csv"
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    written = [csv_path]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for model in dict.fromkeys(r["model"] for r in rows):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        mine = [r for r in rows if r["model"] == model]
        for strategy in dict.fromkeys(r["strategy"] for r in mine):
            pts = [r for r in mine if r["strategy"] == strategy]
            ax.plot([r["world_size"] for r in pts], [r["predicted_peak_gib"] for r in pts], marker="o", label=strategy)
        ax.axhline(mine[0]["device_memory_gib"], color="red", linestyle="--", label="device memory")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("world size (devices)")
        ax.set_ylabel("predicted peak memory per device (GiB)")
        ax.set_title(f"Will it fit? {model}, batch {mine[0]['batch_size']}/device, seq {mine[0]['seq_len']}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"fit_{model}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsdp_bench.fit", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt_124m,gpt_350m,linear_odsc")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--world-sizes", default=",".join(map(str, WORLD_SIZES)))
    parser.add_argument("--device-memory-gib", type=float, default=80.0)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--calibrate", type=Path, default=None, help="run folder whose ok cases give activation bytes")
    parser.add_argument("--out", type=Path, default=Path("fit"))
    args = parser.parse_args(argv)
    for name in args.models.split(","):
        if name not in MODEL_FLAVORS:
            parser.error(f"--models: unknown model {name!r}; choose from {', '.join(MODEL_FLAVORS)}")
    calibration = None
    if args.calibrate is not None:
        from fsdp_bench.results import load_run

        calibration = calibrate_from_results(load_run(args.calibrate)[0])
    rows = fit_table(args.models.split(","), args.strategies.split(","), device_memory_gib=args.device_memory_gib,
                     seq_len=args.seq_len, batch_size=args.batch_size,
                     world_sizes=[int(n) for n in args.world_sizes.split(",")], calibration=calibration)
    for path in write_fit(rows, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
