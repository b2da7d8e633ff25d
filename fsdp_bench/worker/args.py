"""The one command line a worker-side process is started with: `--case CASE.json --out DIR`
(built by `fsdp_bench.launch.commands`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def parse_case_args(prog: str, description: str, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--case", required=True, type=Path, help="case JSON written by the runner")
    parser.add_argument("--out", required=True, type=Path, help="folder for rank-N.json")
    return parser.parse_args(argv)
