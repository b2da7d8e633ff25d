"""visualize.py --history on five golden runs with repeats, the third slowed 50%: that run and only
that run is flagged (the next one is judged against the last unflagged run, not the slowed one), the
chart draws intervals, and a folder of runs is read oldest first. Run folders are copies of the
golden base run with their step times edited (tests/integration/test_compare_noise.py)."""

from __future__ import annotations

import csv
import json

from tests.integration.test_compare_noise import add_repeats, scale_step_times
from tests.integration.test_visualize import copy_run, visualize

SPREADS = ([0.98, 1.0, 1.03], [0.99, 1.0, 1.02], [1.0, 1.01, 0.97], [0.98, 1.0, 1.02], [1.0, 0.99, 1.02])


def _runs(root, slowed: int = 2):
    runs = []
    for i, spread in enumerate(SPREADS):
        (root / "runs").mkdir(parents=True, exist_ok=True)
        run = copy_run("base", root / f"copy{i}").rename(root / "runs" / f"gh-{9 - i}")  # names sort backwards
        if i == slowed:
            scale_step_times(run, lambda step: 1.5)
        add_repeats(run, spread)
        env = json.loads((run / "env.json").read_text())
        env["utc_time"] = f"2026-11-26T09:0{i}:00Z"
        (run / "env.json").write_text(json.dumps(env))
        runs.append(run)
    return runs


def test_five_runs_one_slowed_flags_that_run_only(tmp_path):
    runs = _runs(tmp_path)
    proc = visualize("--history", tmp_path / "runs", "--out", tmp_path / "hist")  # a folder: oldest first
    assert proc.returncode == 0, proc.stdout + proc.stderr
    flagged = [line for line in proc.stdout.splitlines() if line.startswith("FLAGGED ")]
    assert len(flagged) == 1 and flagged[0].startswith(f"FLAGGED {runs[2].name}:"), proc.stdout
    rows = list(csv.DictReader((tmp_path / "hist" / "history.csv").open()))
    assert [r["run"] for r in rows if r["case_id"] == rows[0]["case_id"]] == [r.name for r in runs]
    slowed = [r for r in rows if r["run"] == runs[2].name and r["status"] == "ok" and r["verdict"]]
    assert slowed and all(r["flagged"] == "True" and r["verdict"] == "regression" for r in slowed)
    after = [r for r in rows if r["run"] == runs[3].name and r["verdict"]]
    assert after and {r["reference_run"] for r in after} == {runs[1].name}  # not the slowed run
    assert not any(r["flagged"] == "True" for r in rows if r["run"] != runs[2].name)
    ok = [r for r in rows if r["tokens_per_s_per_device"]]
    assert all(float(r["tokens_per_s_per_device_ci_low"]) <= float(r["tokens_per_s_per_device"]) for r in ok)
    assert all(float(r["tokens_per_s_per_device_ci_high"]) >= float(r["tokens_per_s_per_device"]) for r in ok)
    md = (tmp_path / "hist" / "history.md").read_text()
    assert "## Flagged runs" in md and "history.png" in md and "95% interval" in md
    assert (tmp_path / "hist" / "history.png").stat().st_size > 0 and (tmp_path / "hist" / "history.html").is_file()


def test_history_bad_input_is_one_line(tmp_path):
    run = copy_run("base", tmp_path)
    for args, words in [
        ((run,), "at least two runs"),
        ((tmp_path / "nothing", run), "neither a fsdp-bench run folder"),
        ((run, tmp_path / "." / run.name), "is given twice"),  # one run, two spellings: not two runs
        ((tmp_path, run), "is given twice"),  # a folder of runs holding a run also named
    ]:
        proc = visualize("--history", *args, "--out", tmp_path / "hist")
        assert proc.returncode == 2 and words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    proc = visualize("--compare", run, tmp_path / "." / run.name, "--out", tmp_path / "cmp")
    assert proc.returncode == 2 and "are the same run" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "cmp").exists() and not (tmp_path / "hist").exists()
    proc = visualize("--history", run, run, "--compare", run, run)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
