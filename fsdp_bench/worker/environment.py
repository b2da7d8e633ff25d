"""The torch half of a run's env.json: torch, CUDA, NCCL, driver, GPUs and library versions.

python -m fsdp_bench.worker.environment OUT.json     (run once per sweep by launch.environment)
"""

from __future__ import annotations

import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from fsdp_bench.results.io import write_json_atomic
from fsdp_bench.results.records import Environment

PROBE_S = 0.25  # seconds of matmuls for the CPU rate the duration estimate uses
PROBE_N = 256  # square matrices: big enough for the BLAS kernel, small enough to fit in cache


def runnable_tasks() -> int | None:
    """How many tasks this machine's scheduler has runnable right now (Linux's `procs_running`,
    this process included), or None where /proc/stat does not say."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def measure_cpu(budget_s: float = PROBE_S, n: int = PROBE_N) -> tuple[float, float | None]:
    """Single-thread fp32 matmul GFLOP/s of this machine now (load included): a CPU rank runs
    with OMP_NUM_THREADS=1, so this is what one rank's matmuls get. Beside it, the mean number of
    runnable tasks while it ran (None off Linux): the share of a core the probe itself got, which
    the duration estimate sets against the load average (analysis.duration.Calibration)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b  # the first call picks the kernel
        count, runnable, start = 0, [], time.perf_counter()
        while (elapsed := time.perf_counter() - start) < budget_s:
            a @ b
            count += 1
            if count % 8 == 0 and (tasks := runnable_tasks()) is not None:  # every ~5-10 ms
                runnable.append(tasks)
        mean_runnable = round(sum(runnable) / len(runnable), 2) if runnable else None
        return 2 * n**3 * count / elapsed / 1e9, mean_runnable
    finally:
        torch.set_num_threads(threads)


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory so far: /proc/self/status's VmHWM (Linux), None where
    it does not say. Not getrusage's ru_maxrss, which an exec'd child inherits from the process
    it was forked from (the reader started from a 0.5 GiB pytest read 0.5 GiB before any import)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def collect_torch() -> Environment:
    start = time.perf_counter()
    import torch

    # How long `import torch` took: every rank and torchrun of every case pays it, so it scales
    # the estimate's fixed cost per case with the machine's speed and load right now.
    import_s = time.perf_counter() - start
    import_rss = peak_rss_bytes()  # before the probe's matrices
    gflops, runnable = measure_cpu()
    info: Environment = {
        "torch_import_s": round(import_s, 3),
        "torch_import_rss_bytes": import_rss,
        "cpu_matmul_gflops": round(gflops, 2),
        "cpu_probe_runnable": runnable,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": None,
        "gpu_count": 0,
        "gpu_names": [],
        "driver": None,
    }
    if torch.cuda.is_available():
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(info["gpu_count"])]
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            pass
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            info["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
        except (OSError, subprocess.TimeoutExpired):
            pass
    for name in ("transformers", "accelerate"):
        # The installed version from its metadata: importing transformers to read it costs the
        # sweep about 0.6 s before its first case (measured on the 2-core CPU machine).
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = None
    return info


if __name__ == "__main__":
    write_json_atomic(Path(sys.argv[1]), collect_torch(), shape=Environment, overwrite=True)
