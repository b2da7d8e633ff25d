"""Issue #25, on a real sweep (gpt_tiny, 2 gloo ranks, ddp and fsdp2, 2 repeats): the repeats run
round-robin (A1 B1 A2 B2), read from the launch times the run folder records; each launched repeat
has a live line, the first case's line an ETA; a resume launches only the missing repeat and keeps
the order of the rest. No speed is asserted: timings on this shared machine are noise."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.sweep_helpers import SMALL, case_results, child_env, pytest_cmd, run_dirs, write_sweep_project

pytestmark = pytest.mark.slow

DDP = "ddp-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"
FSDP2 = "fsdp2-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"
OPTIONS = [*SMALL, "--bench-strategies", "ddp,fsdp2", "--bench-batch-sizes", "2", "--bench-repeats", "2"]


def _launch_order(run) -> list[tuple[str, int]]:
    """(case id, repeat) of the repeats with a result, sorted by when their torchrun was launched."""
    files = {(case, n): run / "cases" / case / f"repeat-{n}.json" for case in (DDP, FSDP2) for n in (1, 2)}
    launched = {key: json.loads(f.read_text())["launched_unix"] for key, f in files.items() if f.exists()}
    return sorted(launched, key=launched.get)


def _sweep(root, *extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        pytest_cmd("test_sweep.py", "-q", *OPTIONS, *extra),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    root = tmp_path_factory.mktemp("interleaved")
    write_sweep_project(root)
    proc = _sweep(root, "--bench-results-dir", "results")
    (run,) = run_dirs(root / "results")
    return root, run, proc.stdout


def test_repeats_run_round_robin_over_the_cases(interleaved):
    _, run, out = interleaved
    assert _launch_order(run) == [(DDP, 1), (FSDP2, 1), (DDP, 2), (FSDP2, 2)]
    results = case_results(run)
    assert sorted(results) == [DDP, FSDP2]
    assert all(r["status"] == "ok" and r["metrics"]["repeats"] == 2 for r in results.values())
    lines = [line for line in out.splitlines() if line.startswith("[")]
    # one line per launched repeat, in launch order, and one per case when its result is merged
    assert [line.split("  ")[0] for line in lines] == [
        f"[repeat 1/2] {DDP}",
        f"[repeat 1/2] {FSDP2}",
        f"[repeat 2/2] {DDP}",
        f"[1/2] {DDP}",
        f"[repeat 2/2] {FSDP2}",
        f"[2/2] {FSDP2}",
    ], out
    assert re.search(r"ETA \d+m\d\ds$", lines[3]), lines[3]  # one launch left after the first case
    assert "ETA" not in lines[-1] and "ETA" not in lines[-2]


def test_resume_launches_only_the_missing_repeat(interleaved):
    """The state a sweep interrupted during the last repeat leaves: FSDP2's repeat 2 has a
    folder but no result, and FSDP2 no merged result."""
    root, run, _ = interleaved
    resumed = root / "resumed"
    shutil.copytree(run, resumed, ignore=shutil.ignore_patterns(".lock"))
    (resumed / "cases" / FSDP2 / "repeat-2.json").unlink()
    (resumed / "cases" / f"{FSDP2}.json").unlink()
    before = _launch_order(resumed)
    assert before == [(DDP, 1), (FSDP2, 1), (DDP, 2)]
    out = _sweep(root, "--bench-resume", str(resumed)).stdout
    assert _launch_order(resumed) == [*before, (FSDP2, 2)]
    assert [line.split("  ")[0] for line in out.splitlines() if line.startswith("[")] == [
        f"[1/2] {DDP}",
        f"[repeat 2/2] {FSDP2}",
        f"[2/2] {FSDP2}",
    ], out
    assert case_results(resumed)[FSDP2]["metrics"]["repeats"] == 2
