"""The CI workflows: they parse, every command they run exists and accepts the options it is given
(with the workflow's own default inputs), and the benchmark workflows gate for real: interleaved
repeats, a baseline that the first run creates, a compare step that can fail the job."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import visualize

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the workflow files")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
GATED = ("gpu-benchmarks.yml", "cpu-benchmarks.yml")


def _job(name):
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    (job,) = doc["jobs"].values()
    return job


def _steps(name):
    job = _job(name)
    return job, " ".join(str(s.get("run", "")) + str(s.get("uses", "")) for s in job["steps"])


def _default(value: str) -> str:
    """A workflow env value with its expressions replaced by their defaults ('|| 'X'' -> X)."""

    def one(match: re.Match) -> str:
        default = re.search(r"\|\|\s*'([^']*)'", match.group(1))
        return default.group(1) if default else "1"

    return re.sub(r"\$\{\{(.*?)\}\}", one, str(value))


def _expand(line: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), line)


def _commands(name):
    """Every `python ...` command line of the workflow, with its env's defaults filled in (flags:
    the optional ones a gate step adds)."""
    job = _job(name)
    env = {k: _default(v) for k, v in job.get("env", {}).items()} | {"HOME": "/home/runner"}
    for step in job["steps"]:
        env_here = env | {k: _default(v) for k, v in step.get("env", {}).items()}
        for line in str(step.get("run", "")).splitlines():
            line = line.strip()
            if not line.startswith("python ") and not line.startswith("python3 "):
                continue
            line = line.replace('"${flags[@]}"', "--suite-failed --update-baseline")
            yield shlex.split(_expand(line, env_here))


def _load_script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_command(argv: list[str]) -> str:
    """Run or parse one workflow command without benchmarking anything; returns what was checked."""
    if argv[1:3] in (["-m", "pip"], ["-m", "venv"]) or argv[1] == "-c":
        return "setup"
    if argv[:3] == ["python", "-m", "pytest"]:
        # collection parses every --bench-* option and builds every case, without running one
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *argv[3:], "--collect-only", "-q"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0 and "collected" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
        return "pytest"
    script = ROOT / argv[1]
    assert script.is_file(), f"{argv[1]}: no such script"
    if script.name == "visualize.py":
        visualize.build_parser().parse_args(argv[2:])
    elif script.name == "ci_gate.py":
        _load_script(script).parse_args(argv[2:])
    else:
        raise AssertionError(f"no check for {argv[1]}: add one here")
    return script.name


def test_cpu_workflow_runs_the_project_tests():
    job, steps = _steps("ci.yml")
    assert job["runs-on"] == "ubuntu-latest" and "bash .ci/run" in steps


@pytest.mark.parametrize("name", ["ci.yml", *GATED])
def test_every_command_exists_and_accepts_its_options(name):
    checked = [_check_command(argv) for argv in _commands(name)]
    if name in GATED:
        assert {"pytest", "ci_gate.py"} <= set(checked)


@pytest.mark.parametrize("name", GATED)
def test_benchmark_workflows_gate_with_repeats_and_a_baseline_the_first_run_makes(name):
    job, steps = _steps(name)
    assert "python -m pytest benchmarks" in steps and '--bench-run-id "$RUN_ID"' in steps
    assert '--bench-repeats "$REPEATS"' in steps and int(_default(job["env"]["REPEATS"])) >= 2
    assert "actions/upload-artifact" in steps
    gate = next(s for s in job["steps"] if "scripts/ci_gate.py" in str(s.get("run", "")))
    # the gate runs even after failed cases (a case that stopped working is a regression), and
    # nothing swallows its exit status: no `exit 0` when the baseline is missing, no continue-on-error
    assert gate.get("if") == "always()" and "exit 0" not in gate["run"]
    assert '--threshold "$THRESHOLD_PCT"' in gate["run"] and "steps.suite.outcome" in str(gate.get("env"))
    assert not any(step.get("continue-on-error") for step in job["steps"])
    upload = next(s for s in job["steps"] if "upload-artifact" in str(s.get("uses")))
    assert job["steps"].index(upload) > job["steps"].index(gate)  # the artifact carries compare.md


def test_gpu_workflow_runs_on_a_gpu_runner_and_the_cpu_gate_is_opt_in():
    gpu, cpu = _job("gpu-benchmarks.yml"), _job("cpu-benchmarks.yml")
    assert "self-hosted" in gpu["runs-on"] and "gpu" in gpu["runs-on"]
    assert "vars.FSDP_BENCH_CPU_GATE == 'true'" in cpu["if"] and "workflow_dispatch" in cpu["if"]
    assert "--bench-device cpu" in _steps("cpu-benchmarks.yml")[1]
