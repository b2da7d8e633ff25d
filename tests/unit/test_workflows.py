"""The CI workflows: parse, and run what the README says they run."""

from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the workflow files")

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"


def _steps(name):
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    (job,) = doc["jobs"].values()
    return job, " ".join(str(s.get("run", "")) + str(s.get("uses", "")) for s in job["steps"])


def test_cpu_workflow_runs_the_project_tests():
    job, steps = _steps("ci.yml")
    assert job["runs-on"] == "ubuntu-latest" and "bash .ci/run" in steps


def test_gpu_workflow_runs_uploads_and_fails_on_regression():
    job, steps = _steps("gpu-benchmarks.yml")
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    assert "python -m pytest benchmarks" in steps and '--bench-run-id "$RUN_ID"' in steps
    assert "actions/upload-artifact" in steps
    assert 'visualize.py --compare "$BASELINE" "results/$RUN_ID" --threshold "$THRESHOLD_PCT"' in steps
    compare = job["steps"][-1]
    # the comparison runs even after failed cases (it is where a regression shows), and a failed
    # suite still fails the job: no step may swallow its own exit status
    assert compare.get("if") == "always()"
    assert not any(step.get("continue-on-error") for step in job["steps"])
