"""A SIGKILLed pytest leaves nothing running after a fixed few seconds, whatever
--bench-kill-grace says: the grace is for stops somebody waits on, and nobody does (issue 37)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from fsdp_bench.worker.torchrun import ORPHAN_STOP_S
from tests.integration.test_robustness_round2 import _alive_naming, _wait
from tests.sweep_helpers import SMALL, child_env, pytest_cmd, write_sweep_project


def _stage_of_rank_1(results) -> str | None:
    """The stage rank 1's record says it entered (rewritten at each stage)."""
    for path in results.glob("*/cases/*/rank-1.json"):
        try:
            return json.loads(path.read_text()).get("stage")
        except (OSError, ValueError):  # between writes
            return None
    return None


def test_sigkill_of_pytest_with_a_long_grace_leaves_no_process_after_the_fixed_stop(tmp_path):
    write_sweep_project(tmp_path)
    results = tmp_path / "results"
    sweep = subprocess.Popen(
        pytest_cmd(
            "test_sweep.py",
            "-q",
            *SMALL,
            "--bench-batch-sizes",
            "1",
            "--bench-timeout",
            "300",
            "--bench-kill-grace",
            "120",  # torchrun's own SIGTERM-to-SIGKILL wait would be 60 s
            "--bench-results-dir",
            str(results),
        ),
        cwd=tmp_path,
        env=child_env(FSDP_BENCH_FAULTS="stuck@first_step:1"),  # rank 1 ignores SIGTERM
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert _wait(lambda: _stage_of_rank_1(results) == "first_step", 180), "rank 1 never got stuck"
        time.sleep(1)  # past the stage's record, into the stuck sleep
        assert len(_alive_naming(results)) >= 3  # torchrun and both ranks
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait()
        killed = time.monotonic()
        assert _wait(lambda: not _alive_naming(results), ORPHAN_STOP_S + 10), f"left: {_alive_naming(results)}"
        print(f"gone {time.monotonic() - killed:.1f} s after pytest's SIGKILL")
    finally:
        for pid in _alive_naming(results):
            os.kill(pid, signal.SIGKILL)
