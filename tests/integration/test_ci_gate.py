"""scripts/ci_gate.py, the workflows' gate, on golden run folders: the first run creates the
baseline, a later identical run passes, a slowed one fails naming its cases, a run with failed
cases is never stored, and --update-baseline replaces the baseline only after a pass. A run that
lost cases (missing or unreadable files, or none at all) fails and is never stored."""

from __future__ import annotations

import json
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


def _ok_ids(run):
    return sorted(p.stem for p in (run / "cases").glob("*.json") if json.loads(p.read_text())["status"] == "ok")


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_run_that_lost_cases_fails_and_never_replaces_the_baseline(tmp_path):
    """The newcomer audit: a run whose case files could not be read printed '0 case(s) in both
    runs, 3 only in base ... 0 regression(s)', exited 0, and --update-baseline stored it."""
    baseline = tmp_path / "baseline"
    assert gate(copy_run("base", tmp_path / "first"), baseline).returncode == 0
    stored = _snapshot(baseline)
    ok = _ok_ids(baseline)
    broken = copy_run("base", tmp_path / "broken")
    files = sorted((broken / "cases").glob("*.json"))
    corrupt = [p for p in files if p.stem in ok][:3]
    for path in corrupt:
        path.write_text(path.read_text()[:100])  # truncated, as a full disk leaves it
    for path in files:
        if path not in corrupt:
            path.unlink()
    proc = gate(broken, baseline, "--update-baseline")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert sorted(line.split()[1].rstrip(":") for line in lines if line.startswith("UNREADABLE ")) == [
        p.stem for p in corrupt
    ]
    missing = sorted(line.split()[1].rstrip(":") for line in lines if line.startswith("MISSING "))
    assert missing == sorted(set(ok) - {p.stem for p in corrupt})
    assert [line for line in lines if "never stored" in line and "baseline is kept" in line], proc.stdout
    assert "replaced" not in proc.stdout and _snapshot(baseline) == stored

    empty = tmp_path / "empty" / "run"
    (empty / "cases").mkdir(parents=True)
    proc = gate(empty, baseline, "--update-baseline")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert sum(line.startswith("MISSING ") for line in proc.stdout.splitlines()) == len(ok)
    assert "no case finished ok (no case files)" in proc.stdout and _snapshot(baseline) == stored


def test_one_unreadable_case_fails_the_gate_by_name(tmp_path):
    baseline = tmp_path / "baseline"
    assert gate(copy_run("base", tmp_path / "first"), baseline).returncode == 0
    run = copy_run("base", tmp_path / "new")
    victim = run / "cases" / f"{_ok_ids(run)[0]}.json"
    victim.write_text("{")
    proc = gate(run, baseline)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lost = [line for line in proc.stdout.splitlines() if line.startswith(("MISSING ", "UNREADABLE "))]
    assert lost == [f"UNREADABLE {victim.stem}: ok in the baseline; its case file cannot be read"]


def test_a_broken_or_empty_first_run_is_not_stored(tmp_path):
    broken = copy_run("base", tmp_path / "broken")
    (broken / "cases" / f"{_ok_ids(broken)[0]}.json").write_text("not json")
    proc = gate(broken, tmp_path / "b1")
    assert proc.returncode == 1 and not (tmp_path / "b1").exists(), proc.stdout + proc.stderr
    (line,) = proc.stdout.splitlines()
    assert "not stored" in line and "1 case file(s) cannot be read" in line
    empty = tmp_path / "empty"
    (empty / "cases").mkdir(parents=True)
    proc = gate(empty, tmp_path / "b2")
    assert proc.returncode == 1 and not (tmp_path / "b2").exists(), proc.stdout + proc.stderr
    assert proc.stdout.count("\n") == 1 and "no case finished ok" in proc.stdout


def test_the_gates_own_bad_arguments_are_named_as_its_own(tmp_path):
    run = copy_run("base", tmp_path / "run")
    for args, words in (
        ((run, tmp_path / "none", "--threshold", "-1"), "ci_gate.py: --threshold: -1 is not a non-negative percentage"),
        ((run, run), "ci_gate.py: --baseline: "),
        ((tmp_path / "gone", tmp_path / "none"), "gone: not a fsdp-bench run folder (the path does not exist)"),
    ):
        proc = subprocess.run(
            [sys.executable, str(GATE), str(args[0]), "--baseline", *map(str, args[1:])],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=PROJECT_ROOT,
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
        assert proc.stderr.startswith("ci_gate.py: ") and words in proc.stderr, proc.stderr
    assert not (tmp_path / "none").exists() and not (run / "compare.md").exists()
