"""Issue 36 on one real sweep (ddp and fsdp2, gpt_tiny, 2 gloo ranks, batch 2, 3 steps): every ok
case carries its parts, summing to its probe step; the terminal's recommendation ends with the
runner-up's reason, the same as the CSV's numbers give; report.md has its Why section and the
breakdown chart is drawn."""

from __future__ import annotations

import subprocess

import pytest

from tests.sweep_helpers import TINY, child_env, pytest_cmd, run_dirs, write_sweep_project

pytestmark = pytest.mark.slow
PARTS = ("compute", "comm_exposed", "optimizer", "data", "host")


def test_parts_reason_and_chart_on_a_real_sweep(tmp_path):
    pd = pytest.importorskip("pandas")
    from fsdp_bench.report.recommend import recommendation_lines

    write_sweep_project(tmp_path)
    grid = [*TINY, "--bench-strategies", "ddp,fsdp2", "--bench-batch-sizes", "2", "--bench-grad-accum", "1"]
    proc = subprocess.run(
        pytest_cmd("-q", *grid, "--bench-results-dir", str(tmp_path / "results")),
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (folder,) = run_dirs(tmp_path / "results")
    df = pd.read_csv(folder / "comparison.csv")
    assert (df["status"] == "ok").all() and len(df) == 2
    total = sum(df[f"part_{p}_s_per_step"] for p in PARTS)
    assert ((total - df["probe_step_s"]).abs() <= 0.01 * df["probe_step_s"]).all(), df.to_dict("records")
    # the terminal's short answer, then the reason on a line of its own (issue 39 keeps the answer short)
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Recommendation ("))
    why = lines[at + 1]
    assert why.startswith("Why") and " slower per step than " in why, lines[at : at + 3]
    assert why.split(": ", 1)[1] in recommendation_lines(df)[0]  # report.md's line gives the same reason
    report = (folder / "report.md").read_text()
    assert "\n## Why\n" in report and " slower per step than " in report.split("\n## Why\n", 1)[1]
    assert df["why_vs_best"].fillna("").str.contains(" slower per step than ").sum() == 1
    assert (folder / "step_time_breakdown.png").read_bytes()[:4] == b"\x89PNG"
