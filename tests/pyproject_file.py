"""pyproject.toml as a dict on every Python the project supports: tomllib from 3.11, and before it
tomli, which pytest itself depends on there."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def read_pyproject() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())
