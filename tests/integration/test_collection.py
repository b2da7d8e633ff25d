"""Collection is pure Python: no torch import, fast, -k works on case ids, bad options are one line."""

import time

import pytest

from tests.sweep_helpers import make_sweep_project

PROBE = """
import sys
def pytest_collection_finish(session):
    print("TORCH_IMPORTED=%s" % ("torch" in sys.modules))
"""


def test_collection_imports_no_torch(pytester: pytest.Pytester):
    make_sweep_project(pytester)
    pytester.makeconftest('pytest_plugins = ["fsdp_bench.pytest_plugin"]\n' + PROBE)
    result = pytester.runpytest_subprocess(
        "--collect-only",
        "-q",
        "--bench-device=cpu",
        "--bench-optimizer-timing=after_shard,before_shard,before_shard_fixed",
    )
    result.stdout.fnmatch_lines(["TORCH_IMPORTED=False"])
    # 6 strategies: ddp collapses to one timing -> (1 + 5 * 3) * 2 batch sizes * 2 grad-accum
    result.stdout.fnmatch_lines(["64 tests collected*"])


def test_k_selects_by_case_id(pytester: pytest.Pytester):
    make_sweep_project(pytester)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "--bench-device=cpu", "-k", "fsdp2-gpt_tiny-ws2-bs4")
    result.stdout.fnmatch_lines(["*test_case[[]fsdp2-gpt_tiny-ws2-bs4-ga1-opt_after[]]", "*2/24 tests collected*"])


def test_large_collection_is_fast(pytester: pytest.Pytester):
    make_sweep_project(pytester)
    sizes = ",".join(str(i) for i in range(1, 43))
    start = time.perf_counter()
    result = pytester.runpytest_subprocess(
        "--collect-only",
        "-q",
        "--bench-device=cpu",
        f"--bench-batch-sizes={sizes}",
        "--bench-grad-accum=1,2,4,8",
        "--bench-optimizer-timing=after_shard,before_shard,before_shard_fixed",
    )
    elapsed = time.perf_counter() - start
    result.stdout.fnmatch_lines(["2688 tests collected*"])
    assert elapsed < 30  # generous bound for a loaded CI machine; scripts/ measure the real figure


@pytest.mark.parametrize(
    "option, expected",
    [
        ("--bench-batch-sizes=2,x", "--bench-batch-sizes: 'x' is not a positive integer"),
        ("--bench-batch-sizes=0", "--bench-batch-sizes: '0' is not a positive integer"),
        (
            "--bench-strategies=ddp,zero4",
            "--bench-strategies: unknown value 'zero4'; choose from ddp, fsdp1_full_shard*",
        ),
        ("--bench-optimizer-timing=sometimes", "--bench-optimizer-timing: unknown value 'sometimes'*"),
        ("--bench-model=bert", "--bench-model: unknown model 'bert'*"),
        ("--bench-timeout=-3", "--bench-timeout: '-3' is not a positive number of seconds"),
        ("--bench-device=tpu", "--bench-device: unknown value 'tpu'; choose from auto, cpu, cuda"),
    ],
)
def test_bad_option_is_one_usage_line(pytester: pytest.Pytester, option, expected):
    make_sweep_project(pytester)
    result = pytester.runpytest_subprocess("--collect-only", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {expected}"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
