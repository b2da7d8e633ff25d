"""The console scripts pyproject.toml declares point at functions that exist and answer --help."""

import importlib
import subprocess
import sys

from tests.pyproject_file import read_pyproject


def test_every_console_script_resolves_and_answers_help():
    scripts = read_pyproject()["project"]["scripts"]
    assert "fsdp-bench-fit" in scripts
    for name, target in scripts.items():
        module, attr = target.split(":")
        assert callable(getattr(importlib.import_module(module), attr)), name
        proc = subprocess.run(
            [sys.executable, "-c", f"import sys; from {module} import {attr}; sys.exit({attr}())", "--help"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0 and "usage" in proc.stdout.lower(), (name, proc.stderr[-500:])
