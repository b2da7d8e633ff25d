"""The untimed probe steps run so that none can fail, or hang, a case whose timed steps succeeded.

A probe's exception (an OOM, torch refusing a model, a bug in a counter) becomes that probe's
null reason. A step that failed part-way is cleaned up before the next probe: its exception and
traceback dropped (they hold the step's activations), the allocator's cache given back, FSDP2's
parameters resharded and the gradients freed, so the next breakdown sees the model as a fresh
step would.

With several ranks a failure part-way through a step leaves the peers inside a collective the
failed rank will never join. So after every probe the ranks compare outcomes through the
rendezvous store (not a collective, which could pair with a peer's pending one): if any rank
failed, every rank records that probe as failed and skips the rest together. A rank that failed
part-way leaves right after writing its record; its exit closes its gloo connections, which ends
the peers' wait with an error they record as theirs. (NCCL peers wait for the process-group
timeout instead: NCCL has no such close.)
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from fsdp_bench.results.records import RankRecord

STORE_PREFIX = "fsdp_bench/probe"
AGREE_TIMEOUT = timedelta(seconds=120)


class ProbeGuard:
    def __init__(
        self,
        *,
        model,
        optimizer,
        device: torch.device,
        rank: int,
        world_size: int,
        record: RankRecord,
        fault: str | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.record = record
        self.fault = fault  # a contributor's fault kind to raise part-way through the first probe step
        self.skip_reason: str | None = None
        self.must_leave = False  # the process group cannot be trusted: no barrier, leave after the record
        self._store = _default_store() if world_size > 1 else None

    def wrap_step(self, step: Callable[..., Any]) -> Callable[..., Any]:
        """`step(on_phase)` with the fault (if any) injected after the first forward of the first call."""

        def faulty(on_phase=None):
            def phase(name: str) -> None:
                if name == "after_forward" and self.fault is not None:
                    kind, self.fault = self.fault, None
                    from fsdp_bench.worker.faults import inject

                    inject(kind, "probe_step", self.device)
                if on_phase is not None:
                    on_phase(name)

            return step(phase)

        return faulty

    def run(self, name: str, probe: Callable[[], Any]) -> tuple[Any, str | None]:
        """(probe's value, None) or (None, why it has no value); never raises an Exception."""
        if self.skip_reason is not None:
            return None, self.skip_reason
        value, reason = None, None
        try:
            value = probe()
        except Exception as exc:  # noqa: BLE001 - any probe failure is the probe's, never the case's
            reason = _describe(name, exc)
        if reason is not None:
            self._clean_up()  # out of the except block: the traceback and its tensors are gone
        reason = self._agree(name, reason)
        return (None, reason) if reason is not None else (value, None)

    def _clean_up(self) -> None:
        """Leave the model as a finished step would: grads freed, FSDP2 resharded, cache returned."""
        if "oom" in self.record:  # the CUDA OOM observer fired for the probe, not the case
            self.record["probe_oom"] = self.record.pop("oom")
        try:
            self.optimizer.zero_grad(set_to_none=True)
            from torch.distributed.fsdp import FSDPModule

            for module in self.model.modules():
                if isinstance(module, FSDPModule):
                    module.reshard()
        except Exception as exc:  # noqa: BLE001 - a model that cannot be restored skips the rest
            self.skip_reason = f"probe skipped: the model could not be restored after a failed probe ({exc})"
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        if self.world_size > 1:
            self.must_leave = True  # peers may be waiting in a collective this rank left

    def _agree(self, name: str, reason: str | None) -> str | None:
        """Every rank's outcome of probe `name`; the earliest failure's reason on every rank.

        A rank that failed does not wait (its peers may sit in a collective until it leaves): it
        reads the outcomes already reported, so a peer's earlier failure, the cause of its own
        (a closed connection), is the one it records.
        """
        if self._store is None:
            return reason
        keys = [f"{STORE_PREFIX}/{name}/{r}" for r in range(self.world_size)]
        self._store.set(keys[self.rank], f"{time.time()!r}|{reason}" if reason is not None else "")
        if reason is None:
            try:
                self._store.wait(keys, AGREE_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - a lost peer is a failed probe too
                reason = f"the ranks did not all report their {name} probe ({type(exc).__name__})"
                self.skip_reason, self.must_leave = f"probe skipped: {reason}", True
                return reason
        failures = []
        for r, key in enumerate(keys):
            if self._store.check([key]):
                value = self._store.get(key).decode()
                if value:
                    at, _, why = value.partition("|")
                    failures.append((float(at), r, why))
        if not failures:
            return None
        _, first, why = min(failures)
        self.skip_reason = f"probe skipped: rank {first}'s {name} probe failed"
        self.must_leave = True
        return why if first == self.rank else f"rank {first}: {why}"


def _describe(name: str, exc: Exception) -> str:
    kind = "OOM" if isinstance(exc, torch.OutOfMemoryError) else type(exc).__name__
    return f"{kind} in the {name} probe step: {str(exc)[:300]}"


def _default_store():
    """The rendezvous store the ranks share; None for a simulated world (one process, a fake
    group whose store holds nothing) or no group at all."""
    try:
        if dist.get_backend() == "fake":
            return None
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None
