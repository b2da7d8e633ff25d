import os
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _checkout_on_pythonpath(monkeypatch):
    """Subprocess pytest runs (pytester, sweeps) import this checkout's fsdp_bench, installed or not."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])))
