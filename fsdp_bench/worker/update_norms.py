"""How far each optimizer step moved this rank's parameters: taken between steps, outside the
timed region, from host copies made before the step."""

from __future__ import annotations

import torch

from fsdp_bench.worker.training import local_tensor

# Host copies of the local parameters above this size are not made for update norms: the copy
# would cost more host memory than a benchmark should take (null with the reason instead).
UPDATE_NORM_MAX_BYTES = 2 * 2**30


class UpdateNorms:
    """L2 norm of the change of this rank's local parameters over each optimizer step.

    Ranks hold disjoint shards under FSDP (the global norm is the root of the sum of squares over
    ranks) and identical replicas under DDP; the value recorded is this rank's local norm. A model
    the optimizer does not update (optimizer built before sharding, no fix) shows exact zeros.
    """

    def __init__(self, model: torch.nn.Module) -> None:
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
        # Host buffers allocated once and reused: a fresh allocation per step would page-fault
        # and churn RSS every step. Pinned on CUDA so the copies are plain DMA.
        self._before: list[torch.Tensor] | None = None
        self._filled = False

    def before_step(self) -> None:
        if self.reason is not None:
            return
        with torch.no_grad():
            if self._before is None:
                pin = torch.cuda.is_available() and any(local_tensor(p).is_cuda for p in self.params)
                self._before = [
                    torch.empty(local_tensor(p).shape, dtype=local_tensor(p).dtype, device="cpu", pin_memory=pin)
                    for p in self.params
                ]
            for p, b in zip(self.params, self._before):
                b.copy_(local_tensor(p).detach())
        self._filled = True

    def after_step(self) -> None:
        if self.reason is not None or not self._filled:
            return
        with torch.no_grad():
            sq = 0.0
            for p, b in zip(self.params, self._before):
                # b - p in the parameter dtype: exact for values within a factor 2 (Sterbenz),
                # which an optimizer step's small relative change always is.
                b.sub_(local_tensor(p).detach().to("cpu"))
                sq += float(torch.linalg.vector_norm(b, dtype=torch.float64)) ** 2 if b.numel() else 0.0
        self.norms.append(sq**0.5)
        self._filled = False
