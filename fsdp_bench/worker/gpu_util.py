"""GPU utilization sampled through NVML while the measured steps run.

`torch.cuda.utilization` reads NVML's "percent of time a kernel was executing" over the driver's
last sample period (1/6 s to 1 s). A daemon thread polls it every `interval_s`; the thread only
reads a counter, so it does not perturb the timed steps. Off-GPU, or without the `pynvml`
(nvidia-ml-py) package, the result is null with the reason.
"""

from __future__ import annotations

import statistics
import threading
from typing import Any


class GpuUtilSampler:
    def __init__(self, device, interval_s: float = 0.1) -> None:
        self.device = device
        self.interval_s = interval_s
        self.samples: list[float] = []
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if device.type != "cuda":
            self.reason = f"device is {device.type}: GPU utilization needs a CUDA device and NVML"
            return
        import torch

        try:
            torch.cuda.utilization(device)
        except Exception as exc:  # ModuleNotFoundError (no pynvml) or an NVML error
            self.reason = f"NVML unavailable: {type(exc).__name__}: {exc}"

    def __enter__(self) -> "GpuUtilSampler":
        if self.reason is None:
            self._thread = threading.Thread(target=self._poll, name="fsdp-bench-gpu-util", daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        import torch

        while not self._stop.wait(self.interval_s):
            try:
                self.samples.append(float(torch.cuda.utilization(self.device)))
            except Exception as exc:
                self.reason = f"NVML read failed: {type(exc).__name__}: {exc}"
                return

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def result(self) -> dict[str, Any]:
        if self.reason is None and not self.samples:
            self.reason = "measured steps ended before the first NVML sample"
        if self.reason is not None:
            return {"pct_mean": None, "samples": 0, "null_reason": self.reason}
        return {"pct_mean": statistics.fmean(self.samples), "pct_min": min(self.samples),
                "samples": len(self.samples), "null_reason": None}
