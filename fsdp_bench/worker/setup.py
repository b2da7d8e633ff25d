"""One rank set up as its case says: device, process group, data, model, strategy and optimizer
(built before or after sharding). `build_rank` is the one place this happens, for the timed loop,
the communication trace and the scripts alike."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from fsdp_bench.plan.case import LOSS_CHUNKS, Case
from fsdp_bench.plan.catalog import optimizer_timing, precision, sharding_word
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.results.records import RankRecord
from fsdp_bench.worker.record import StageTracker


@dataclass
class Rank:
    """What one rank trains: the case, where, on what, and how."""

    case: Case
    device: torch.device
    rank: int
    world_size: int
    source: Any  # worker.data BatchSource: `batches(step)` -> the step's micro-batches
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    trainer: Any  # worker.training.Trainer

    def train_step(self, step: int = 0, on_phase=None) -> torch.Tensor:
        # The span names the batch fetch in a profiled step (the data part); unprofiled it costs
        # about a microsecond.
        with torch.profiler.record_function("fsdp_bench.data"):
            batches = self.source.batches(step)
        return self.trainer.step(batches, on_phase=on_phase)


def select_device(case: Case, local_rank: int) -> torch.device:
    if case.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("case asks for cuda but torch.cuda.is_available() is False")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def process_group_backend(device_type: str, *, offload: bool) -> str:
    """NCCL for CUDA, gloo for CPU; offloading strategies on CUDA need both, since their
    gradient clipping and optimizer step reduce host tensors."""
    if device_type != "cuda":
        return "gloo"
    return "cuda:nccl,cpu:gloo" if offload else "nccl"


def init_process_group(case: Case, device: torch.device) -> bool:
    """Join the job's process group; True when this call created it (so it must destroy it)."""
    if dist.is_initialized():
        return False
    backend = process_group_backend(device.type, offload=catalog_strategy(case.strategy).offload)
    timeout = timedelta(seconds=case.pg_timeout_s)
    if "RANK" in os.environ:
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, timeout=timeout, **kwargs)
    else:  # in-process, world size 1
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return True


def build_rank(
    case: Case,
    *,
    device: torch.device,
    rank: int,
    world_size: int,
    record: RankRecord | None = None,
    stages: StageTracker | None = None,
) -> Rank:
    """Data, model, strategy and optimizer for one rank, in the order the case says; what was
    built and how goes into `record` (a throwaway dict when None).

    The whole set-up order, step by step (the numbers recur as comments where each happens):
      1. the batches (synthetic or packed text), made before the model so memory reads apart;
      2. the model: Hugging Face flavors on the meta device, the others whole on the device;
      3. accelerate only: the model materialized, since it re-points the optimizer by data_ptr;
      4. the optimizer, when the case builds it before sharding (stale unless re-pointed);
      5. each block compiled, then wrapped for activation checkpointing (DDP, FSDP2);
      6. the strategy applied: blocks first, then the root; meta parameters materialized sharded;
      7. FSDP1 only: activation-checkpoint wrappers on its wrapped units;
      8. the optimizer after sharding, or the early one's references re-pointed;
      9. the trainer: the step with the case's precision, accumulation and clipping.
    """
    from fsdp_bench.worker.data import make_batch_source
    from fsdp_bench.worker.models.build import get_flavor
    from fsdp_bench.worker.training import Trainer

    record = {} if record is None else record
    stages = stages or StageTracker(record, case, rank)
    flavor = get_flavor(case.model)
    stages.enter("data")  # 1
    source = make_batch_source(
        flavor,
        data=case.data,
        batch_size=case.batch_size,
        seq_len=case.seq_len,
        grad_accum=case.grad_accum,
        seed=case.seed,
        rank=rank,
        world_size=world_size,
        device=device,
    )
    record["data"] = source.info
    stages.done("data")
    model, started = _build_model(case, flavor, device, record, stages)  # 2
    model, optimizer = _shard_and_build_optimizer(case, flavor, model, device, record, stages, started)  # 3-8
    return Rank(
        case=case,
        device=device,
        rank=rank,
        world_size=world_size,
        source=source,
        model=model,
        optimizer=optimizer,
        trainer=Trainer(case, model, optimizer, device=device),
    )  # 9


def _build_model(
    case: Case, flavor, device: torch.device, record: RankRecord, stages: StageTracker
) -> tuple[torch.nn.Module, dict[str, float]]:
    """The model (on meta for HF flavors) and when/at what RSS its construction started."""
    from fsdp_bench.worker.memory import rss_bytes
    from fsdp_bench.worker.models.build import build_model, count_parameters
    from fsdp_bench.worker.probes import attention_shape, count_matmul_params

    stages.enter("model")
    started = {"rss_before_bytes": rss_bytes(), "t0": time.perf_counter()}
    # Hugging Face models are built on the meta device and materialized after sharding.
    model = build_model(flavor, seed=case.seed, device=device, meta=flavor.built_on_meta)
    if case.loss == "chunked":
        model.loss_chunks = LOSS_CHUNKS
    record["n_params"] = count_parameters(model)
    first_param = next(model.parameters())
    record["dtype"] = str(first_param.dtype).removeprefix("torch.")
    record["param_bytes"] = first_param.element_size()
    # The peak-FLOPs column MFU uses: mixed precision computes in its low dtype; fp32 matmuls
    # run as TF32 on CUDA only when torch allows it.
    tf32 = device.type == "cuda" and first_param.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    row = precision(case.precision)
    low = row.dtype if row.low else None
    record["compute_dtype"] = low or ("tf32" if tf32 else record["dtype"])
    record["flops"] = {"formula_inputs": {"n_matmul_params": count_matmul_params(model), **attention_shape(model)}}
    stages.done("model")
    return model, started


def effective_sharding(model: torch.nn.Module, row) -> str:
    """The sharding the wrapped model really has, in the catalog's words: FSDP1 says it on its
    root module (it turns every sharded strategy into NO_SHARD, "replicated", at world size 1);
    other families shard as their row says."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    if isinstance(model, FullyShardedDataParallel):
        return sharding_word(model.sharding_strategy.name)
    return f"hybrid_{row.sharding}" if row.hybrid else row.sharding


def _construction_method(case: Case, flavor) -> str:
    if not flavor.built_on_meta:
        return "full model per rank"
    if catalog_strategy(case.strategy).prepares_optimizer:
        return "meta device, materialized before the optimizer and accelerate's sharding"
    return "meta device, materialized after sharding"


def _materialize_for_accelerate(model: torch.nn.Module, device: torch.device, seed: int) -> None:
    """accelerate re-points the optimizer at the sharded params by data_ptr, and every meta
    param's data_ptr is 0: the model must hold real params before the optimizer is built."""
    from fsdp_bench.worker.models.build import has_meta_params, materialize_module

    if has_meta_params(model):
        materialize_module(model, device, seed)


def _shard_and_build_optimizer(
    case: Case,
    flavor,
    model: torch.nn.Module,
    device: torch.device,
    record: RankRecord,
    stages: StageTracker,
    started: dict[str, float],
):
    """Apply the strategy, with the optimizer built before or after it as the case says."""
    from fsdp_bench.worker.memory import peak_rss_bytes, rss_bytes
    from fsdp_bench.worker.strategies import (
        apply_strategy,
        checkpoint_after_wrapping,
        prepare_blocks,
        repoint_optimizer,
        shard_context,
    )
    from fsdp_bench.worker.training import build_optimizer, optimizer_matches_model, optimizer_tensors_not_in_model

    row, timing = catalog_strategy(case.strategy), optimizer_timing(case.optimizer_timing)
    optimizer = None
    if row.prepares_optimizer:  # 3
        _materialize_for_accelerate(model, device, case.seed)
    if timing.builds_before_shard:  # 4
        stages.enter("optimizer")
        before = dict(model.named_parameters())
        optimizer = build_optimizer(model.parameters(), case)
    stages.enter("shard")
    model, blocks = prepare_blocks(model, case)  # 5
    model, optimizer = apply_strategy(model, optimizer, ctx=shard_context(case, blocks, device))  # 6
    checkpoint_after_wrapping(model, blocks, case)  # 7
    record["construction"] = {
        "method": _construction_method(case, flavor),
        "rss_before_bytes": started["rss_before_bytes"],
        "rss_after_bytes": rss_bytes(),
        "peak_rss_bytes": peak_rss_bytes(),
        "build_and_shard_s": time.perf_counter() - started["t0"],
    }
    stages.done("shard")
    record["effective_sharding"] = effective_sharding(model, row)
    if not timing.builds_before_shard:  # 8
        stages.enter("optimizer")
        optimizer = build_optimizer(model.parameters(), case)
    elif timing.repoints and not row.prepares_optimizer:  # accelerate re-points its own
        record["optimizer_params_repointed"] = repoint_optimizer(optimizer, before, model)
    stages.done("optimizer")
    record["optimizer_params_match_model"] = optimizer_matches_model(optimizer, model)
    record["optimizer_vs_model"] = optimizer_tensors_not_in_model(optimizer, model)
    return model, optimizer
