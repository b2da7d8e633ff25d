"""Shared set-up for tests that run real sweeps through the plugin with pytester."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SWEEP_MODULE = '''
def test_case(bench_case, bench_run):
    bench_run(bench_case)
'''

# Small enough for a 2-core CI machine, big enough to time and train.
TINY = ["--bench-model=gpt_tiny", "--bench-steps=3", "--bench-warmup=1", "--bench-seq-len=32",
        "--bench-nproc=2", "--bench-device=cpu", "--bench-timeout=240"]


def make_sweep_project(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["fsdp_bench.pytest_plugin"]')
    pytester.makepyfile(test_sweep=SWEEP_MODULE)


def only_run(results_dir: Path) -> Path:
    runs = [p for p in results_dir.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def load_results(run: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (run / "cases").glob("*.json")}
