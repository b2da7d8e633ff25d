"""Two sweeps started at the same moment on one machine, into the same results folder: each
gets its own run folder (and torchrun its own rendezvous port, `--standalone` binds port 0),
and both finish with every case ok."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.sweep_helpers import SMALL, case_results, child_env, processes_of, pytest_cmd, run_dirs, write_sweep_project

pytestmark = pytest.mark.slow


def test_two_sweeps_at_once_both_finish_in_their_own_run_folders(tmp_path):
    write_sweep_project(tmp_path)
    results = tmp_path / "results"
    cmd = pytest_cmd(
        "test_sweep.py",
        "-q",
        *SMALL,
        "--bench-batch-sizes",
        "1",
        "--bench-timeout",
        "240",
        "--bench-results-dir",
        str(results),
    )
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outs)
    runs = run_dirs(results)
    assert len(runs) == 2
    named = {re.search(r"results: (\S+)", o).group(1).rstrip("/").rsplit("/", 1)[-1] for o in outs}
    assert named == {r.name for r in runs}  # each sweep reports its own folder
    for run in runs:
        assert {k: v["status"] for k, v in case_results(run).items()} == {
            "ddp-gpt_tiny-ws2-bs1-ga1-opt_after-sl32": "ok"
        }
        assert processes_of(run) == []
