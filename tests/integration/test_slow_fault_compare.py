"""Issue #25: a pair of real sweeps whose second run is slowed on purpose
(FSDP_BENCH_FAULTS=slow@measure:0,slow@measure:1: each rank sleeps 30% of every measured step)
compares as a regression naming the slowed cases; the same pair without the fault does not.
Tiny grid: gpt_tiny, 2 gloo ranks, ddp and fsdp2, 3 repeats each (the run-to-run noise), each measuring steps until its median is within +-3% or 2 s."""

from __future__ import annotations

import csv
import subprocess
import sys

from tests.sweep_helpers import PROJECT_ROOT, child_env, pytest_cmd, run_dirs, write_sweep_project

GRID = [
    "--bench-model",
    "gpt_tiny",
    "--bench-strategies",
    "ddp,fsdp2",
    "--bench-batch-sizes",
    "2",
    "--bench-grad-accum",
    "1",
    "--bench-steps",
    "6",
    "--bench-warmup",
    "1",
    "--bench-seq-len",
    "32",
    "--bench-nproc",
    "2",
    "--bench-device",
    "cpu",
    "--bench-no-report",
    "--bench-no-probes",
    "--bench-repeats",
    "3",
    "--bench-target-ci-pct",
    "3",
    "--bench-measure-cap-s",
    "2",
]


def sweep(tmp_path, name: str, **env: str):
    results = tmp_path / name
    proc = subprocess.run(
        pytest_cmd("-q", *GRID, "--bench-results-dir", str(results)),
        cwd=tmp_path,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = run_dirs(results)
    return run


def compare(tmp_path, base, new):
    out = tmp_path / f"cmp-{new.parent.name}"
    proc = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "visualize.py"), "--compare", str(base), str(new), "--out", str(out)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = {r["case_id"]: r for r in csv.DictReader((out / "compare.csv").open())} if out.exists() else {}
    return proc, rows


def test_slowed_run_is_a_regression_naming_its_cases(tmp_path):
    write_sweep_project(tmp_path)
    base = sweep(tmp_path, "base")
    slow = sweep(tmp_path, "slow", FSDP_BENCH_FAULTS="slow@measure:0,slow@measure:1")
    proc, rows = compare(tmp_path, base, slow)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    named = {line.split()[1].rstrip(":") for line in proc.stdout.splitlines() if line.startswith("REGRESSION ")}
    assert named == set(rows) and len(named) == 2, proc.stdout
    assert {r["verdict"] for r in rows.values()} == {"regression"}
    # The slowed steps really are slower: 30% more time per step, so about 23% fewer tokens/s.
    assert all(float(r["tokens_per_s_per_device_change_pct"]) < -10 for r in rows.values()), rows
