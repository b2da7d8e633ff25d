"""A probe never fails a good case: an exception part-way through an untimed probe step becomes
that probe's null reason, the model is restored for the next probe, and with several ranks every
rank skips the remaining probes together instead of hanging in a collective."""

from __future__ import annotations

import subprocess
import time

import pytest

torch = pytest.importorskip("torch")

from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.worker.loop import run  # noqa: E402
from tests.sweep_helpers import (  # noqa: E402
    SMALL,
    case_results,
    child_env,
    processes_of,
    pytest_cmd,
    run_dirs,
    with_probes,
    write_sweep_project,
)

# A path that moves with torch/accelerate versions: .ci/run also runs it under the GPU machine's set.
pytestmark = pytest.mark.versions

CASE = dict(strategy="fsdp2", nproc=1, steps=2, warmup=1, seq_len=32)


def test_oom_mid_probe_leaves_the_next_breakdown_as_a_clean_run(monkeypatch):
    monkeypatch.delenv("FSDP_BENCH_FAULTS", raising=False)
    clean = run(Case(**CASE))
    monkeypatch.setenv("FSDP_BENCH_FAULTS", "oom@probe_step:0")
    hit = run(Case(**CASE))
    assert hit["status"] == "ok" and len(hit["step_times_s"]) == 2
    # The first probe (the step's parts) took the OOM; the probes after it see the model as a fresh
    # step would: FSDP2 resharded, no gradients or activations left over from the interrupted step.
    assert hit["step_parts"]["null_reason"].startswith("OOM in the step_parts probe step"), hit["step_parts"]
    assert hit["flops"]["per_token_counter"] == clean["flops"]["per_token_counter"]
    assert hit["measured_model_state_bytes"] == clean["measured_model_state_bytes"]
    assert hit["memory_breakdown_bytes"] is not None, hit.get("memory_breakdown_null_reason")
    for part in ("params", "grads", "optimizer"):
        assert hit["memory_breakdown_bytes"][part] == clean["memory_breakdown_bytes"][part], part
    assert hit["memory"]["tracked_peak_bytes"] == pytest.approx(clean["memory"]["tracked_peak_bytes"], rel=0.02)


def test_any_exception_in_a_probe_is_the_probes(monkeypatch):
    monkeypatch.setenv("FSDP_BENCH_FAULTS", "raise@probe_step:0")
    record = run(Case(**CASE))
    assert record["status"] == "ok"
    assert "RuntimeError in the step_parts probe step: injected fault" in record["step_parts"]["null_reason"]
    assert record["flops"]["per_token_counter"] is not None  # the next probes still ran
    assert record["memory_breakdown_bytes"] is not None


@pytest.mark.slow
def test_two_ranks_skip_together_after_a_failure_mid_probe(tmp_path):
    """Rank 0 raises after the first forward of the probe step while rank 1 goes on into the
    backward's reduce-scatter: before, rank 1 waited there until the process-group timeout and
    the case failed; now both ranks record the probe as failed and the case is ok."""
    write_sweep_project(tmp_path)
    results = tmp_path / "results"
    faults = "raise@probe_step:0/-bs1-,oom@probe_step:1/-bs2-"
    started = time.monotonic()
    args = ["fsdp2" if a == "ddp" else a for a in with_probes(SMALL)]
    proc = subprocess.run(
        pytest_cmd(
            "test_sweep.py",
            *args,
            "--bench-batch-sizes",
            "1,2",
            "--bench-timeout",
            "200",
            "--bench-results-dir",
            str(results),
        ),
        cwd=tmp_path,
        env=child_env(FSDP_BENCH_FAULTS=faults),
        capture_output=True,
        text=True,
        timeout=400,
    )
    wall = time.monotonic() - started
    (run_dir,) = run_dirs(results)
    by_bs = {r["case"]["batch_size"]: r for r in case_results(run_dir).values()}
    assert proc.returncode == 0, proc.stdout[-3000:]
    for bs, failed_rank, kind in ((1, 0, "RuntimeError"), (2, 1, "OOM")):
        result = by_bs[bs]
        assert result["status"] == "ok", result.get("reason")
        for rank in result["ranks"]:
            reason = rank["step_parts"]["null_reason"]
            assert f"{kind} in the step_parts probe step" in reason, (rank["rank"], reason)
            if rank["rank"] != failed_rank:
                assert reason.startswith(f"rank {failed_rank}: "), reason
            skipped = f"probe skipped: rank {failed_rank}'s step_parts probe failed"
            assert rank["flops"]["counter_null_reason"] == skipped
            assert rank["memory_breakdown_null_reason"] == skipped
            assert len(rank["step_times_s"]) == 2
    # No rank waited for the process-group timeout (100 s here).
    assert max(r["duration_s"] for r in by_bs.values()) < 60, [r["duration_s"] for r in by_bs.values()]
    assert wall < 150
    assert processes_of(run_dir) == []
