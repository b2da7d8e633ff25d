"""Where a run came from: machine, devices and library versions (pytest-benchmark's machine_info).

The parent never imports torch, so the torch side is read by a short subprocess,
`python -m fsdp_bench.worker.environment OUT.json`, run once per sweep.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from fsdp_bench.results.schema import SCHEMA_VERSION
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.io import read_json, utc_now, write_json_atomic


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


def write_environment(run_dir: Path, project_root: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Write `run_dir/env.json`; the torch half comes from a subprocess so this process stays torch-free."""
    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION, **collect_host(), **git_info(project_root)}
    layout = RunLayout(Path(run_dir))
    part = layout.torch_env_file
    try:
        subprocess.run([sys.executable, "-m", "fsdp_bench.worker.environment", str(part)], env=env,
                       capture_output=True, timeout=120, check=True)
        data.update(read_json(part))
        part.unlink()
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        data["torch_info_error"] = f"{type(exc).__name__}: {exc}"
    write_json_atomic(layout.env_file, data)
    return data
