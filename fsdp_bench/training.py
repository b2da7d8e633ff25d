"""The training step and what it is made of: optimizer construction, micro-batch accumulation,
and the parameter fingerprint that shows whether a step changed anything."""

from __future__ import annotations

from typing import Any

import torch

from fsdp_bench.case import Case


def _local_tensor(p):
    return p.to_local() if hasattr(p, "to_local") else p


def param_fingerprint(model) -> list[float]:
    """Sum and norm of every local parameter shard: changes whenever an update touches it."""
    with torch.no_grad():
        values = []
        for p in model.parameters():
            t = _local_tensor(p).detach().float()
            values.append(float(t.sum()) if t.numel() else 0.0)
            values.append(float(t.norm()) if t.numel() else 0.0)
    return values


def build_optimizer(params, case: Case):
    return torch.optim.AdamW(params, lr=case.lr, weight_decay=0.0)


def train_step(model, optimizer, batches, on_phase=None) -> Any:
    """One optimizer step over `len(batches)` micro-batches; returns the summed loss tensor.

    `on_phase(name)`, when given, is called after each forward and backward and after the
    optimizer step (the memory timeline's sampling points); None keeps the loop bare.
    """
    total = None
    scale = 1.0 / len(batches)
    for x, y in batches:
        loss = model(x, y) * scale
        if on_phase is not None:
            on_phase("after_forward")
        loss.backward()
        if on_phase is not None:
            on_phase("after_backward")
        total = loss.detach() if total is None else total + loss.detach()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if on_phase is not None:
        on_phase("after_optimizer")
    return total


def optimizer_matches_model(optimizer, model) -> bool:
    """Whether every parameter the optimizer steps is one the model trains with."""
    model_ids = {id(p) for p in model.parameters()}
    return all(id(p) in model_ids for g in optimizer.param_groups for p in g["params"])
