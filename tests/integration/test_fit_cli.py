"""`python -m fsdp_bench.fit` reads its arguments as the sweep reads its --bench-* twins: bad
input is one line and exit 2 before anything is computed, printed or written (issue 37)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fsdp_bench.analysis.fit import fit_work_problem
from tests.sweep_helpers import PROJECT_ROOT


def _fit(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fsdp_bench.fit", "--models", "gpt_tiny", "--world-sizes", "1,2", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={"PYTHONPATH": str(PROJECT_ROOT), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize(
    "args, said",
    [
        (["--batch-size", "0"], "--batch-size: '0' is not a positive integer"),
        (["--batch-size", "-1"], "--batch-size: '-1' is not a positive integer"),
        (["--seq-len", "0"], "--seq-len: '0' is not a positive integer"),
        (["--world-sizes", "0"], "--world-sizes: '0' is not a positive integer"),
        (["--world-sizes", "-8"], "--world-sizes: '-8' is not a positive integer"),
        (["--device-memory-gib", "nan"], "--device-memory-gib: 'nan' is not a positive number of GiB"),
        (["--device-memory-gib", "-1"], "--device-memory-gib: '-1' is not a positive number of GiB"),
        (["--device-memory-gib", "1e999"], "--device-memory-gib: '1e999' is not a positive number of GiB"),
        (["--strategies", "fsdp3"], "--strategies: unknown value 'fsdp3'"),
        (["--calibrate", "no/such/run"], "--calibrate: 'no/such/run' is not a run folder"),
        (["--out", "afile/fit"], "--out: 'afile/fit' is not a folder ('afile' is a file)"),
    ],
)
def test_bad_fit_arguments_are_one_line_and_exit_2(tmp_path, args, said):
    (tmp_path / "afile").write_text("")
    done = _fit(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # nothing computed or printed first
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"python -m fsdp_bench.fit: error: {said}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing written


def test_good_fit_arguments_still_answer(tmp_path):
    done = _fit("--batch-size", "1", "--seq-len", "32", "--strategies", "ddp,fsdp2", "--out", "fit", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "gpt_tiny fsdp2 ws2 batch 1: predicted peak" in done.stdout
    assert (tmp_path / "fit" / "fit.csv").is_file()


def test_on_cpu_a_row_this_host_cannot_run_is_no_with_the_guards_line(tmp_path):
    """Issue 37: fit on CPU answers with the sweep's host-memory guard (the same figure and line);
    200,000 samples of 1024 tokens is far over any host's MemAvailable, and the 80 GiB default
    budget is not the host's."""
    big = ("--batch-size", "200000", "--seq-len", "1024", "--strategies", "ddp", "--out", "fit")
    cpu = _fit(*big, "--device", "cpu", cwd=tmp_path)
    assert cpu.returncode == 0, cpu.stderr
    lines = [line for line in cpu.stdout.splitlines() if line.startswith("gpt_tiny ddp ws")]
    assert len(lines) == 2 and all("fits with a 7% margin: no" in line for line in lines), cpu.stdout
    assert all("; host memory: needs about" in line and "GiB is available; not launched" in line for line in lines)
    cuda = _fit(*big, "--device", "cuda", cwd=tmp_path)
    assert cuda.returncode == 0 and "host memory" not in cuda.stdout, cuda.stdout


def test_a_config_too_deep_to_answer_in_minutes_is_refused_before_any_work(tmp_path):
    """Issue 37: a million-layer config kept fit busy for minutes (163 s for one model at load 8);
    it is now refused in one line before any prediction: nothing printed or written."""
    config = json.loads((PROJECT_ROOT / "tests/data/hf_configs/llama_odd_vocab/config.json").read_text())
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1_000_000}))
    done = subprocess.run(
        [sys.executable, "-m", "fsdp_bench.fit", "--models", "hf:deep", "--strategies", "ddp", "--world-sizes", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PYTHONPATH": str(PROJECT_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("python -m fsdp_bench.fit: error: --models: hf:deep has 1,000,000 layers x 1 rows")
    assert len(done.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep"]  # nothing written
    assert fit_work_problem("gpt_124m", 44) is None  # the default table of a shipped model is answered
