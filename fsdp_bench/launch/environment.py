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
import tempfile
from pathlib import Path

from fsdp_bench.launch.commands import environment_command
from fsdp_bench.launch.processes import build_env
from fsdp_bench.plan.faults import ENV_VAR as FAULTS_ENV
from fsdp_bench.results.io import read_json, utc_now, write_json_atomic
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.records import Environment
from fsdp_bench.results.schema import SCHEMA_VERSION


def git_info(cwd: Path) -> Environment:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_sha": sha, "git_dirty": None if status is None else bool(status)}


def collect_host() -> Environment:
    return {
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "utc_time": utc_now(),
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        # A run slowed or broken on purpose must say so wherever its numbers are read.
        "planted_faults": os.environ.get(FAULTS_ENV) or None,
    }


class TorchEnvironment:
    """The torch half of env.json, read by `python -m fsdp_bench.worker.environment` started as
    soon as the session is configured: its `import torch` (1-2 s on a CPU) then runs while
    pytest collects, instead of before the first case. `result()` waits for it (once; later
    calls return the same facts); `cancel()` stops it (a session that never runs a case).

    The reader runs with the interpreter and environment the cases' workers get, so its facts
    also say whether a case could import torch (and see a GPU) at all: `interpreter_problem`."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        fd, name = tempfile.mkstemp(prefix="fsdp-bench-env-", suffix=".json")
        os.close(fd)
        self.path = Path(name)
        self.python = environment_command(self.path)[0]
        self._result: Environment | None = None
        self.proc = subprocess.Popen(
            environment_command(self.path),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )

    def result(self, timeout_s: float = 120.0) -> Environment:
        """The torch facts, or {"torch_info_error": why} (why ends with the reader's last
        error line, e.g. "ModuleNotFoundError: No module named 'torch'")."""
        if self._result is None:
            self._result = self._read(timeout_s)
        return self._result

    def _read(self, timeout_s: float) -> Environment:
        try:
            _, err = self.proc.communicate(timeout=timeout_s)
            if self.proc.returncode != 0:
                lines = (err or b"").decode(errors="replace").strip().splitlines()
                last = lines[-1] if lines else f"exit status {self.proc.returncode}"
                return {
                    "torch_info_error": f"{self.python} -m fsdp_bench.worker.environment failed: {last}",
                    "torch_reader_returncode": self.proc.returncode,
                }
            data = read_json(self.path)
            return data if isinstance(data, dict) else {"torch_info_error": "not a JSON object"}
        except (subprocess.SubprocessError, OSError, ValueError) as exc:
            return {"torch_info_error": f"{type(exc).__name__}: {exc}"}
        finally:
            self.cancel()

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.path.unlink(missing_ok=True)


def torch_import_bytes() -> int | None:
    """What `import torch` costs a worker's interpreter (its peak RSS, read by the env.json reader
    in a subprocess: 1-2 s on a CPU); None when it could not say. The reader runs in the workers'
    environment, as the one the sweep's session starts (and reads the same fact from) does."""
    return TorchEnvironment(env=build_env()).result().get("torch_import_rss_bytes")


# How each torch minor release has been tested (README "Tested versions"; tests/unit/test_ci_versions.py
# holds it to .ci/run's pins and pyproject.toml's range): "ci" at every landing, on a clean clone;
# "once": the whole suite passed once on the 2-core CPU machine (its failures fixed and rerun), not
# repeated since. A release not listed was never tested, and pyproject.toml's range stops before it.
TORCH_TESTED = {
    "2.11": "ci",  # the GPU machine's set: the `versions` tests
    "2.13": "ci",  # the whole suite
    "2.14": "once",  # 2.14.1+cu130, 2026-11-27: 1,245 passed; the 8 host-memory failures it showed were fixed
    # 2.15.0+cu132, 2026-11-27 (7567df6): 1,262 passed, 2 failed: a test of this line's old wording
    # and the real gloo rank's peak test, both passing at c6bb4e9 (FSDP2 frees the head's gradient earlier)
    "2.15": "once",
}
_TESTED_WORDS = {"once": "passed the whole test suite once, on CPU"}


def torch_version_line(version: str | None) -> str | None:
    """One line before the first case when the workers' torch is not a release CI tests: the
    worker reads torch internals (FSDP's, MemTracker, the FLOP counter), which move between
    releases; None for a CI-tested one (or when the reader could not say)."""
    if not version:
        return None
    minor = ".".join(version.split("+")[0].split(".")[:2])
    how = TORCH_TESTED.get(minor)
    if how == "ci":
        return None
    ci = " and ".join(v for v, h in TORCH_TESTED.items() if h == "ci")
    said = _TESTED_WORDS.get(how, "was never tested with fsdp-bench")
    return (
        f"fsdp-bench: torch {version} {said}; CI tests {ci}. The worker reads torch internals, so compare "
        "a case's figures with a tested torch before relying on them (README 'Tested versions')"
    )


def interpreter_problem(facts: Environment, device: str, python: str) -> str | None:
    """The one line that stops a sweep whose cases could not run at all, else None: the workers'
    interpreter cannot import torch (a pytest from outside the virtual environment), or a CUDA
    sweep's torch sees no GPU (a CPU-only torch wheel on a GPU node)."""
    if facts.get("torch_reader_returncode"):  # it ran and failed (a reader that hung is only a note)
        error = facts["torch_info_error"].partition("failed: ")[2] or facts["torch_info_error"]
        return (
            f"fsdp-bench: the cases would run with {python}, which cannot import torch ({error}); "
            "run pytest from the virtual environment that has torch (e.g. .venv/bin/pytest), "
            "or install torch into that interpreter"
        )
    if device == "cuda" and "torch" in facts and not facts.get("gpu_count"):
        build = f"CUDA {facts['cuda']}" if facts.get("cuda") else "a CPU-only build"
        return (
            f"fsdp-bench: --bench-device cuda, but torch {facts.get('torch')} ({build}) in {python} sees no GPU; "
            "install a CUDA build of torch (see the README's 'On a GPU node') or use --bench-device cpu"
        )
    return None


def write_environment(run_dir: Path, project_root: Path, torch_env: TorchEnvironment) -> Environment:
    """Write `run_dir/env.json`; the torch half comes from a subprocess so this process stays torch-free."""
    data: Environment = {"schema_version": SCHEMA_VERSION, **collect_host(), **git_info(project_root)}
    data.update(torch_env.result())
    write_json_atomic(RunLayout(Path(run_dir)).env_file, data, shape=Environment)
    return data
