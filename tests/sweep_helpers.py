"""Shared set-up for tests that run real sweeps in a child pytest (no torch imported here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fsdp_bench
from fsdp_bench.launch.processes import processes_under

PROJECT_ROOT = Path(fsdp_bench.__file__).resolve().parent.parent

SWEEP_TEST = """
def test_case(bench_case, bench_run):
    bench_run(bench_case)
"""

# Small enough for a 2-core CI machine, big enough to time and train.
TINY = [
    "--bench-model=gpt_tiny",
    "--bench-steps=3",
    "--bench-warmup=1",
    "--bench-seq-len=32",
    "--bench-nproc=2",
    "--bench-device=cpu",
    "--bench-timeout=240",
    "--bench-target-ci-pct=0",
]


def make_sweep_project(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["fsdp_bench.pytest_plugin"]')
    pytester.makepyfile(test_sweep=SWEEP_TEST)


def only_run(results_dir: Path) -> Path:
    runs = [p for p in results_dir.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def load_results(run: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (run / "cases").glob("*.json")}


# The smallest real cases: 2 gloo ranks of gpt_tiny, 2 steps after 1 warmup step, no probe steps
# (a tiny case's probes take 1.0-2.2 s of each rank, more than its timed steps; on CPU they also
# give its peak memory): a test that reads a probe's figure takes `with_probes(SMALL)`.
SMALL = [
    "--bench-model",
    "gpt_tiny",
    "--bench-strategies",
    "ddp",
    "--bench-grad-accum",
    "1",
    "--bench-steps",
    "2",
    "--bench-warmup",
    "1",
    "--bench-seq-len",
    "32",
    "--bench-nproc",
    "2",
    "--bench-device",
    "cpu",
    "--bench-no-report",
    "--bench-target-ci-pct",
    "0",
    "--bench-no-probes",
]


def with_probes(options: list[str]) -> list[str]:
    """The options with the probe steps on (the default): peaks, FLOPs, model state, step parts."""
    return [o for o in options if o != "--bench-no-probes"]


def write_sweep_project(path: Path) -> None:
    """A folder where `pytest` collects one parametrized sweep through the fsdp-bench plugin."""
    (path / "conftest.py").write_text('pytest_plugins = ["fsdp_bench.pytest_plugin"]\n')
    (path / "test_sweep.py").write_text(SWEEP_TEST)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.pop("FSDP_BENCH_FAULTS", None)
    for name in [n for n in env if n.startswith("PYTEST_XDIST_")]:
        # a child pytest is a session of its own, not an xdist worker (pytest-benchmark reads this
        # and turns itself off) when these tests run under -n
        env.pop(name)
    env.update(extra)
    return env


def two_gloo_ranks_report(script_text: str, folder: Path) -> list[dict]:
    """Run `script_text` on two gloo ranks (torchrun, this interpreter); each rank writes
    FOLDER/rank<N>.json (FOLDER is its argv[1]); their reports, rank 0 first."""
    script = folder / "ranks.py"
    script.write_text(script_text)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    done = subprocess.run(
        [*command, str(script), str(folder)], env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def pytest_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]


def start_sweep(root: Path, *args: str, **env: str) -> subprocess.Popen:
    """A child `pytest test_sweep.py ARGS` in `root` (write_sweep_project), its output piped, for
    tests that stop it part-way (`env`: extra variables, e.g. a fault that hangs a case)."""
    return subprocess.Popen(
        pytest_cmd("test_sweep.py", *args),
        cwd=root,
        env=child_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(predicate, timeout_s: float, what: str) -> None:
    """Poll `predicate` every 0.2 s; AssertionError naming `what` after `timeout_s`."""
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def run_dirs(results: Path) -> list[Path]:
    return sorted(p for p in Path(results).iterdir() if (p / "cases").is_dir()) if Path(results).is_dir() else []


def case_results(run_dir: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((Path(run_dir) / "cases").glob("*.json"))}


def processes_of(run_dir: Path) -> list[int]:
    """Live processes whose command line names something inside the run folder."""
    return processes_under(run_dir)


def simulated_rank0(case) -> dict:
    """Rank 0's record of a simulated `case`, run in this process on the fake process group the way
    `python -m fsdp_bench.worker.simulate` runs it (a subprocess per case would cost ~7 s of imports)."""
    from fsdp_bench.worker.loop import run
    from fsdp_bench.worker.simulate import fake_rank0

    with fake_rank0(case):
        return run(case)


def tune_one_model(options: dict[str, str], results_dir: Path, **tune_kwargs):
    """`run_tune` over the one model of a sweep given as option texts (parse_sweep's), in a fresh
    session closed after: (the tune request, its answer). No memory budget, one repeat and no
    time budget unless `tune_kwargs` say otherwise."""
    from fsdp_bench.analysis.tune import tune_requests
    from fsdp_bench.launch.session import SweepSession
    from fsdp_bench.launch.tune import run_tune
    from fsdp_bench.plan.options import parse_sweep

    session = SweepSession(parse_sweep({**options, "results-dir": str(results_dir)}, no_report=True))
    (request,) = tune_requests(session.sweep.cases())
    kwargs = {"budget_gib": None, "max_repeats": 1, "time_budget_s": None, **tune_kwargs}
    try:
        return request, run_tune(session, request, **kwargs)
    finally:
        session.close()
