"""A real sweep through the pytest plugin: 2 gloo ranks per case, each case its own torchrun.

The same sweep answers issue 36's questions on real cases (it used to run a sweep of its own, 23 s
of the suite): every ok case carries its parts, summing to its probe step; the terminal's
recommendation ends with the runner-up's reason, the same as the CSV's numbers give; report.md has
its Why section and the breakdown chart is drawn."""

import csv
import json
import re
import subprocess
import sys

import pytest

from fsdp_bench.analysis.attribution import PARTS
from tests.sweep_helpers import TINY, child_env, load_results, only_run

pytestmark = pytest.mark.slow

STRATEGIES = "ddp,fsdp1_full_shard,fsdp2"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):  # noqa: D401
    """One sweep, shared by the assertions below: 6 of the 3 strategies x 2 batch sizes x grad-accum
    1 and 2 (every strategy at batch 2 x accum 1, ddp at 3 points, fsdp2 at 2)."""
    pytester_dir = tmp_path_factory.mktemp("sweep")
    (pytester_dir / "conftest.py").write_text('pytest_plugins = ["fsdp_bench.pytest_plugin"]\n')
    (pytester_dir / "test_sweep.py").write_text("def test_case(bench_case, bench_run):\n    bench_run(bench_case)\n")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "test_sweep.py",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rA",
        f"--bench-strategies={STRATEGIES}",
        "--bench-batch-sizes=1,2",
        "--bench-grad-accum=1,2",
        "--bench-results-dir=results",
        "--benchmark-json=bench.json",
        *TINY,
        "-k",
        "(bs2 and ga1) or (ddp and (bs2 or ga1)) or (fsdp2 and bs2)",
    ]
    env = child_env()
    proc = subprocess.run(cmd, cwd=pytester_dir, capture_output=True, text=True, timeout=900, env=env)
    return pytester_dir, proc


def test_every_case_passes(sweep):
    _, proc = sweep
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # -k selected on case ids: ddp at bs1 ga1, bs2 ga1 and bs2 ga2; fsdp1 at bs2 ga1; fsdp2 at bs2
    assert "6 passed, 6 deselected" in proc.stdout


def test_case_json_is_merged_from_both_ranks(sweep):
    root, _ = sweep
    results = load_results(only_run(root / "results"))
    assert len(results) == 6
    r = results["fsdp2-gpt_tiny-ws2-bs2-ga2-opt_after-sl32"]
    assert r["status"] == "ok" and r["schema_version"] >= 1
    assert [x["rank"] for x in r["ranks"]] == [0, 1]
    assert all(len(x["step_times_s"]) == 3 for x in r["ranks"])
    m = r["metrics"]
    assert m["tokens_per_s"] == pytest.approx(2 * 2 * 2 * 32 / m["step_time_s_median"])
    assert m["tokens_per_s_per_device"] == pytest.approx(m["tokens_per_s"] / 2)
    assert m["params_changed"] is True and m["loss_last"] < m["loss_first"]
    assert m["peak_allocated_gib"] > 0


def test_strategies_agree_on_the_loss(sweep):
    root, _ = sweep
    results = load_results(only_run(root / "results"))
    firsts = {
        s: results[f"{s}-gpt_tiny-ws2-bs2-ga1-opt_after-sl32"]["ranks"][0]["losses"] for s in STRATEGIES.split(",")
    }
    for losses in firsts.values():
        assert losses == pytest.approx(firsts["ddp"], rel=1e-4)


def test_env_csv_and_charts_are_written(sweep):
    root, _ = sweep
    run = only_run(root / "results")
    env = json.loads((run / "env.json").read_text())
    assert env["torch"].startswith("2.") and env["python"] and "git_dirty" in env and env["utc_time"]
    rows = list(csv.DictReader((run / "comparison.csv").open()))
    assert len(rows) == 6 and {r["status"] for r in rows} == {"ok"}
    assert {"case_id", "strategy", "batch_size", "tokens_per_s_per_device", "peak_allocated_gib"} <= set(rows[0])
    for name in ("throughput_vs_batch_size.png", "peak_memory_vs_batch_size.png"):
        png = (run / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_pytest_benchmark_sees_the_measured_step_times(sweep):
    root, _ = sweep
    data = json.loads((root / "bench.json").read_text())
    bench = {b["param"]: b for b in data["benchmarks"]}
    case_id = "ddp-gpt_tiny-ws2-bs1-ga1-opt_after-sl32"
    result = load_results(only_run(root / "results"))[case_id]
    slowest = [max(a, b) for a, b in zip(*(r["step_times_s"] for r in result["ranks"]))]
    assert bench[case_id]["stats"]["rounds"] == 3
    assert bench[case_id]["stats"]["median"] == pytest.approx(sorted(slowest)[1])
    assert bench[case_id]["extra_info"]["tokens_per_s"] == pytest.approx(result["metrics"]["tokens_per_s"])


def test_each_cases_time_is_split_and_the_sharding_it_ran_is_in_the_table(sweep):
    root, proc = sweep
    run = only_run(root / "results")
    rows = list(csv.DictReader((run / "comparison.csv").open()))
    parts = ("launch", "setup", "train", "probes", "exit")
    for row in rows:
        split = [float(row[f"time_{p}_s"]) for p in parts]
        assert all(s >= 0 for s in split) and float(row["time_train_s"]) > 0
        # the parts tile the runner's wall time of the case (its clock read a moment later)
        assert sum(split) == pytest.approx(float(row["duration_s"]), abs=0.05)
    assert {r["strategy"]: r["effective_sharding"] for r in rows} == {
        "ddp": "replicated",
        "fsdp1_full_shard": "full_shard",
        "fsdp2": "full_shard",
    }
    report = (run / "report.md").read_text()
    assert "## Where the sweep's time went" in report and "| total (6 cases) |" in report
    assert "time in cases:" in proc.stdout and "launch" in proc.stdout.split("time in cases:")[1]


def test_parts_reason_and_chart(sweep):
    pd = pytest.importorskip("pandas")
    from fsdp_bench.report.recommend import recommendation_lines

    root, proc = sweep
    run = only_run(root / "results")
    df = pd.read_csv(run / "comparison.csv")
    assert (df["status"] == "ok").all() and len(df) == 6
    total = sum(df[f"part_{p}_s_per_step"] for p in PARTS)
    assert ((total - df["probe_step_s"]).abs() <= 0.01 * df["probe_step_s"]).all(), df.to_dict("records")
    # the terminal's short answer, then the reason on a line of its own (issue 39 keeps the answer short)
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Recommendation ("))
    why = lines[at + 1]
    # the runner-up may do other work per step (batch x accum): then its time per 1,000 tokens
    assert why.startswith("Why") and re.search(r" slower per (step|1,000 tokens per device) than ", why), lines[at:]
    assert why.split(": ", 1)[1] in recommendation_lines(df)[0]  # report.md's line gives the same reason
    report = (run / "report.md").read_text()
    assert "\n## Why\n" in report and " slower per step than " in report.split("\n## Why\n", 1)[1]
    # a reason for every case but the fastest of its compare group (the same work per step)
    reasons = df["why_vs_best"].fillna("").str.contains(" slower per step than ").sum()
    assert reasons == len(df) - df["compare_group"].nunique() > 0, df[["case_id", "compare_group", "why_vs_best"]]
    assert (run / "step_time_breakdown.png").read_bytes()[:4] == b"\x89PNG"
