"""What the worker measures around and after the timed steps, kept out of `worker.run`.

Inside the timed region only the memory timeline's allocator reads run (CUDA only). Update norms
are taken between steps, outside the timed region; FLOP counting, model-state accounting, the
tensor-level memory breakdown and profiling run on extra untimed probe steps after the measured
steps, so they never touch the step-time statistics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from fsdp_bench.case import Case
from fsdp_bench.training import local_tensor

# Host copies of the local parameters above this size are not made for update norms: the copy
# would cost more host memory than a benchmark should take (null with the reason instead).
UPDATE_NORM_MAX_BYTES = 2 * 2**30
PROFILE_STEPS = 2


class UpdateNorms:
    """L2 norm of the change of this rank's local parameters over each optimizer step.

    Ranks hold disjoint shards under FSDP (the global norm is the root of the sum of squares over
    ranks) and identical replicas under DDP; the value recorded is this rank's local norm. A model
    the optimizer does not update (optimizer built before sharding, no fix) shows exact zeros.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.params = list({id(p): p for p in model.parameters()}.values())
        nbytes = sum(local_tensor(p).numel() * local_tensor(p).element_size() for p in self.params)
        self.reason = (f"local parameters are {nbytes} bytes, above the {UPDATE_NORM_MAX_BYTES}-byte "
                       "limit for a host copy per step") if nbytes > UPDATE_NORM_MAX_BYTES else None
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
                self._before = [torch.empty(local_tensor(p).shape, dtype=local_tensor(p).dtype, device="cpu", pin_memory=pin)
                                for p in self.params]
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
        self.norms.append(sq ** 0.5)
        self._filled = False


def memtracker_refusal(model: torch.nn.Module) -> str | None:
    """Why torch's MemTracker cannot follow this model (None: it can).

    Asked before trying: MemTracker raises FSDP1's refusal from inside the forward pass, after
    FSDP1 has unsharded some parameters, and the interrupted step leaves FSDP1 unable to run
    another one.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel

    if any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
        return ("MemTracker refuses FSDP1: with use_orig_params=True its parameters are views into the "
                "flat parameter, not leaf tensors, so MemTracker cannot register its post-accumulate-grad "
                "hooks on them ('post accumulate grad hooks cannot be registered on non-leaf tensors')")
    return None


def run_probes(case: Case, model, optimizer, train_step: Callable[..., Any], *, record: dict[str, Any],
               device: torch.device, rank: int, out_dir: Path | None) -> None:
    """The untimed probe steps: FLOPs + model state, memory breakdown, then profiling if asked.

    `train_step(on_phase=None)` runs one optimizer step exactly as the timed loop does.
    """
    from fsdp_bench.flops import flops_per_token
    from fsdp_bench.memory import track_step_memory
    from fsdp_bench.model_state import expected_model_state_bytes
    from fsdp_bench.probes import count_step_flops, fold_breakdown, measure_model_state_after_step

    step: Callable[[], Any] = train_step
    flops = record["flops"]
    measured: dict[str, int] = {}
    counted = count_step_flops(lambda: measured.update(measure_model_state_after_step(step, optimizer, model)))
    tokens_per_rank_step = case.batch_size * case.grad_accum * case.seq_len
    flops["counter_per_step"] = counted
    flops["per_token_counter"] = counted / tokens_per_rank_step
    flops["per_token_formula"] = flops_per_token(seq_len=case.seq_len, **flops["formula_inputs"])
    flops["formula_over_counter"] = flops["per_token_formula"] / flops["per_token_counter"] if counted else None
    record["measured_model_state_bytes"] = measured or None
    record["expected_model_state_bytes"] = expected_model_state_bytes(
        case.strategy, n_params=record["n_params"], world_size=record["world_size"],
        param_bytes=record["param_bytes"], grad_bytes=record["param_bytes"], optimizer_bytes=2 * record["param_bytes"])

    refusal = memtracker_refusal(model)
    if refusal is None:
        try:
            tracked = track_step_memory(train_step, [model], optimizer)
        except RuntimeError as exc:  # NotImplementedError included: a model MemTracker cannot follow
            refusal = f"MemTracker failed: {type(exc).__name__}: {str(exc)[:300]}"
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
        record["memory"]["method"] = f"unavailable: {refusal}"

    if case.profile:
        from fsdp_bench.profiling import profile_steps

        trace_dir = Path(out_dir) / "tb_profile" if out_dir is not None else None
        record["profile"] = profile_steps(step, n_steps=PROFILE_STEPS, device_type=device.type, rank=rank,
                                          trace_dir=trace_dir)
