"""Acceptance: one real CPU sweep (2 gloo ranks) with a fault injected in four of its six cases.

Order of cases (batch size is the only axis): bs1 raise, bs2 OOM, bs3 killed, bs4 ok, bs5 hang,
bs6 ok. Each fault must cost only its own case, get the right status, and leave no process
behind: a healthy case follows each fault that kills or strands a process, and the faults that
only raise are followed by another fault that must still get its own status.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.sweep_helpers import SMALL, case_results, child_env, processes_of, pytest_cmd, run_dirs, write_sweep_project

pytestmark = pytest.mark.slow

# per case; the process-group timeout becomes half of it, so the hang ends as a collective timeout.
# 40 s was too short on a loaded machine: at load 10-12 (2026-11-27) the bs1 case, whose rank 1 raises
# at its first step, was still starting when it ran out, and read "timeout" instead of "failed".
TIMEOUT_S = 60.0
GRACE_S = 5.0
FAULTS = ",".join(
    [
        "raise@first_step:1/-bs1-",  # an exception in one rank's first training step
        "oom@model:0/-bs2-",  # OOM-like while building the model (on CUDA this is a real allocation)
        "kill@measure:1/-bs3-",  # SIGKILL mid-measurement
        "hang@measure:1/-bs5-",  # rank 1 stops; rank 0 blocks in the next collective
    ]
)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    write_sweep_project(root)
    results = root / "results"
    started = time.monotonic()
    proc = subprocess.run(
        pytest_cmd(
            "test_sweep.py",
            "-rA",
            *SMALL,
            "--bench-batch-sizes",
            "1,2,3,4,5,6",
            "--bench-timeout",
            str(TIMEOUT_S),
            "--bench-kill-grace",
            str(GRACE_S),
            "--bench-results-dir",
            str(results),
        ),
        cwd=root,
        env=child_env(FSDP_BENCH_FAULTS=FAULTS),
        capture_output=True,
        text=True,
        timeout=6 * TIMEOUT_S + 120,
    )
    wall = time.monotonic() - started
    (run,) = run_dirs(results)
    return {"proc": proc, "wall_s": wall, "run": run, "results": case_results(run)}


def _by_bs(results):
    return {r["case"]["batch_size"]: r for r in results.values()}


def test_every_case_has_the_right_status(sweep):
    statuses = {bs: r["status"] for bs, r in _by_bs(sweep["results"]).items()}
    assert statuses == {1: "failed", 2: "oom", 3: "failed", 4: "ok", 5: "timeout", 6: "ok"}, sweep["proc"].stdout[
        -3000:
    ]


def test_reasons_name_the_cause_and_the_rank(sweep):
    r = _by_bs(sweep["results"])
    assert "rank 1 raised RuntimeError at stage first_step" in r[1]["reason"]
    assert (r[1]["failed_rank"], r[1]["failed_stage"]) == (1, "first_step")
    assert "rank 0 ran out of memory at stage model" in r[2]["reason"]
    assert "rank 1 was killed by SIGKILL at stage measure" in r[3]["reason"]
    # the collective timeout names the hang; on a very busy machine the case timeout may fire first
    assert "rank 0's collective" in r[5]["reason"] and "measure" in r[5]["reason"]
    oom_rank = next(x for x in r[2]["ranks"] if x["rank"] == 0)
    assert oom_rank["status"] == "oom" and oom_rank["error"]["type"] == "OutOfMemoryError"
    # memory readings up to the OOM: the stage reached before it, and the reading at failure
    assert [s["stage"] for s in oom_rank["stages"]] == ["data"]
    assert oom_rank["memory_at_failure"]["rss_bytes"] > 0


def test_partial_measurements_are_kept(sweep):
    killed = _by_bs(sweep["results"])[3]
    survivors = {x["rank"]: x for x in killed["ranks"]}
    assert set(survivors) == {0, 1}  # the killed rank left its progress record
    assert survivors[1]["status"] == "running" and survivors[1]["stage"] == "measure"
    assert len(survivors[0]["warmup_step_times_s"]) == 1 and survivors[0]["losses"]
    assert "after first step" in [s["label"] for s in survivors[0]["stages"]]


def test_pytest_reports_faults_as_failures_and_oom_as_xfail(sweep):
    out = sweep["proc"].stdout
    assert sweep["proc"].returncode == 1, out[-3000:]
    assert "3 failed, 2 passed, 1 xfailed" in out, out[-3000:]
    assert "XFAIL test_sweep.py::test_case[ddp-gpt_tiny-ws2-bs2-ga1-opt_after-sl32] - OOM: rank 0" in out
    assert "TIMEOUT: " in out and "rank 0's collective" in out


def test_sweep_time_is_bounded_and_no_process_is_left(sweep):
    results = sweep["results"].values()
    healthy = sum(r["duration_s"] for r in results if r["status"] == "ok")
    assert sweep["wall_s"] <= 4 * TIMEOUT_S + healthy + 60  # 60 s: pytest start and collection
    hang = _by_bs(sweep["results"])[5]
    assert hang["duration_s"] <= TIMEOUT_S + GRACE_S
    assert processes_of(sweep["run"]) == []
    assert all("leftover_pids" not in r for r in results)


def test_a_run_with_planted_faults_says_so(sweep, tmp_path):
    """env.json keeps FSDP_BENCH_FAULTS, and the report's first note says the run was slowed or
    broken on purpose (a history or compare of such a run otherwise reads like the machine's)."""
    from fsdp_bench.report.writer import write_report

    env = json.loads((sweep["run"] / "env.json").read_text())
    assert env["planted_faults"] == FAULTS
    _, notes = write_report(sweep["run"], tmp_path)
    said = f"planted faults (FSDP_BENCH_FAULTS={FAULTS}): this run was slowed or broken on purpose"
    assert notes[0].startswith(said)
    assert said in (tmp_path / "report.md").read_text()
