"""Issue #16, a sweep you can watch, checked on a real tiny sweep (2 cases, 2 gloo ranks each):
the duration estimate and the run folder up front, one [i/N] line per finished case without -v, a case that did not train
reported as xfail, like-for-like pytest-benchmark groups, and a short summary at the end."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from fsdp_bench.launch.progress import progress_line
from tests.sweep_helpers import SWEEP_TEST, child_env

pytestmark = pytest.mark.slow

ARGS = [
    "--bench-model=gpt_tiny",
    "--bench-strategies=fsdp2",
    "--bench-batch-sizes=2",
    "--bench-grad-accum=1",
    "--bench-optimizer-timing=after_shard,before_shard",
    "--bench-steps=3",
    "--bench-warmup=1",
    "--bench-seq-len=32",
    "--bench-nproc=2",
    "--bench-device=cpu",
    "--bench-timeout=240",
    "--bench-measure-cap-s=2",  # CPU's adaptive default stays on, its noisy tiny steps capped at 2 s
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress")
    (root / "conftest.py").write_text('pytest_plugins = ["fsdp_bench.pytest_plugin"]\n')
    (root / "test_sweep.py").write_text(SWEEP_TEST)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "test_sweep.py",
        "-p",
        "no:cacheprovider",
        "-rx",
        "--bench-results-dir=results",
        "--benchmark-json=bench.json",
        *ARGS,
    ]
    env = child_env()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900, env=env)
    return root, proc


def test_progress_lines_and_summary(sweep):
    _, proc = sweep
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert re.search(r"fsdp-bench: 2 case\(s\); run folder \S*results/", out), out
    assert re.search(r"fsdp-bench: estimated duration \d+m\d\ds for 2 case\(s\)", out), out
    # clean live lines: the module's name once, no lone progress letters under the [i/N] lines
    assert sum(line.startswith("test_sweep.py ") for line in out.splitlines()) == 1, out
    assert not [line for line in out.splitlines() if line.strip() in (".", "x", "F")], out
    lines = [line for line in out.splitlines() if re.match(r"\[\d/2\] ", line)]
    assert len(lines) == 2, out
    after = next(line for line in lines if "opt_after" in line)
    assert re.search(
        r"\[\d/2\] fsdp2-gpt_tiny-ws2-bs2-ga1-opt_after-sl32  ok  step \d+\.\d{3} s  [\d,]+ tok/s/dev  "
        r"peak (alloc|reserved|RSS) [\d.]+ (MiB|GiB)  .*elapsed \d+m\d\ds",
        after,
    ), after
    assert "ETA" in lines[0] and "ETA" not in lines[1]
    assert "ok(not trained)" in next(line for line in lines if "opt_before" in line)
    assert "1 passed, 1 xfailed" in out
    assert "optimizer built before sharding: parameters never changed" in out
    assert "best of gpt_tiny sl32 tok128 fp32: fsdp2-gpt_tiny-ws2-bs2-ga1-opt_after-sl32" in out
    assert "not trained (never ranked): fsdp2-gpt_tiny-ws2-bs2-ga1-opt_before-sl32" in out
    assert "Recommendation (gpt_tiny): fsdp2 batch 2 x accum 1, " in out  # the short answer (issue #39)
    assert re.search(r"report: \S+report\.md", out)


def test_benchmark_group_is_like_for_like(sweep):
    root, _ = sweep
    data = json.loads((root / "bench.json").read_text())
    assert {b["group"] for b in data["benchmarks"]} == {"gpt_tiny sl32 tok128 fp32"}


def test_progress_line_format():
    result = {
        "status": "ok",
        "metrics": {
            "step_time_s_median": 0.1234,
            "tokens_per_s_per_device": 1234.4,
            "peak_allocated_gib": 0.05,
            "step_time_cv_pct": 25.0,
        },
    }
    line = progress_line(1, 4, "case-a", result, 62.0)
    assert line == (
        "[1/4] case-a  ok  step 0.123 s  1,234 tok/s/dev  peak alloc 51.2 MiB  NOISY (CV 25%)  elapsed 1m02s  ETA 3m06s"
    )
    assert progress_line(2, 2, "case-b", {"status": "oom"}, 5).endswith("oom  elapsed 0m05s")
