"""How many bytes each strategy moves per optimizer step, and how long that takes on a link.

Pure functions (no torch), unit-tested and checked against the collectives a real run's profiler
trace records (tests/integration/test_simulation.py).

Volumes are *logical* collective sizes, the way NCCL's tests count them: an all-gather counts its
output (the unsharded tensor), a reduce-scatter its input (the unsharded gradient), an all-reduce
its tensor. Time on a link uses the ring algorithm's bus traffic, (n-1)/n of the size for
all-gather and reduce-scatter and 2(n-1)/n for all-reduce, over the slowest link the group
crosses (the inter-node link once a group spans nodes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from fsdp_bench.analysis.hf_units import hf_layer_ready_order, hf_shapes
from fsdp_bench.plan.catalog import STRATEGIES
from fsdp_bench.plan.flavors import ModelFlavor, load_config_dict

Shape = tuple[int, ...]

# Nominal per-direction bandwidth per GPU in GB/s (1e9 bytes/s). Sources: NVIDIA H100 datasheet
# (NVLink 4: 900 GB/s bidirectional), A100 (NVLink 3: 600), PCIe 5.0 / 4.0 x16 (64 / 32 GB/s per
# direction), InfiniBand NDR 400 Gb/s and HDR 200 Gb/s per NIC (one NIC per GPU), 100 GbE.
LINK_GBPS: dict[str, float] = {
    "nvlink4": 450.0,
    "nvlink3": 300.0,
    "pcie5": 64.0,
    "pcie4": 32.0,
    "ib_ndr": 50.0,
    "ib_hdr": 25.0,
    "eth_100g": 12.5,
}
# Fraction of nominal bandwidth a large collective reaches (NCCL busbw on H100 NVLink is ~80%).
DEFAULT_EFFICIENCY = 0.8
GPUS_PER_NODE = 8
# (intra-node link, inter-node link) pairs every simulated case is priced on.
CLUSTERS: dict[str, tuple[str, str]] = {
    "nvlink4_ib_ndr": ("nvlink4", "ib_ndr"),
    "pcie5_ib_ndr": ("pcie5", "ib_ndr"),
    "pcie4_eth_100g": ("pcie4", "eth_100g"),
}


@dataclass(frozen=True)
class Unit:
    """One communication unit: the parameters FSDP gathers together (a block, or the root's own).
    `ready`: indices into `shapes` in the order backward makes their gradients ready (DDP's rebuilt
    buckets follow it); empty: the reverse of `shapes`, which is exact up to swaps of equal sizes
    for the built-in flavors."""

    name: str
    shapes: tuple[Shape, ...]
    is_root: bool = False
    ready: tuple[int, ...] = ()

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for s in self.shapes)


def _linear_units(c) -> list[Unit]:
    d = c["dim"]
    return [Unit("root", (), True)] + [Unit(f"blocks.{i}", ((d, d), (d,))) for i in range(c["n_layers"])]


def _gpt_units(c) -> list[Unit]:
    d, v, t = c["n_embd"], c["vocab_size"], c["block_size"]
    block = ((d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,))
    root = Unit("root", ((v, d), (t, d), (d,), (d,)), True)
    return [root] + [Unit(f"blocks.{i}", block) for i in range(c["n_layer"])]


def _hf_units(flavor: ModelFlavor) -> list[Unit]:
    config = load_config_dict(flavor)
    root_shapes, layers = hf_shapes(config)  # ValueError for a model_type without a shape model
    ready = hf_layer_ready_order(config)
    return [Unit("root", root_shapes, True)] + [Unit(f"layers.{i}", s, ready=ready) for i, s in enumerate(layers)]


# One parameter-shape model per catalog shape (plan.architectures; checked against the modules).
_UNITS = {
    "linear": lambda f: _linear_units(f.config),
    "nanogpt": lambda f: _gpt_units(f.config),
    "llama_style": _hf_units,
    "gpt2": _hf_units,
}


def model_units(flavor: ModelFlavor) -> list[Unit]:
    """The units of a flavor, parameters in registration order, root first; tied weights once
    (the GPT head shares the token embedding). Hugging Face flavors: shapes from the config
    (analysis.hf_units). Checked against the real modules."""
    return _UNITS[flavor.architecture.shape](flavor)


def fsdp2_padded_numel(unit: Unit, shard: int) -> int:
    """FSDP2 shards every parameter on dim 0, padded to a multiple of the group size."""
    return sum(shard * math.ceil(s[0] / shard) * math.prod(s[1:]) for s in unit.shapes)


def fsdp1_flat_numel(unit: Unit, shard: int, dtype_bytes: int = 4) -> int:
    """FSDP1's flat parameter: each original parameter starts 16-byte aligned
    (use_orig_params=True), and the whole is padded to a multiple of the group size."""
    align = 16 // dtype_bytes
    total = 0
    for s in unit.shapes:
        total += (-total) % align
        total += math.prod(s)
    return shard * math.ceil(total / shard) if total else 0


def padded_numel(layout: str, unit: Unit, shard: int, dtype_bytes: int = 4) -> int:
    """Elements a unit occupies once cut the way a catalog layout cuts it (`Strategy.layout`)."""
    if layout == "fsdp2_dim0":
        return fsdp2_padded_numel(unit, shard)
    if layout == "fsdp1_flat":
        return fsdp1_flat_numel(unit, shard, dtype_bytes)
    return unit.numel


@dataclass(frozen=True)
class CommVolume:
    """Bytes per optimizer step on one rank, by collective, with each collective's group size."""

    all_gather_bytes: int = 0
    reduce_scatter_bytes: int = 0
    all_reduce_bytes: int = 0
    shard_group: int = 1  # ranks in the all-gather / reduce-scatter group
    all_reduce_group: int = 1  # ranks in the all-reduce group
    largest_unit_bytes: int = 0  # the biggest single collective: what overlap cannot hide

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def comm_volume(
    strategy: str,
    units: Sequence[Unit],
    *,
    world_size: int,
    grad_accum: int = 1,
    grad_sync: str = "every",
    mesh: tuple[int, int] | None = None,
    dtype_bytes: int = 4,
) -> CommVolume:
    """Per-optimizer-step collective volume of one rank.

    With `grad_sync` "every" each micro-step synchronizes gradients; with "last" (no_sync, FSDP2's
    set_requires_gradient_sync) only the last one reduces them, so the reductions count once per
    step while the gathers, which forward and backward need each micro-step, still count per micro-step.
    FSDP gathers each unit in forward and, when it reshards after forward, again in backward;
    FSDP1 keeps the root unit unsharded between forward and backward, FSDP2 (torch 2.13)
    regathers it too, as the profiler trace shows. Each unit's gradient is reduce-scattered once,
    and hybrid strategies then all-reduce that gradient shard across the replicas. Offloading
    strategies run the same collectives (their host-device copies are not counted here), and
    accelerate's FSDP2 is FSDP2: the catalog row's traits decide, never the name.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"no communication model for strategy {strategy!r}: not in the catalog")
    row = STRATEGIES[strategy]
    reductions = 1 if grad_sync == "last" else grad_accum
    if not row.shards_parameters:
        numel = sum(padded_numel(row.layout, u, 1, dtype_bytes) for u in units)
        biggest = max((u.numel for u in units), default=0)
        return CommVolume(
            all_reduce_bytes=reductions * numel * dtype_bytes,
            all_reduce_group=world_size,
            largest_unit_bytes=biggest * dtype_bytes,
        )
    reshard = row.reshard_after_forward
    replicate, shard = mesh if row.hybrid and mesh else (1, world_size)
    padded = [padded_numel(row.layout, u, shard, dtype_bytes) for u in units]
    regathered = sum(p for u, p in zip(units, padded) if row.layout == "fsdp2_dim0" or not u.is_root)
    gathered = sum(padded) + (regathered if reshard else 0)
    scattered = sum(padded)
    reduced = sum(p // shard for p in padded) if replicate > 1 else 0
    return CommVolume(
        all_gather_bytes=grad_accum * gathered * dtype_bytes,
        reduce_scatter_bytes=reductions * scattered * dtype_bytes,
        all_reduce_bytes=reductions * reduced * dtype_bytes,
        shard_group=shard,
        all_reduce_group=replicate if replicate > 1 else 1,
        largest_unit_bytes=max(padded, default=0) * dtype_bytes,
    )


def _link_bytes_per_s(
    group: int, *, spans_nodes: bool, intra: str, inter: str, links: Mapping[str, float], efficiency: float
) -> float:
    return links[inter if spans_nodes else intra] * 1e9 * efficiency


def comm_time_s(
    volume: CommVolume,
    *,
    intra: str = "nvlink4",
    inter: str = "ib_ndr",
    gpus_per_node: int = GPUS_PER_NODE,
    links: Mapping[str, float] = LINK_GBPS,
    efficiency: float = DEFAULT_EFFICIENCY,
    replicas_across_nodes: bool = True,
) -> float:
    """Ring-algorithm time of one step's collectives. A group larger than a node crosses the
    inter-node link; a hybrid all-reduce group (one rank per replica) crosses it whenever the
    replicas sit on different nodes."""

    def ring(group: int) -> float:
        return (group - 1) / group if group > 1 else 0.0

    shard_bw = _link_bytes_per_s(
        volume.shard_group,
        spans_nodes=volume.shard_group > gpus_per_node,
        intra=intra,
        inter=inter,
        links=links,
        efficiency=efficiency,
    )
    ar_spans = volume.all_reduce_group > gpus_per_node or (
        replicas_across_nodes and volume.shard_group > 1 and volume.all_reduce_group > 1
    )
    ar_bw = _link_bytes_per_s(
        volume.all_reduce_group, spans_nodes=ar_spans, intra=intra, inter=inter, links=links, efficiency=efficiency
    )
    t = (volume.all_gather_bytes + volume.reduce_scatter_bytes) * ring(volume.shard_group) / shard_bw
    return t + 2 * volume.all_reduce_bytes * ring(volume.all_reduce_group) / ar_bw


def predict_step_time_s(compute_s: float, volume: CommVolume, **link_kwargs) -> dict[str, float]:
    """Step time without overlap (compute then all communication) and with overlap (hidden
    behind compute, except the first gather and last reduction of the largest unit, which no
    schedule can hide)."""
    comm = comm_time_s(volume, **link_kwargs)
    total = volume.all_gather_bytes + volume.reduce_scatter_bytes + volume.all_reduce_bytes
    exposed = comm * min(1.0, 2 * volume.largest_unit_bytes / total) if total else 0.0
    return {"comm_s": comm, "no_overlap_s": compute_s + comm, "overlap_s": max(compute_s, comm - exposed) + exposed}


def parse_link_overrides(text: str) -> dict[str, float]:
    """ "nvlink4=370,ib_ndr=45" -> a link table with those GB/s values replaced or added."""
    links = dict(LINK_GBPS)
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            gbps = float(value)
        except ValueError:
            gbps = -1.0
        if not sep or not name or gbps <= 0:
            raise ValueError(f"link bandwidth {item!r}: expected NAME=GB_PER_S, e.g. nvlink4=370")
        links[name.strip()] = gbps
    return links


def count_trace_bytes(
    events: Sequence[tuple[str, Sequence[Sequence[int]]]], *, shard_group: int, dtype_bytes: int = 4
) -> dict[str, int]:
    """Collective bytes from profiler events (name, input shapes), counted like `comm_volume`.

    c10d's tensor ops record their shapes: `_allgather_base_` (output, input) and
    `_reduce_scatter_base_` (output, input). `allreduce_` takes a tensor list whose shapes the
    profiler leaves empty, so all-reduces are read from the backend's own events
    (`gloo:all_reduce` / `nccl:all_reduce`); gloo implements a reduce-scatter as an all-reduce
    of its input, so those are taken out again. FSDP1 on gloo gathers through the list form
    `allgather_` (no shapes either): there the backend's `gloo:all_gather` input (one shard)
    times the shard group counts.
    """
    ag = rs = backend_ar = backend_ag = 0
    for name, shapes in events:
        if name == "c10d::_allgather_base_" and shapes and shapes[0]:
            ag += math.prod(shapes[0])
        elif name == "gloo:all_gather" and shapes and shapes[0]:
            backend_ag += math.prod(shapes[0]) * shard_group
        elif name == "c10d::_reduce_scatter_base_" and len(shapes) > 1 and shapes[1]:
            rs += math.prod(shapes[1])
        elif name in ("gloo:all_reduce", "nccl:all_reduce") and shapes and shapes[0]:
            backend_ar += math.prod(shapes[0])
    gloo = any(name.startswith("gloo:") for name, _ in events)
    ar = backend_ar - (rs if gloo else 0)
    ag = ag or backend_ag
    return {
        "all_gather_bytes": ag * dtype_bytes,
        "reduce_scatter_bytes": rs * dtype_bytes,
        "all_reduce_bytes": ar * dtype_bytes,
    }
