"""Which devices this machine has, read without importing torch or touching CUDA (collection
stays torch-free), and the device and rank count a sweep resolves to."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

NVIDIA_GPUS_DIR = Path("/proc/driver/nvidia/gpus")  # one entry per GPU the driver sees


def count_cuda_devices() -> int:
    """Visible NVIDIA GPUs, read without importing torch or touching CUDA."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    # The driver's folder answers without a process; an empty one (a sandbox that shows the
    # folder, not its GPUs) is no answer, so nvidia-smi is asked.
    found = len(list(NVIDIA_GPUS_DIR.iterdir())) if NVIDIA_GPUS_DIR.is_dir() else 0
    if found:
        return found
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def _first_gpu_field(field: str) -> str | None:
    """One nvidia-smi query field of the first visible GPU (no torch, no CUDA context), or None
    (also when CUDA_VISIBLE_DEVICES hides every GPU, which nvidia-smi itself ignores)."""
    if count_cuda_devices() == 0:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    values = [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []
    return values[0] if values else None


def visible_gpu_name() -> str | None:
    """The first visible NVIDIA GPU's name, or None."""
    return _first_gpu_field("name")


def visible_gpu_memory_bytes() -> int | None:
    """The first visible NVIDIA GPU's total memory (nvidia-smi says MiB), or None."""
    value = _first_gpu_field("memory.total")
    try:
        return int(float(value) * 2**20) if value is not None else None
    except ValueError:
        return None


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if count_cuda_devices() > 0 else "cpu"
    return device


def resolve_nproc(nproc: int | None, device: str) -> int:
    if nproc is not None:
        return nproc
    return max(1, count_cuda_devices()) if device == "cuda" else 2


def max_cpu_ranks() -> int:
    """The most gloo ranks a CPU case may have: one per core, but at least 4.

    A CPU rank is one process with one thread; more ranks than cores only time-slice, so their
    timings mean little, and each rank costs a few hundred MB of RAM for torch alone. 4 stays
    allowed on small machines because 4-rank functional checks (a 2x2 hybrid mesh) need it.
    """
    return max(4, os.cpu_count() or 1)


MEMINFO = Path("/proc/meminfo")


def available_host_bytes(meminfo: Path = MEMINFO) -> int | None:
    """The kernel's MemAvailable (what can be allocated without swapping); None when unknown.
    The host-memory guard, fit and the tuner all ask it (analysis.host_memory.host_refusal)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
