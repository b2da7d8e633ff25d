"""Bad input: every --bench-* option, FSDP_BENCH_FAULTS and visualize.py argument is checked
before any case starts, with one line naming the problem, a non-zero exit and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fsdp_bench.plan.case import CaseError
from fsdp_bench.plan.devices import max_cpu_ranks
from fsdp_bench.plan.options import parse_sweep
from tests.sweep_helpers import PROJECT_ROOT, child_env, pytest_cmd, write_sweep_project

BAD_OPTIONS = [
    ({"batch-sizes": "0"}, "--bench-batch-sizes: '0' is not a positive integer"),
    ({"batch-sizes": "2,-1"}, "--bench-batch-sizes: '-1' is not a positive integer"),
    ({"batch-sizes": "1.5"}, "--bench-batch-sizes: '1.5' is not a positive integer"),
    ({"batch-sizes": ","}, "--bench-batch-sizes: empty list"),
    ({"batch-sizes": "2,,4"}, "--bench-batch-sizes: empty item in '2,,4'"),
    ({"strategies": "ddp,"}, "--bench-strategies: empty item in 'ddp,'"),
    ({"strategies": "ddp", "mesh": "1x2"}, "--bench-mesh: only applies to hybrid strategies"),
    ({"grad-accum": "two"}, "--bench-grad-accum: 'two' is not a positive integer"),
    ({"steps": "0"}, "--bench-steps: '0' is not a positive integer"),
    ({"warmup": "-1"}, "--bench-warmup: '-1' is not a non-negative integer"),
    ({"seq-len": "abc"}, "--bench-seq-len: 'abc' is not a positive integer"),
    ({"nproc": "0"}, "--bench-nproc: '0' is not a positive integer"),
    ({"timeout": "0"}, "--bench-timeout: '0' is not a positive number of seconds"),
    ({"timeout": "soon"}, "--bench-timeout: 'soon' is not a positive number of seconds"),
    ({"repeats": "0"}, "--bench-repeats: '0' is not a positive integer"),
    ({"allow-slow-cpu": "maybe"}, "--bench-allow-slow-cpu: 'maybe' is not on/off"),
    ({"kill-grace": "-3"}, "--bench-kill-grace: '-3' is not a number of seconds between 0 and 3600"),
    ({"strategies": "ddp,zero9"}, "--bench-strategies: unknown value 'zero9'; choose from ddp, fsdp1_full_shard"),
    ({"optimizer-timing": "never"}, "--bench-optimizer-timing: unknown value 'never'; choose from after_shard"),
    ({"model": "gpt_huge9"}, "--bench-model: unknown model 'gpt_huge9'; choose from"),
    ({"device": "tpu"}, "--bench-device: unknown value 'tpu'; choose from auto, cpu, cuda"),
    ({"seq-len": "100000"}, "--bench-* options: seq_len 100000 exceeds gpt_tiny's context"),
]


@pytest.mark.parametrize(
    "raw, message", BAD_OPTIONS, ids=[next(iter(r)) + "=" + next(iter(r.values())) for r, _ in BAD_OPTIONS]
)
def test_bad_option_is_one_clear_line(raw, message):
    with pytest.raises(CaseError) as err:
        parse_sweep(raw)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_mesh_needs_a_case_that_uses_it():
    """The mesh reaches the hybrid cases and only them; a sweep where none would use it is refused."""
    cases = parse_sweep({"device": "cpu", "nproc": "2", "strategies": "ddp,fsdp2_hsdp", "mesh": "1x2"}).cases()
    assert {c.strategy: c.mesh for c in cases} == {"ddp": "", "fsdp2_hsdp": "1x2"}
    with pytest.raises(CaseError, match="^--bench-mesh: sets the strategy sweep's hybrid mesh"):
        parse_sweep({"suite": "odsc-linear", "mesh": "1x2"})


def test_paths_are_checked(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    checks = [
        ({"results-dir": str(a_file / "sub")}, "--bench-results-dir: "),
        ({"results-dir": "/proc/fsdp-bench-results"}, "is not writable"),
        ({"resume": str(tmp_path / "missing")}, "--bench-resume: "),
        ({"resume": str(tmp_path)}, "is not a run folder (no cases/ inside)"),
        ({"model": f"hf:{tmp_path}"}, "has no config.json"),
        ({"model": f"hf:{tmp_path / 'nope'}"}, "is not a folder"),
    ]
    for raw, message in checks:
        with pytest.raises(CaseError, match=None) as err:
            parse_sweep(raw)
        assert message in str(err.value), (raw, str(err.value))


def test_nproc_above_what_the_machine_has():
    with pytest.raises(CaseError, match=r"--bench-nproc: \d+ CPU ranks requested but at most"):
        parse_sweep({"device": "cpu", "nproc": str(max_cpu_ranks() + 1)})
    assert parse_sweep({"device": "cpu", "nproc": "2"}).nproc == 2
    if not os.path.isdir("/proc/driver/nvidia/gpus"):
        with pytest.raises(CaseError, match="--bench-device: cuda requested but no NVIDIA GPU is visible"):
            parse_sweep({"device": "cuda"})


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    write_sweep_project(root)
    return root


CLI_CASES = [
    (["--bench-batch-sizes", "0"], {}, "ERROR: --bench-batch-sizes: '0' is not a positive integer"),
    (["--bench-strategies", "nope"], {}, "ERROR: --bench-strategies: unknown value 'nope'; choose from ddp,"),
    (["--bench-nproc", "999"], {}, "ERROR: --bench-nproc: 999"),
    (["--bench-results-dir", "/proc/x"], {}, "ERROR: --bench-results-dir: '/proc/x' is not writable"),
    (["--bench-resume", "."], {}, "ERROR: --bench-resume: '.' is not a run folder"),
    (  # issue 39: pytest's bare "unrecognized arguments" usage block named no option
        ["--bench-strategy", "ddp"],
        {},
        "ERROR: unknown option --bench-strategy (did you mean --bench-strategies?); `pytest --help` lists",
    ),
    ([], {"FSDP_BENCH_FAULTS": "explode@measure:1"}, "ERROR: FSDP_BENCH_FAULTS: unknown fault kind 'explode'"),
    ([], {"FSDP_BENCH_FAULTS": "raise@lunch:1"}, "ERROR: FSDP_BENCH_FAULTS: unknown stage 'lunch'"),
    ([], {"FSDP_BENCH_FAULTS": "raise"}, "ERROR: FSDP_BENCH_FAULTS: cannot parse 'raise'"),
]


@pytest.mark.parametrize(
    "args, env, line", CLI_CASES, ids=[c[2].split(":")[1].strip() + str(i) for i, c in enumerate(CLI_CASES)]
)
def test_pytest_exits_with_one_line_and_no_traceback(project, args, env, line):
    proc = subprocess.run(
        pytest_cmd("test_sweep.py", *args),
        cwd=project,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 4  # pytest's usage error
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(line), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (project / "results").exists()  # nothing started


VISUALIZE_CASES = [
    (["/no/such/run"], "visualize.py: /no/such/run: not a fsdp-bench run folder"),
    (["--results-dir", "/no/such/results"], "visualize.py: /no/such/results: no results folder"),
    (["--bogus"], "visualize.py: unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("args, line", VISUALIZE_CASES, ids=["run", "results-dir", "unknown-arg"])
def test_visualize_exits_with_one_line_and_no_traceback(tmp_path, args, line):
    proc = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "visualize.py"), *args],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(line), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_visualize_unwritable_out(tmp_path):
    run = tmp_path / "run"
    (run / "cases").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "visualize.py"), str(run), "--out", "/proc/out"],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("visualize.py: --out: '/proc/out' is not writable"), proc.stderr
