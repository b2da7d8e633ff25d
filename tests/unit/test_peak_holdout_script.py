"""scripts/measure_peak_prediction.py --holdout's bookkeeping (issue 35): which rows a seed still
needs (--add-real-ranks gives a simulated-only seed file its real-rank rows without measuring its
simulated ones again), how the added rows join the file, how a folder's seed files add up for
--repredict, its bad input, and that the in-process simulated rank's peak does not depend on the
intra-op thread count the script sets."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_bench.results.metrics import M

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "measure_peak_prediction.py"
_spec = importlib.util.spec_from_file_location("measure_peak_prediction", SCRIPT)
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)


def _row(seed: int, ranks: str, error_pct: float, case: str = "c") -> dict:
    return {
        "case": f"{case}-{ranks}",
        "seed": seed,
        "ranks": ranks,
        "status": "ok",
        "phase": "backward",
        "measured_bytes": 1000,
        "predicted_bytes": 1000 + 10 * error_pct,
        M.peak_prediction_error_pct: error_pct,
    }


def _run(seed: int, rows: list[dict], *, wall_s: float, loads: list[float]) -> dict:
    return {
        "schema_version": 1,
        "command": f"run of {seed}",
        "git_sha": "a" * 40,
        "torch": "2.13.0",
        "utc_time": "2026-11-26T20:00:00+00:00",
        "load_average": loads,
        "wall_s": wall_s,
        "predicted_at": None,
        "seeds": [seed],
        "cases": rows,
        "summary": script.holdout_summary(rows),
    }


def _write(path: Path, run: dict) -> Path:
    path.write_text(json.dumps(run))
    return path


def test_a_seed_is_measured_whole_skipped_or_given_its_real_rows(tmp_path):
    simulated_only = _write(tmp_path / "seed-1.json", _run(1, [_row(1, "simulated", 1.0)], wall_s=5, loads=[1, 2]))
    both = _write(
        tmp_path / "seed-2.json", _run(2, [_row(2, "real", 1.0), _row(2, "simulated", 1.0)], wall_s=5, loads=[1, 2])
    )
    assert script.seed_work(None, real=True, add_real=False) == "all"
    assert script.seed_work(tmp_path / "seed-3.json", real=False, add_real=True) == "all"
    assert script.seed_work(simulated_only, real=True, add_real=True) == "real"
    assert script.seed_work(simulated_only, real=True, add_real=False) is None  # resuming never adds
    assert script.seed_work(simulated_only, real=False, add_real=True) is None  # not asked for real ranks
    assert script.seed_work(both, real=True, add_real=True) is None


def test_added_real_rows_come_first_and_the_summary_counts_every_row():
    old = _run(7, [_row(7, "simulated", 1.0), _row(7, "simulated", 9.0, case="d")], wall_s=40, loads=[3, 4])
    added = _run(7, [_row(7, "real", -6.0)], wall_s=300, loads=[1.5, 2.5])
    added["command"] = "the adding run"
    merged = script.with_real_rows(old, added)
    assert [r["ranks"] for r in merged["cases"]] == ["real", "simulated", "simulated"]
    assert merged["summary"]["all"] == {"cases": 3, "within_5_pct": 1, "beyond_8_pct": 1}
    assert merged["summary"]["real"] == {"cases": 1, "within_5_pct": 0, "beyond_8_pct": 0}
    assert merged["command"] == "run of 7" and merged["wall_s"] == 40  # the simulated rows' run
    assert merged["real_ranks_added"]["command"] == "the adding run"
    assert merged["real_ranks_added"]["wall_s"] == 300
    with pytest.raises(ValueError, match="added once"):
        script.with_real_rows(merged, added)
    with pytest.raises(ValueError, match="same seed"):
        script.with_real_rows(old, _run(8, [_row(8, "real", 0.0)], wall_s=1, loads=[1, 1]))


def test_a_folder_of_seed_files_adds_up_both_runs_of_a_seed(tmp_path):
    old = _run(10, [_row(10, "simulated", 1.0)], wall_s=40, loads=[3, 4])
    added = _run(10, [_row(10, "real", 2.0)], wall_s=300, loads=[0.5, 9])
    _write(tmp_path / "seed-10.json", script.with_real_rows(old, added))
    _write(tmp_path / "seed-9.json", _run(9, [_row(9, "simulated", 3.0)], wall_s=60, loads=[2, 2]))
    merged = script._merged_seed_files(tmp_path)
    assert merged["seeds"] == [9, 10]
    assert [(r["seed"], r["ranks"]) for r in merged["cases"]] == [(9, "simulated"), (10, "real"), (10, "simulated")]
    assert merged["wall_s"] == 400
    assert merged["load_average"] == [0.5, 9]
    assert "real_ranks_added" not in merged


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def test_adding_real_ranks_needs_a_holdout_folder(tmp_path):
    for args in (["--add-real-ranks"], ["--holdout", "--add-real-ranks"]):
        run = _script(*args)
        assert run.returncode == 2
        assert run.stderr.strip() == "--add-real-ranks adds rows to the seed files of --holdout --out FOLDER: give both"


def test_holdout_strategies_are_catalog_names(tmp_path):
    for text, line in (("fsdp9", "--strategies: unknown strategy 'fsdp9'"), (",", "--strategies: no strategy given")):
        run = _script("--holdout", "--strategies", text, "--out", str(tmp_path / "never"))
        assert (run.returncode, run.stderr.strip()) == (2, line)
        assert not (tmp_path / "never").exists()
    names = ["fsdp1_full_shard", "fsdp1_no_shard"]
    cases = script.holdout_cases("gpt_tiny", 2, real=True, strategies=names)
    assert {c.strategy for _, c in cases} == set(names)
    assert len(cases) == len(names) * len(script.ACCUMULATIONS) * (1 + len(script.SIMULATED))


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2", "fsdp1_full_shard"])  # FSDP1's read by the profiler
def test_a_simulated_peak_is_the_same_on_one_thread_and_two(strategy, tmp_path):
    """run_holdout measures simulated ranks on one intra-op thread; committed rows were measured
    on two. A dev config (seed 0: gemma, 4 layers, vocabulary 1,919) at 64 ranks, accumulation 2."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fsdp_bench.plan.case import Case
    from fsdp_bench.plan.generated_configs import write_generated_config
    from fsdp_bench.worker.simulate import simulated_peak

    model = write_generated_config(0, tmp_path)
    case = Case(strategy=strategy, model=model, nproc=64, grad_accum=2, simulate=True, **script.SMALL)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = simulated_peak(case)
        torch.set_num_threads(1)
        one = simulated_peak(case)
    finally:
        torch.set_num_threads(threads)
    assert one == two > 0


def test_a_row_line_says_its_seconds_when_the_row_has_them():
    old = _row(1, "simulated", 1.5)  # a committed row from before rows were timed (--repredict prints it)
    assert script._row_text(old).endswith("+1.50% backward")
    timed = {**_row(1, "real", -0.5), "measure_s": 12.3, "estimate_s": 4.0, M.peak_estimate_error_pct: 0.25}
    assert script._row_text(timed).endswith("-0.50% backward est  +0.25% (12.3 s, estimate 4.0 s)")
    assert script._row_text({**old, "measure_s": 2.0}).endswith("+1.50% backward (2.0 s)")
