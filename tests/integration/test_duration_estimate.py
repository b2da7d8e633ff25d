"""Issue #16: the sweep's duration is estimated before the first case, and a CPU sweep whose first
step would take minutes (a GPU-sized model left on the CPU) stops in one line before launching
anything, unless --bench-allow-slow-cpu is given."""

from __future__ import annotations

import subprocess
import time

import pytest

from fsdp_bench.analysis.duration import (
    FIRST_STEP_LIMIT_S,
    PROBE_STEP_EQUIVALENTS,
    SESSION_S,
    case_flops_per_token,
    case_seconds,
    estimate_line,
    estimate_sweep,
    session_seconds,
    slow_cpu_line,
    step_seconds,
)
from fsdp_bench.plan.case import PARTS_PROBE_STEPS
from fsdp_bench.plan.options import parse_sweep
from tests.sweep_helpers import PROJECT_ROOT, child_env, make_sweep_project, pytest_cmd, run_dirs

GPT2_ON_CPU = ["--bench-device", "cpu", "--bench-model", "gpt_124m", "--bench-seq-len", "1024"]


def _cases(**raw: str):
    return parse_sweep({"device": "cpu", **raw}).cases()


def test_flops_per_token_follows_the_formula():
    # gpt_124m: 124,475,904 parameters (embeddings included) + 12 L d T attention
    case = _cases(model="gpt_124m", **{"seq-len": "1024"})[0]
    assert case_flops_per_token(case) == 6 * 124_475_904 + 12 * 12 * 768 * 1024


def test_tiny_model_passes_the_guard_and_gpt2_at_1024_does_not():
    tiny = estimate_sweep(_cases(model="gpt_tiny", **{"seq-len": "32"}))
    assert slow_cpu_line(tiny) is None
    assert tiny.slowest_first_step_s < 1
    big = estimate_sweep(_cases(model="gpt_124m", **{"seq-len": "1024"}))
    assert big.slowest_first_step_s > FIRST_STEP_LIMIT_S
    line = slow_cpu_line(big)
    assert "gpt_124m at seq len 1024" in line and "--bench-allow-slow-cpu" in line
    assert "\n" not in line


def test_estimate_grows_with_steps_and_repeats():
    short = _cases(model="gpt_small", steps="2")[0]
    long = _cases(model="gpt_small", steps="20")[0]
    assert case_seconds(long) > case_seconds(short)
    cases = _cases(model="gpt_tiny")
    once, thrice = estimate_sweep(cases), estimate_sweep(cases, repeats=3)
    session = session_seconds(cuda=False)
    assert thrice.total_s - session == pytest.approx(3 * (once.total_s - session))
    assert "x 3 repeats" in estimate_line(thrice)


def test_gpt2_at_1024_on_cpu_stops_before_any_case(tmp_path):
    start = time.monotonic()
    proc = subprocess.run(
        pytest_cmd("benchmarks", *GPT2_ON_CPU, f"--bench-results-dir={tmp_path}"),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "refusing to start on CPU" in line]
    assert len(lines) == 1, out
    assert "gpt_124m at seq len 1024" in lines[0] and "--bench-allow-slow-cpu" in lines[0]
    assert "Traceback" not in out
    assert run_dirs(tmp_path) == []  # nothing launched, no run folder
    assert elapsed < 30, elapsed


@pytest.mark.slow
def test_allow_slow_cpu_launches_the_case(tmp_path):
    """With the flag the case starts (and here hits its 3 s timeout: nobody waits minutes in a test)."""
    args = [
        *GPT2_ON_CPU,
        "--bench-allow-slow-cpu",
        "--bench-strategies=ddp",
        "--bench-batch-sizes=2",
        "--bench-grad-accum=1",
        "--bench-timeout=3",
        "--bench-kill-grace=1",
        "--bench-no-report",
        f"--bench-results-dir={tmp_path}",
    ]
    proc = subprocess.run(
        pytest_cmd("benchmarks", *args), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=180, env=child_env()
    )
    out = proc.stdout + proc.stderr
    assert "refusing to start" not in out
    assert "fsdp-bench: estimated duration" in out
    assert len(run_dirs(tmp_path)) == 1, out
    assert "[1/1] ddp-gpt_124m-ws2-bs2-ga1-opt_after-sl1024  timeout" in out, out


def test_no_probes_leaves_the_probe_steps_out_of_the_estimate():
    case = _cases(model="gpt_small")[0]
    assert case_seconds(case) - case_seconds(case.replace(probes=False)) == pytest.approx(
        PROBE_STEP_EQUIVALENTS * step_seconds(case)
    )


def test_a_simulated_case_counts_no_step_parts_probe():
    case = _cases(model="gpt_small")[0].replace(simulate=True)
    assert case_seconds(case) - case_seconds(case.replace(probes=False)) == pytest.approx(
        (PROBE_STEP_EQUIVALENTS - PARTS_PROBE_STEPS) * step_seconds(case)
    )


def test_cpu_ranks_share_the_cores_and_long_steps_print_whole_seconds():
    from fsdp_bench.analysis.duration import CPU_FLOPS, rank_flops

    case = _cases(model="gpt_tiny")[0]  # 2 ranks
    assert rank_flops(case, cpu_count=8) == CPU_FLOPS
    assert rank_flops(case.replace(nproc=4), cpu_count=2) == CPU_FLOPS / 2
    slow = estimate_sweep(_cases(model="gpt_124m", **{"seq-len": "1024"}))
    assert "e+" not in estimate_line(slow) and f"~{slow.slowest_first_step_s:.0f} s" in estimate_line(slow)


# --- planning a GPU sweep on a machine without one (issue 20) -------------------------------------

GPT2_ON_CUDA = [
    "--bench-device=cuda",
    "--bench-nproc=1",
    "--bench-model=gpt_124m",
    "--bench-seq-len=1024",
    "--bench-precision=bf16",
    "--bench-strategies=fsdp2",
    "--bench-batch-sizes=8",
    "--bench-grad-accum=1",
]


def _estimate_lines(result) -> list[str]:
    return [line for line in result.outlines if line.startswith("fsdp-bench: estimated duration")]


@pytest.fixture
def no_gpu(monkeypatch):
    """No GPU visible, whatever this machine has (nvidia-smi is asked only when one is)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def test_collect_only_estimates_a_cuda_sweep_without_a_gpu(pytester, no_gpu):
    from fsdp_bench.analysis.duration import format_duration
    from fsdp_bench.plan.case import Case

    make_sweep_project(pytester)
    result = pytester.runpytest_subprocess("--collect-only", "-q", *GPT2_ON_CUDA)
    assert result.ret == 0, result.stdout.str()
    (line,) = _estimate_lines(result)
    case = Case(
        strategy="fsdp2", model="gpt_124m", seq_len=1024, precision="bf16", batch_size=8, nproc=1, device="cuda"
    )
    assert f"estimated duration {format_duration(SESSION_S['cuda'] + case_seconds(case))} for 1 case(s)" in line
    assert "H100 SXM's published peak" in line  # the default when no GPU is named or visible


def test_gpu_name_picks_the_published_figures(pytester, no_gpu):
    make_sweep_project(pytester)
    steps = ["--bench-steps=200", "--bench-batch-sizes=32"]  # long enough that the rate shows
    h100 = _estimate_lines(
        pytester.runpytest_subprocess("--collect-only", "-q", *GPT2_ON_CUDA, *steps, "--bench-gpu-name=H100")
    )
    a100 = _estimate_lines(
        pytester.runpytest_subprocess("--collect-only", "-q", *GPT2_ON_CUDA, *steps, "--bench-gpu-name=A100")
    )
    assert "H100's published peak" in h100[0] and "A100's published peak" in a100[0]
    seconds = [_seconds(line) for line in (h100[0], a100[0])]
    assert seconds[1] > 1.5 * seconds[0]  # 312 vs 989 TFLOP/s bf16


def _seconds(line: str) -> int:
    """The estimate line's `1m05s` in seconds."""
    minutes, seconds = line.split("estimated duration ")[1].split()[0].rstrip("s").split("m")
    return 60 * int(minutes) + int(seconds)


def test_unknown_gpu_name_is_one_line_and_no_collection(pytester, no_gpu):
    make_sweep_project(pytester)
    result = pytester.runpytest_subprocess("--collect-only", "-q", *GPT2_ON_CUDA, "--bench-gpu-name=A10G")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if "--bench-gpu-name" in line]
    assert len(errors) == 1 and "'A10G' is not in the peak-FLOPs table" in errors[0] and "H100 SXM" in errors[0]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_cuda_run_without_a_gpu_still_stops_in_one_line(pytester, no_gpu):
    """Only --collect-only plans for a GPU that is not here; a run still refuses before any case."""
    make_sweep_project(pytester)
    result = pytester.runpytest_subprocess(*GPT2_ON_CUDA, f"--bench-results-dir={pytester.path / 'results'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any("cuda requested but no NVIDIA GPU is visible" in line for line in result.errlines)
    assert not (pytester.path / "results").exists()


def test_collect_only_prints_the_estimate_and_would_refuse_a_slow_cpu_sweep(pytester):
    make_sweep_project(pytester)
    result = pytester.runpytest_subprocess("--collect-only", "-q", *GPT2_ON_CPU)
    assert result.ret == 0
    assert len(_estimate_lines(result)) == 1
    assert any("refusing to start on CPU" in line and "without --collect-only" in line for line in result.outlines)
