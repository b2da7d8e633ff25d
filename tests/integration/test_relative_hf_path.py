"""`--bench-model hf:PATH` with a relative PATH: collection reads it from where pytest started and
so must every worker, whose working directory is its case folder (a relative path once failed
every case of a sweep with "is not a folder")."""

import shutil
import subprocess
from pathlib import Path

from tests.sweep_helpers import SMALL, case_results, child_env, pytest_cmd, run_dirs, write_sweep_project

CONFIG = Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "llama_odd_vocab"


def test_a_relative_hf_path_reaches_the_workers(tmp_path):
    write_sweep_project(tmp_path)
    shutil.copytree(CONFIG, tmp_path / "configs" / "mine")
    at = SMALL.index("--bench-model")
    options = SMALL[:at] + SMALL[at + 2 :]  # every small option but the model
    proc = subprocess.run(
        pytest_cmd(
            "test_sweep.py",
            "-q",
            *options,
            "--bench-model",
            "hf:configs/mine",
            "--bench-strategies",
            "ddp",
            "--bench-batch-sizes",
            "1",
            "--bench-grad-accum",
            "1",
            "--bench-results-dir",
            "results",
        ),
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    (run,) = run_dirs(tmp_path / "results")
    results = case_results(run)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert [r["status"] for r in results.values()] == ["ok"], {k: r.get("reason") for k, r in results.items()}
