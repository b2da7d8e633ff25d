"""Where a run came from: machine, devices and library versions (pytest-benchmark's machine_info).

The parent never imports torch, so the torch side is read by a short subprocess,
`python -m fsdp_bench.environment OUT.json`, run once per sweep.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from fsdp_bench.results import SCHEMA_VERSION, read_json, utc_now, write_json_atomic


def git_info(cwd: Path) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_sha": sha, "git_dirty": None if status is None else bool(status)}


def collect_host() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "utc_time": utc_now(),
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }


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
        try:
            info[name] = __import__(name).__version__
        except ImportError:
            info[name] = None
    return info


def write_environment(run_dir: Path, project_root: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Write `run_dir/env.json`; the torch half comes from a subprocess so this process stays torch-free."""
    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION, **collect_host(), **git_info(project_root)}
    part = Path(run_dir) / ".env-torch.json"
    try:
        subprocess.run([sys.executable, "-m", "fsdp_bench.environment", str(part)], env=env,
                       capture_output=True, timeout=120, check=True)
        data.update(read_json(part))
        part.unlink()
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        data["torch_info_error"] = f"{type(exc).__name__}: {exc}"
    write_json_atomic(Path(run_dir) / "env.json", data)
    return data


if __name__ == "__main__":
    write_json_atomic(Path(sys.argv[1]), collect_torch(), overwrite=True)
