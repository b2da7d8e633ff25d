"""pytest-benchmark's own switches and the sweep: every case is a pytest-benchmark test (its
`benchmark` fixture is fed the measured step times, launch.bench_stats). Without the plugin
(`-p no:benchmark`) the sweep runs the same; with `--benchmark-skip` nothing launches and one line
says why (before: an unexplained "1 skipped"). `--benchmark-only`, which keeps every case, is run
with the benchmark table in test_first_hour.py."""

from __future__ import annotations

import pytest

from tests.sweep_helpers import TINY, load_results, make_sweep_project, only_run, run_dirs

ONE_CASE = [
    *TINY,
    "--bench-strategies=ddp",
    "--bench-batch-sizes=2",
    "--bench-grad-accum=1",
    "--bench-optimizer-timing=after_shard",
    "--bench-no-report",
    "--bench-no-probes",
    "--bench-results-dir=res",
]


def test_the_case_runs_with_pytest_benchmark_off(pytester: pytest.Pytester):
    make_sweep_project(pytester)
    result = pytester.runpytest_subprocess("-p", "no:benchmark", *ONE_CASE)
    out = result.stdout.str()
    result.assert_outcomes(passed=1)
    assert "fixture 'benchmark' not found" not in out
    (case,) = load_results(only_run(pytester.path / "res")).values()
    assert case["status"] == "ok" and case["metrics"]["step_time_s_median"] > 0


def test_benchmark_skip_says_why_nothing_runs(pytester: pytest.Pytester):
    make_sweep_project(pytester)
    result = pytester.runpytest_subprocess("--benchmark-skip", *ONE_CASE)
    result.assert_outcomes(skipped=1)
    (line,) = [ln for ln in result.stdout.lines if "--benchmark-skip" in ln]
    assert line.startswith("fsdp-bench: ") and "drop it to run the sweep" in line
    assert run_dirs(pytester.path / "res") == []
