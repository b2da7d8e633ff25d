"""What the terminal says about the run itself, on real tiny sweeps (newcomer audit): a sweep
stopped by SIGTERM says it is partial before its recommendation and ends with the command that
finishes it, the command the user ran (its -k kept: resuming without it grew a 3-case plan to
23); the resume labels the case it keeps and counts only this session's time; a selection whose
every case is skipped says so in one line."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time

import pytest

from tests.sweep_helpers import (
    SMALL,
    case_results,
    child_env,
    pytest_cmd,
    run_dirs,
    start_sweep,
    wait_for,
    write_sweep_project,
)

pytestmark = pytest.mark.slow

# batch 3 is in the grid but not the selection: a resume without the -k would run it
OPTIONS = [o for o in SMALL if o != "--bench-no-report"] + ["--bench-batch-sizes", "1,2,3", "--bench-kill-grace", "10"]
SELECTION = ["-k", "bs1 or bs2"]
IDS = [f"ddp-gpt_tiny-ws2-bs{bs}-ga1-opt_after-sl32" for bs in (1, 2)]


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The sweep of bs1 and bs2, SIGTERMed while bs2 hangs in its measured steps (a fault
    injected in this run only), after bs1 finished."""
    root = tmp_path_factory.mktemp("partial")
    write_sweep_project(root)
    results = root / "results"
    proc = start_sweep(
        root, *SELECTION, *OPTIONS, "--bench-results-dir", str(results), FSDP_BENCH_FAULTS="hang@measure:0/-bs2-"
    )
    try:
        wait_for(lambda: len(run_dirs(results)) == 1, 60, "the run folder")
        (run,) = run_dirs(results)
        wait_for(lambda: (run / "cases" / IDS[1]).is_dir() and IDS[0] in case_results(run), 240, "bs2 to start")
        time.sleep(2)  # into bs2's (hung) steps
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return root, run, proc.returncode, out


def test_a_stopped_sweep_says_it_is_partial_and_ends_with_its_resume_command(stopped):
    _, run, code, out = stopped
    assert code == 2, out[-3000:]
    lines = _lines(out)
    partial = next(i for i, line in enumerate(lines) if line.startswith("partial run: "))
    assert lines[partial] == (
        "partial run: 1 of 2 case(s) ran, interrupted; the recommendation below is from those only"
    ), out[-3000:]
    assert lines[partial + 1].startswith("Recommendation (gpt_tiny): ddp batch 1 x accum 1"), out[-3000:]
    assert lines[-2] == f"results: {run}  (report: {run / 'report.md'})"
    resume = lines[-1]  # the last line: where the user looks after a stop
    prefix = "to finish this run (ok cases are kept, the rest re-run): "
    assert resume.startswith(prefix), out[-3000:]
    words = shlex.split(resume.removeprefix(prefix))
    assert words[:3] == ["python", "-m", "pytest"] and words[-2:] == ["--bench-resume", str(run)]
    assert words[3:-2] == ["-p", "no:cacheprovider", "test_sweep.py", *SELECTION, *OPTIONS, "--bench-results-dir"] + [
        str(run.parent)
    ]
    assert "[same --bench-* options]" not in out


@pytest.fixture(scope="module")
def resumed(stopped):
    """The printed command, run as printed (this interpreter for its `python`)."""
    root, run, _, out = stopped
    words = shlex.split(_lines(out)[-1].split("re-run): ", 1)[1])
    proc = subprocess.run(
        [sys.executable, *words[1:]], cwd=root, env=child_env(), capture_output=True, text=True, timeout=400
    )
    return run, proc


def test_the_resume_keeps_the_selection_and_labels_the_kept_case(resumed):
    run, proc = resumed
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-2000:]
    assert sorted(case_results(run)) == IDS  # the -k came along: no bs3
    kept = next(line for line in out.splitlines() if line.startswith("[1/2] "))
    assert kept.startswith(f"[1/2] {IDS[0]}  kept from the resumed run (ok)  step "), kept
    assert "elapsed" not in kept and "ETA" not in kept, kept
    ran = next(line for line in out.splitlines() if line.startswith("[2/2] "))
    assert ran.startswith(f"[2/2] {IDS[1]}  ok  step ") and "elapsed " in ran, ran
    assert "cases: 2 ok (1 kept from the resumed run)" in out
    (spent,) = [line for line in out.splitlines() if line.startswith("time in cases: ")]
    assert spent.endswith("; 1 case(s) kept from the resumed run not counted"), spent
    lines = _lines(out)
    assert lines[-1] == f"results: {run}  (report: {run / 'report.md'})", out[-2000:]
    assert not any(line.startswith(("partial run", "to finish this run")) for line in lines)


def test_a_selection_whose_every_case_is_skipped_says_so_in_one_line(tmp_path):
    write_sweep_project(tmp_path)
    options = [*OPTIONS, "--bench-strategies", "fsdp2_offload,fsdp1_offload", "--bench-results-dir", "results"]
    proc = subprocess.run(
        pytest_cmd("test_sweep.py", "-k", "bs1", *options),
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    last = _lines(proc.stdout)[-1]
    assert last.startswith("fsdp-bench: no case ran: all 2 selected cases were skipped before launch: "), last
    assert "fsdp2_offload needs CUDA" in last and "fsdp1_offload needs CUDA" in last, last
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())
