"""The training step and what it is made of: optimizer construction, micro-batch accumulation,
the case's training knobs (precision, gradient sync, clipping, fp16 scaling), and the parameter
fingerprint that shows whether a step changed anything."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from fsdp_bench.plan.case import Case
from fsdp_bench.plan.catalog import precision
from fsdp_bench.plan.catalog import strategy as catalog_strategy
from fsdp_bench.results.records import RankRecord
from fsdp_bench.worker.strategies import compute_dtype


def local_tensor(p: torch.Tensor) -> torch.Tensor:
    """This rank's part of a parameter: the local shard of a DTensor, the tensor itself otherwise."""
    return p.to_local() if hasattr(p, "to_local") else p


def param_fingerprint(model) -> list[float]:
    """Sum and norm of every local parameter shard: changes whenever an update touches it."""
    with torch.no_grad():
        values = []
        for p in model.parameters():
            t = local_tensor(p).detach().float()
            values.append(float(t.sum()) if t.numel() else 0.0)
            values.append(float(t.norm()) if t.numel() else 0.0)
    return values


def optimizer_kwargs(impl: str) -> dict[str, Any]:
    """AdamW's implementation switch: `auto` lets torch choose (foreach on CUDA, loop on CPU)."""
    return {
        "auto": {},
        "fused": {"fused": True},
        "foreach": {"foreach": True},
        "plain": {"foreach": False, "fused": False},
    }[impl]


def build_optimizer(params, case: Case):
    return torch.optim.AdamW(params, lr=case.lr, weight_decay=0.0, **optimizer_kwargs(case.optimizer_impl))


class Trainer:
    """One optimizer step per call, with the case's knobs; collects grad norms and dtypes seen."""

    def __init__(self, case: Case, model, optimizer, *, device: torch.device) -> None:
        self.case = case
        self.model = model
        self.optimizer = optimizer
        self.device = device
        self.dtype = compute_dtype(case.precision)
        # DDP (and anything not FSDP-managed) gets its low precision from autocast.
        self.autocast = self.dtype != torch.float32 and not _is_fsdp(model)
        # accelerate brings its own fp16 scaler inside its AcceleratedOptimizer (whose step() steps
        # and updates it); a second scaler around it would unscale the gradients twice.
        owned = catalog_strategy(case.strategy).owns_grad_scaler
        self.accelerate_scaler = getattr(optimizer, "scaler", None) if owned else None
        self.scaler = _grad_scaler(model, device) if precision(case.precision).grad_scaler and not owned else None
        self.grad_norms: list[float] = []
        self.output_dtype: str | None = None
        self._probe = _first_block_output_probe(model, self)

    def __call__(self, batches) -> torch.Tensor:
        return self.step(batches)

    def step(self, batches, on_phase=None) -> torch.Tensor:
        """One optimizer step over `len(batches)` micro-batches; returns the summed loss tensor.

        `on_phase(name)`, when given, is called after each forward and backward and after the
        optimizer step (the memory timeline's sampling points, the memory probe's resets);
        None keeps the loop bare.
        """
        total = None
        scale = 1.0 / len(batches)
        scaler = self.scaler or self.accelerate_scaler
        for i, (x, y) in enumerate(batches):
            # Forward and backward: DDP reads no_sync in its forward, FSDP1 in its backward hooks
            # (with the backward outside, FSDP1 reduce-scattered every micro-step: 6 of 6 calls
            # for 3 units x accumulation 2, gradients sharded between micro-steps).
            with self._sync_context(i == len(batches) - 1):
                with self._autocast():
                    loss = self.model(x, y) * scale
                if on_phase is not None:
                    on_phase("after_forward")
                (scaler.scale(loss) if scaler is not None else loss).backward()
                if on_phase is not None:
                    on_phase("after_backward")
            # Recorded in fp32: a bf16 loss sum rounds away the differences parity compares.
            total = loss.detach().float() if total is None else total + loss.detach().float()
        if self.case.grad_clip > 0:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            elif self.accelerate_scaler is not None:
                self.accelerate_scaler.unscale_(getattr(self.optimizer, "optimizer", self.optimizer))
            self.grad_norms.append(clip_grad_norm(self.model, self.case.grad_clip))
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if on_phase is not None:
            on_phase("after_optimizer")
        return total

    def _autocast(self):
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def _sync_context(self, last: bool):
        """`defer`: skip gradient reduction on all but the last micro-step (no_sync / FSDP2 flag)."""
        if self.case.grad_sync != "last":
            return contextlib.nullcontext()
        if hasattr(self.model, "no_sync"):  # DDP and FSDP1
            return contextlib.nullcontext() if last else self.model.no_sync()
        self._set_sync(last)  # FSDP2: reduce-scatter only in the last micro-step's backward
        return contextlib.nullcontext()

    def _set_sync(self, value: bool) -> None:
        if self.case.grad_sync == "last" and hasattr(self.model, "set_requires_gradient_sync"):
            self.model.set_requires_gradient_sync(value)

    def summary(self) -> RankRecord:
        """What the run used: configured param/reduce dtypes and the dtype blocks really produced."""
        if not precision(self.case.precision).low:
            param = reduce = "float32"
            mode = "full precision"
        elif self.autocast:
            param, reduce, mode = "float32", "float32", "autocast (params and gradient all-reduce stay fp32)"
        else:
            param = reduce = str(self.dtype).removeprefix("torch.")
            mode = catalog_strategy(self.case.strategy).precision_mode()
        return {
            "precision": {
                "mode": mode,
                "param_dtype": param,
                "reduce_dtype": reduce,
                "output_dtype": self.output_dtype,
                "grad_scaler": type(self.scaler).__name__ if self.scaler is not None else None,
            },
            "grad_norms": list(self.grad_norms),
        }


def _is_fsdp(model) -> bool:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return isinstance(model, (FSDP, FSDPModule))


def _grad_scaler(model, device: torch.device):
    """FSDP's grads are sharded, so inf checks must be all-reduced: ShardedGradScaler."""
    if _is_fsdp(model):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device.type)
    return torch.amp.GradScaler(device.type)


def clip_grad_norm(model, max_norm: float) -> float:
    """Clip to the norm of the *global* gradient, not of this rank's shard.

    FSDP1 shards flat parameters, so only `FSDP.clip_grad_norm_` (which all-reduces the shard
    norms) is right; FSDP2's DTensor gradients make `clip_grad_norm_` compute the global norm
    as a DTensor; DDP's gradients are already full and identical on every rank.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(model, FSDP):
        norm = model.clip_grad_norm_(max_norm)
    else:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)


def _first_block_output_probe(model, trainer: Trainer):
    from fsdp_bench.worker.models.build import block_modules

    try:
        block = block_modules(model)[0]
    except ValueError:
        return None

    def hook(_module, _inputs, output):
        out = output[0] if isinstance(output, (tuple, list)) else output
        if trainer.output_dtype is None and hasattr(out, "dtype"):
            trainer.output_dtype = str(out.dtype).removeprefix("torch.")

    return block.register_forward_hook(hook)


def optimizer_tensors_not_in_model(optimizer, model) -> dict[str, int]:
    """Observed: how many tensors the optimizer steps, and how many of them are not parameters
    the model trains with (stale pre-sharding tensors after building the optimizer too early)."""
    model_ids = {id(p) for p in model.parameters()}
    stepped = [p for g in optimizer.param_groups for p in g["params"]]
    return {"optimizer_tensors": len(stepped), "not_model_parameters": sum(id(p) not in model_ids for p in stepped)}


def optimizer_matches_model(optimizer, model) -> bool:
    """Whether every parameter the optimizer steps is one the model trains with."""
    model_ids = {id(p) for p in model.parameters()}
    return all(id(p) in model_ids for g in optimizer.param_groups for p in g["params"])
