"""scripts/ci_gate.py, the workflows' gate, on golden run folders: the first run creates the
baseline, a later identical run passes, a slowed one fails naming its cases, a run with failed
cases is never stored, and --update-baseline replaces the baseline only after a pass."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.test_compare_noise import add_repeats, scale_step_times
from tests.integration.test_visualize import PROJECT_ROOT, copy_run

GATE = PROJECT_ROOT / "scripts" / "ci_gate.py"


def gate(run, baseline, *flags):
    return subprocess.run(
        [sys.executable, str(GATE), str(run), "--baseline", str(baseline), "--threshold", "5", *flags],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )


def test_first_run_creates_the_baseline_then_the_gate_passes_and_fails(tmp_path):
    baseline = tmp_path / "baselines" / "gpu-abc"
    first = copy_run("base", tmp_path / "first")
    add_repeats(first, [0.98, 1.0, 1.03])
    proc = gate(first, baseline)
    assert proc.returncode == 0 and "stored this run there" in proc.stdout, proc.stdout + proc.stderr
    assert sorted(p.name for p in (baseline / "cases").iterdir()) == sorted(p.name for p in (first / "cases").iterdir())

    same = copy_run("base", tmp_path / "same")
    add_repeats(same, [0.99, 1.0, 1.02])
    proc = gate(same, baseline)
    assert proc.returncode == 0 and "0 regression(s)" in proc.stdout, proc.stdout + proc.stderr
    assert (same / "compare.md").is_file()  # beside the run: the workflow's artifact carries it

    slowed = copy_run("base", tmp_path / "slowed")
    scale_step_times(slowed, lambda i: 1.5)
    add_repeats(slowed, [0.99, 1.0, 1.02])
    proc = gate(slowed, baseline, "--update-baseline")
    assert proc.returncode == 1 and "REGRESSION " in proc.stdout, proc.stdout + proc.stderr
    assert "replaced" not in proc.stdout  # a failing run never becomes the baseline
    assert gate(same, baseline, "--update-baseline").returncode == 0
    assert (baseline / "compare.md").is_file()  # now the baseline is `same`, with its compare


def test_a_run_with_failed_cases_is_not_stored_and_bad_input_is_one_line(tmp_path):
    run = copy_run("base", tmp_path / "run")
    proc = gate(run, tmp_path / "none", "--suite-failed")
    assert proc.returncode == 0 and "not stored" in proc.stdout and not (tmp_path / "none").exists()
    (tmp_path / "junk").mkdir()
    proc = gate(run, tmp_path / "junk")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a fsdp-bench run folder" in proc.stderr
    proc = gate(tmp_path / "missing", tmp_path / "none")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
