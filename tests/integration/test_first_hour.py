"""Issue #24, the first hour of a new user: a sweep started from an interpreter that cannot run a
case stops before any case with one line naming that interpreter; the recommendation and the
run's place are the terminal's last lines (pytest-benchmark's wide tables only on request);
`visualize.py` with no argument passes over runs without a finished case and says so; the
duration estimate is calibrated on this machine and counts only what a resume will run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_bench.plan.options import parse_sweep
from tests.sweep_helpers import PROJECT_ROOT, SMALL, case_results, child_env, pytest_cmd, run_dirs, with_probes

GOLDEN = PROJECT_ROOT / "tests" / "data" / "golden" / "base"
# as a newcomer runs it: the report and the probe steps on
ONE_CASE = [a for a in with_probes(SMALL) if a != "--bench-no-report"] + ["--bench-batch-sizes", "2"]


def _sweep(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        pytest_cmd("benchmarks", *args, f"--bench-results-dir={tmp_path / 'results'}"),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env or child_env(),
    )


def _empty(folder: Path) -> bool:
    """No run folder (nor anything else) was left behind."""
    return not folder.exists() or not list(folder.iterdir())


def _no_torch_env(tmp_path: Path) -> dict[str, str]:
    """An interpreter where `import torch` fails as in a Python without it (a system pytest):
    a `torch` package first on the path that raises what Python raises for a missing module."""
    shadow = tmp_path / "no_torch" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    env = child_env()
    env["PYTHONPATH"] = f"{shadow.parent}:{env['PYTHONPATH']}"
    return env


def test_an_interpreter_without_torch_stops_the_sweep_before_any_case(tmp_path):
    proc = _sweep(tmp_path, *ONE_CASE, env=_no_torch_env(tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out  # pytest's usage error
    lines = [line for line in out.splitlines() if "cannot import torch" in line]
    assert len(lines) == 1, out
    assert sys.executable in lines[0] and "No module named 'torch'" in lines[0], lines[0]
    assert "Traceback" not in out and "--bench-resume" not in out and "[1/1]" not in out
    assert _empty(tmp_path / "results")


def test_a_cuda_sweep_whose_torch_sees_no_gpu_stops_before_any_case(tmp_path):
    # One GPU "visible" to the launcher (CUDA_VISIBLE_DEVICES), none to this CPU-only torch:
    # a CPU wheel on a GPU node.
    env = child_env(CUDA_VISIBLE_DEVICES="0")
    args = [
        "--bench-model=gpt_tiny",
        "--bench-strategies=ddp",
        "--bench-batch-sizes=2",
        "--bench-grad-accum=1",
        "--bench-device=cuda",
        "--bench-nproc=1",
    ]
    proc = _sweep(tmp_path, *args, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out
    (line,) = [line for line in out.splitlines() if "sees no GPU" in line]
    assert sys.executable in line and "--bench-device cuda" in line, line
    assert _empty(tmp_path / "results")


@pytest.fixture(scope="module")
def one_case_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("first_hour")
    return tmp, _sweep(tmp, *ONE_CASE)


def _last_lines(out: str, n: int) -> list[str]:
    return [line for line in out.splitlines() if line.strip()][-n:]


def test_the_recommendation_and_the_run_are_the_last_lines(one_case_sweep):
    tmp, proc = one_case_sweep
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (run,) = run_dirs(tmp / "results")
    recommendation, where = _last_lines(proc.stdout, 2)
    assert recommendation.startswith("Recommendation (gpt_tiny"), proc.stdout[-2000:]
    assert len(recommendation) <= 250, recommendation  # issue #39: the short answer; the list is in report.md
    assert where == f"results: {run}  (report: {run / 'report.md'})"
    assert " passed" in _last_lines(proc.stdout, 3)[0]  # pytest's own closing line comes before
    # pytest-benchmark's table (its header names the time unit) is off by default
    assert "Name (time in" not in proc.stdout


def test_the_benchmark_table_on_request(tmp_path):
    """pytest-benchmark's table, and its `--benchmark-only`, which keeps every case (each feeds the
    `benchmark` fixture its measured step times)."""
    args = ["--bench-benchmark-table", "--benchmark-only", "--bench-no-report", "--bench-no-probes"]
    proc = _sweep(tmp_path, *ONE_CASE, *args)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Name (time in" in proc.stdout and "fixture 'benchmark' not found" not in proc.stdout
    (run,) = run_dirs(tmp_path / "results")
    assert _last_lines(proc.stdout, 1) == [f"results: {run}"]
    (case,) = case_results(run).values()
    assert case["status"] == "ok" and case["metrics"]["step_time_s_median"] > 0


def test_env_json_holds_the_calibration_the_estimate_used(one_case_sweep):
    tmp, proc = one_case_sweep
    (run,) = run_dirs(tmp / "results")
    env = json.loads((run / "env.json").read_text())
    assert env["cpu_matmul_gflops"] > 0 and env["torch_import_s"] > 0
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("fsdp-bench: estimated duration")]
    assert "CPU calibrated now" in line, line


def test_a_resume_estimates_only_the_cases_it_runs(one_case_sweep):
    tmp, _ = one_case_sweep
    (run,) = run_dirs(tmp / "results")
    proc = _sweep(tmp, *ONE_CASE, f"--bench-resume={run}", "--bench-no-report")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    (line,) = [line for line in out.splitlines() if line.startswith("fsdp-bench: estimated duration")]
    assert "for 0 case(s) (1 kept from the resumed run)" in line, line


def test_calibration_scales_the_cpu_rate_and_the_fixed_cost():
    from fsdp_bench.analysis.duration import (
        CASE_FIXED_S,
        REFERENCE_GFLOPS,
        STARTUP_EXPONENT,
        Calibration,
        estimate_sweep,
        fixed_seconds,
        rank_flops,
    )

    case = parse_sweep({"device": "cpu", "model": "gpt_small"}).cases()[0]
    slow = Calibration.from_facts({"cpu_matmul_gflops": REFERENCE_GFLOPS / 3})
    reference = Calibration.from_facts({"cpu_matmul_gflops": REFERENCE_GFLOPS})
    assert fixed_seconds(case, reference) == pytest.approx(CASE_FIXED_S["cpu"])
    # a case's start-up slows as the square root of the probe's slowdown (STARTUP_EXPONENT)
    assert fixed_seconds(case, slow) == pytest.approx(3**STARTUP_EXPONENT * CASE_FIXED_S["cpu"])
    assert rank_flops(case, cpu_count=8, calibration=slow) == pytest.approx(
        rank_flops(case, cpu_count=8, calibration=reference) / 3
    )
    fast = reference
    assert estimate_sweep([case], calibration=slow).total_s > estimate_sweep([case], calibration=fast).total_s
    assert Calibration.from_facts({"torch_info_error": "x"}) == Calibration()  # the fixed figures
    kept = estimate_sweep([case], kept=frozenset({case.id}))
    assert kept.cases == 0 and kept.kept == 1


def _fake_run(results: Path, name: str, status: str | None) -> Path:
    run = results / name
    (run / "cases").mkdir(parents=True)
    (run / "env.json").write_text((GOLDEN / "env.json").read_text())
    if status is not None:
        src = sorted((GOLDEN / "cases").glob("*.json"))[0]
        data = json.loads(src.read_text())
        data["status"] = status
        (run / "cases" / src.name).write_text(json.dumps(data))
    return run


def test_visualize_picks_the_newest_run_with_a_finished_case(tmp_path):
    results = tmp_path / "results"
    old = results / "20260101T000000Z-1-0"
    shutil.copytree(GOLDEN, old)
    _fake_run(results, "20260102T000000Z-2-0", "failed")
    _fake_run(results, "20260103T000000Z-3-0", None)  # started, nothing finished
    proc = subprocess.run(
        [sys.executable, "visualize.py", "--results-dir", str(results)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert f"newest run with a finished case: {old}" in proc.stderr
    assert "skipped 2 newer run(s) without a finished case: 20260103T000000Z-3-0, 20260102T000000Z-2-0" in proc.stderr
    assert (old / "report.md").is_file() and not (results / "20260102T000000Z-2-0" / "report.md").exists()


def test_visualize_with_no_finished_run_is_one_line(tmp_path):
    results = tmp_path / "results"
    _fake_run(results, "20260102T000000Z-2-0", "failed")
    proc = subprocess.run(
        [sys.executable, "visualize.py", "--results-dir", str(results)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"visualize.py: {results}: none of its 1 run(s) has a finished case (newest: 20260102T000000Z-2-0); "
        "run `pytest benchmarks` first"
    ]


def test_a_sweep_started_elsewhere_writes_under_the_project(tmp_path):
    """Issue #39 item 7: `pytest /path/to/project/...` from another folder wrote `results/` there,
    and visualize.py back in the project found an older run. The default results folder is under
    pytest's rootdir (the project); an explicit --bench-results-dir is taken as given.

    Its model is `hf:PATH` with PATH relative to where pytest started: collection reads it from
    there, and so must every worker, whose working directory is its case folder (a relative path
    once failed every case of a sweep with "is not a folder")."""
    from tests.sweep_helpers import write_sweep_project

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    write_sweep_project(project)
    (project / "pytest.ini").write_text("[pytest]\n")  # the clone's pyproject.toml makes it pytest's rootdir
    shutil.copytree(PROJECT_ROOT / "tests" / "data" / "hf_configs" / "llama_odd_vocab", elsewhere / "configs" / "mine")
    args = [*ONE_CASE, "--bench-model", "hf:configs/mine", "--bench-no-report", "--bench-no-probes"]
    proc = subprocess.run(
        pytest_cmd(str(project / "test_sweep.py"), *args),
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (run,) = run_dirs(project / "results")
    # (pytest-benchmark still makes its own empty .benchmarks/ in the working folder)
    assert not (elsewhere / "results").exists(), list(elsewhere.iterdir())
    assert _last_lines(proc.stdout, 1) == [f"results: {run}"]
    results = case_results(run)
    assert [r["status"] for r in results.values()] == ["ok"], {k: r.get("reason") for k, r in results.items()}


def test_the_default_results_folder_is_the_projects(tmp_path, monkeypatch):
    from fsdp_bench.plan.options import project_results_dir

    monkeypatch.chdir(tmp_path)
    assert project_results_dir(tmp_path, Path("results")) == Path("results")  # in the project: as before
    assert project_results_dir(PROJECT_ROOT, Path("results")) == PROJECT_ROOT.resolve() / "results"
    assert project_results_dir(PROJECT_ROOT, Path("/abs/results")) == Path("/abs/results")
