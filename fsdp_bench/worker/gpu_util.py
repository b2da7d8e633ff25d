"""NVML sampled utilization while the measured steps run: a sampled figure, not a busy measure.

The GPU busy share of a step comes from the profiler's device timeline (analysis.busy,
`gpu_busy_pct`). This one read 8.8% on the H100 GPT-2 bs4 case whose kernels cover 15.7% of the
median step (tests/unit/test_gpu_busy.py), and 3-14% on GPT-2 cases at up to 27% MFU, which no GPU
busy under 27% of the step can reach; it is kept, labelled "NVML sampled", as the figure
nvidia-smi users know.

`torch.cuda.utilization` reads NVML's "percent of time a kernel was executing" over the driver's
last sample period (1/6 s to 1 s). A daemon thread polls it every `interval_s` and keeps a reading
only while a timed step runs (`resume()` / `pause()` around each): the host-side bookkeeping
between steps (update norms, loss reads) would otherwise read as idle GPU. The thread only reads a
counter, so it does not perturb the timed steps. Off-GPU, or without the `pynvml`
(nvidia-ml-py) package, the result is null with the reason.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from typing import Any

from fsdp_bench.results.readings import GpuUtilReading


class GpuUtilSampler:
    def __init__(self, device, interval_s: float = 0.1, read: Callable[[], float] | None = None) -> None:
        """`read` replaces the NVML read (tests); None reads `torch.cuda.utilization(device)`."""
        self.device = device
        self.interval_s = interval_s
        self.samples: list[float] = []
        self.reason: str | None = None
        self._stop = threading.Event()
        self._active = threading.Event()
        self._thread: threading.Thread | None = None
        self._read = read
        if read is not None:
            return
        if device.type != "cuda":
            self.reason = f"device is {device.type}: NVML sampled utilization needs a CUDA device and NVML"
            return
        import torch

        try:
            torch.cuda.utilization(device)
        except Exception as exc:  # ModuleNotFoundError (no pynvml) or an NVML error
            self.reason = f"NVML unavailable: {type(exc).__name__}: {exc}"
            return
        self._read = lambda: float(torch.cuda.utilization(device))

    def __enter__(self) -> GpuUtilSampler:
        if self.reason is None:
            self._thread = threading.Thread(target=self._poll, name="fsdp-bench-gpu-util", daemon=True)
            self._thread.start()
        return self

    def resume(self) -> None:
        """A timed step starts: readings from now on count."""
        self._active.set()

    def pause(self) -> None:
        """The timed step ended: nothing is read until the next one."""
        self._active.clear()

    def _poll(self) -> None:
        while not self._stop.is_set():
            if not self._active.wait(timeout=self.interval_s):
                continue
            try:
                value = float(self._read())
            except Exception as exc:
                self.reason = f"NVML read failed: {type(exc).__name__}: {exc}"
                return
            if self._active.is_set():  # the step may have ended during the read
                self.samples.append(value)
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def result(self) -> GpuUtilReading:
        if self.reason is None and not self.samples:
            self.reason = "measured steps ended before the first NVML sample"
        if self.reason is not None:
            return {"pct_mean": None, "samples": 0, "null_reason": self.reason}
        return {
            "pct_mean": statistics.fmean(self.samples),
            "pct_min": min(self.samples),
            "samples": len(self.samples),
            "null_reason": None,
        }
