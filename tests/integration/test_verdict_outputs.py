"""Issue #25: the four outputs of ONE real run agree on every verdict. A tiny real sweep (gpt_tiny,
2 gloo ranks, fsdp2 resharding after forward or not x batch 1 and 2, 3 steps: close enough in
speed that some verdicts are within noise) writes report.md, comparison.csv and the
charts, and prints its closing lines on the terminal; the best case per like-for-like group, the
recommendation (one winner or a tie) and every within-noise label must be the same in each."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.sweep_helpers import child_env, pytest_cmd, run_dirs, write_sweep_project

pytestmark = pytest.mark.slow

GRID = [
    "--bench-model",
    "gpt_tiny",
    "--bench-strategies",
    "fsdp2,fsdp2_no_reshard",
    "--bench-batch-sizes",
    "1,2",
    "--bench-grad-accum",
    "1",
    "--bench-steps",
    "3",
    "--bench-warmup",
    "1",
    "--bench-seq-len",
    "32",
    "--bench-nproc",
    "2",
    "--bench-device",
    "cpu",
    "--bench-timeout",
    "240",
    "--bench-target-ci-pct",
    "0",
    "--bench-no-probes",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("verdicts")
    write_sweep_project(root)
    proc = subprocess.run(
        pytest_cmd("-q", *GRID, "--bench-results-dir", str(root / "results")),
        cwd=root,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (folder,) = run_dirs(root / "results")
    return folder, proc.stdout


def _csv(folder):
    import pandas as pd

    return pd.read_csv(folder / "comparison.csv")


def _bold_speed_rows(report: str) -> set[tuple[str, int]]:
    """(strategy, batch) of the report table's rows whose tokens/s/device cell is bold (best)."""
    lines = [line for line in report.splitlines() if line.startswith("| strategy | batch |")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    column = header.index("tokens/s/device")
    rows = re.findall(r"^\| (\w+) \| (\d+) \| .*\|$", report, flags=re.M)
    out = set()
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == len(header) and (cells[0], cells[1]) in rows and cells[column].startswith("**"):
            out.add((cells[0], int(cells[1])))
    return out


def test_best_per_group_agrees(run):
    folder, terminal = run
    df = _csv(folder)
    best_csv = set(df[df["is_best"] == True]["case_id"])  # noqa: E712
    best_terminal = set(re.findall(r"^best of [^:]+: (\S+) \(", terminal, flags=re.M))
    assert best_csv and best_terminal == best_csv, (best_terminal, best_csv)
    bold = _bold_speed_rows((folder / "report.md").read_text())
    assert bold == {(r.strategy, int(r.batch_size)) for r in df[df["case_id"].isin(best_csv)].itertuples()}


def test_recommendation_agrees(run):
    from fsdp_bench.report.answer import answer_lines
    from fsdp_bench.report.recommend import recommendation_lines

    folder, terminal = run
    (from_csv,) = recommendation_lines(_csv(folder))  # what the CSV's numbers say, recomputed
    (short,) = answer_lines(_csv(folder))
    (on_terminal,) = [line for line in terminal.splitlines() if line.startswith("Recommendation (")]
    report = (folder / "report.md").read_text()
    assert on_terminal == short  # the terminal's short answer; the report's full line (issue #39)
    assert f"- **Which configuration should I use?** {from_csv}" in report
    assert ("no single winner" in from_csv) == ("tied within noise" in on_terminal)
    assert (folder / "pareto_throughput_vs_memory.png").read_bytes()[:4] == b"\x89PNG"


def test_within_noise_labels_agree(run, monkeypatch):
    from fsdp_bench.report.charts import scaling
    from fsdp_bench.report.charts.style import RunData
    from fsdp_bench.report.recommend import speeds_overlap

    folder, _ = run
    df = _csv(folder)
    report = (folder / "report.md").read_text()
    (fastest,) = [line for line in report.splitlines() if "Fastest strategy (gpt_tiny" in line]
    said = {int(b): "within noise" in text for b, text in re.findall(r"batch (\d+): (.*?\)\))", fastest)}
    assert set(said) == {1, 2}, fastest
    for size, rows in df.groupby("batch_size"):  # the CSV's intervals give the same verdict
        first, second = rows.sort_values("tokens_per_s_per_device", ascending=False).to_dict("records")[:2]
        assert speeds_overlap(first, second) == said[int(size)], (size, fastest)
    # the throughput chart, drawn from the same numbers, notes exactly those batch sizes
    figures = []
    monkeypatch.setattr(scaling, "save_figure", lambda fig, path: figures.append(fig))
    scaling.chart_throughput(RunData(df=df), folder / "unused.png")
    notes = " ".join(t.get_text() for ax in figures[0].axes for t in ax.texts)
    noted = (
        {int(b) for b in re.findall(r"\d+", notes.split("within noise at batch")[-1])} if "within" in notes else set()
    )
    assert noted == {b for b, tied in said.items() if tied}
    assert (folder / "throughput_vs_batch_size.png").read_bytes()[:4] == b"\x89PNG"
