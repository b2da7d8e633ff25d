"""`pytest benchmarks -n N` (pytest-xdist): each worker would be a sweep of its own, launching its
share of the cases beside the others' into run folders of their own, with no report at the end.
The sweep stops before any case with one line and exit 4; tests without cases still run under -n.
xdist comes with the project's `test` extra, which .ci/run installs."""

from __future__ import annotations

import pytest

from tests.sweep_helpers import TINY, make_sweep_project, run_dirs

pytest.importorskip("xdist")

CASES = [
    *TINY,
    "--bench-strategies=ddp,fsdp2",
    "--bench-batch-sizes=2",
    "--bench-grad-accum=1",
    "--bench-results-dir=res",
]


@pytest.mark.parametrize("extra", [[], ["--bench-tune"]], ids=["sweep", "tune"])
def test_a_sweep_under_xdist_is_one_line_and_exit_4_before_any_case(pytester: pytest.Pytester, extra):
    make_sweep_project(pytester)
    result = pytester.runpytest_subprocess("-n", "2", *CASES, *extra)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    (line,) = [ln for ln in out.splitlines() if "pytest-xdist" in ln]
    assert "(-n 2) would run cases at the same time" in line and "-n 0" in line
    assert "Traceback" not in out and "INTERNALERROR" not in out
    assert run_dirs(pytester.path / "res") == []


def test_tests_without_cases_still_run_under_xdist(pytester: pytest.Pytester):
    make_sweep_project(pytester)
    pytester.makepyfile(test_plain="def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    result = pytester.runpytest_subprocess("-n", "2", "test_plain.py", *CASES)
    result.assert_outcomes(passed=2)


def test_a_worker_given_cases_fails_each_and_launches_none(pytester: pytest.Pytester):
    """The worker's own guard, behind the controller's: were a case's id not recognised there,
    the worker still launches nothing. Here the worker is pytest marked as one (xdist's
    `workerinput`), so no controller is in front of it."""
    make_sweep_project(pytester)
    pytester.makeconftest(
        'import pytest\n\npytest_plugins = ["fsdp_bench.pytest_plugin"]\n\n\n'
        "@pytest.hookimpl(tryfirst=True)\ndef pytest_configure(config):\n"
        '    config.workerinput = {"workerid": "gw0"}\n'
    )
    result = pytester.runpytest_subprocess("-p", "no:xdist", *CASES)
    out = result.stdout.str()
    result.assert_outcomes(failed=2)
    assert out.count("would run cases at the same time") >= 2, out
    assert run_dirs(pytester.path / "res") == []
