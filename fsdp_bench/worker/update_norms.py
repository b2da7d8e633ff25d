"""How far each optimizer step moved this rank's parameters: taken between steps, outside the
timed region, from host copies made before the step."""

from __future__ import annotations

from collections.abc import Callable

import torch

from fsdp_bench.plan.case import UPDATE_NORM_MAX_BYTES
from fsdp_bench.worker.training import local_tensor

# Squares summed in float64 a chunk at a time: float32 accumulation was 1% off over 117M
# elements, and a float64 copy of every parameter at once cost 0.3-0.6 s per step on an H100's
# host for GPT-2 124M (five times the step), plus the copy's page faults.
_CHUNK = 1 << 20


def _squared_norm(t: torch.Tensor) -> float:
    flat = t.reshape(-1)
    return sum(float(torch.linalg.vector_norm(c, dtype=torch.float64)) ** 2 for c in flat.split(_CHUNK))


class UpdateNorms:
    """L2 norm of the change of this rank's local parameters over each optimizer step.

    Ranks hold disjoint shards under FSDP (the global norm is the root of the sum of squares over
    ranks) and identical replicas under DDP; the value recorded is this rank's local norm. A model
    the optimizer does not update (optimizer built before sharding, no fix) shows exact zeros.
    """

    def __init__(self, model: torch.nn.Module, *, take: Callable[[int], bool] = lambda step: True) -> None:
        self.take = take  # which steps get a norm (each costs a host copy of the parameters)
        self.params = list({id(p): p for p in model.parameters()}.values())
        nbytes = sum(local_tensor(p).numel() * local_tensor(p).element_size() for p in self.params)
        self.reason = (
            (
                f"local parameters are {nbytes} bytes, above the {UPDATE_NORM_MAX_BYTES}-byte "
                "limit for a host copy per step"
            )
            if nbytes > UPDATE_NORM_MAX_BYTES
            else None
        )
        self.norms: list[float] = []
        self.steps: list[int] = []  # the step index of each norm
        self._before: list[torch.Tensor] | None = None  # before the step
        self._after: list[torch.Tensor] | None = None  # after it (parameters on a GPU only)
        self._filled = False

    def before_step(self, step: int = 0) -> None:
        if self.reason is not None or not self.take(step):
            return
        with torch.no_grad():
            if self._before is None:
                self._before = self._host_buffers()
            for p, b in zip(self.params, self._before):
                b.copy_(local_tensor(p).detach())
        self._filled = True

    def after_step(self, step: int = 0) -> None:
        if self.reason is not None or not self._filled:
            return
        on_device = any(local_tensor(p).device.type != "cpu" for p in self.params)
        if on_device and self._after is None:
            self._after = self._host_buffers()
        with torch.no_grad():
            sq = 0.0
            for k, (p, b) in enumerate(zip(self.params, self._before)):
                now = local_tensor(p).detach()
                if on_device:  # into a reused pinned buffer: a fresh host tensor per step page-faults
                    now = self._after[k].copy_(now)
                # b - p in the parameter dtype: exact for values within a factor 2 (Sterbenz),
                # which an optimizer step's small relative change always is.
                b.sub_(now)
                sq += _squared_norm(b)
        self.norms.append(sq**0.5)
        self.steps.append(step)
        self._filled = False

    def _host_buffers(self) -> list[torch.Tensor]:
        """Host buffers allocated once and reused, pinned on CUDA so the copies are plain DMA."""
        pin = torch.cuda.is_available() and any(local_tensor(p).is_cuda for p in self.params)
        return [
            torch.empty(local_tensor(p).shape, dtype=local_tensor(p).dtype, device="cpu", pin_memory=pin)
            for p in self.params
        ]
