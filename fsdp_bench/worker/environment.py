"""The torch half of a run's env.json: torch, CUDA, NCCL, driver, GPUs and library versions.

    python -m fsdp_bench.worker.environment OUT.json     (run once per sweep by launch.environment)
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from fsdp_bench.results.io import write_json_atomic


def collect_torch() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": None,
                            "gpu_count": 0, "gpu_names": [], "driver": None}
    if torch.cuda.is_available():
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(info["gpu_count"])]
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            pass
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
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
    write_json_atomic(Path(sys.argv[1]), collect_torch(), overwrite=True)
