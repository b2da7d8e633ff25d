"""A history across runs: `python visualize.py --history RUN [RUN ...]` (or a folder of runs, e.g.
the benchmark workflow's stored artifacts).

Each case's tokens/s per device with its interval and its peak memory, run by run in order, and a
flag on the runs where a case changed beyond noise. A flag is the `--compare` verdict (the same
run-to-run statistics, report/compare.py) of that run against the reference: the newest earlier
run that was not flagged, as a gate's baseline only moves on after a pass. So a single slowed run
is flagged and the next normal one is not (against the slowed run it would read "faster"). Cases
are matched by their id, which holds every setting of the case, so runs of other settings or cases
appear side by side only where they match like for like; runs from other machines or library
versions are named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fsdp_bench.analysis.run_noise import speed_interval, widened
from fsdp_bench.report.compare import compare_tables, env_differences
from fsdp_bench.report.table import build_table
from fsdp_bench.report.writer import load_report_inputs
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import TableRow
from fsdp_bench.results.schema import ResultError

# The --compare verdicts that flag a run: a change beyond noise (and the threshold), or a failure.
FLAGGED = ("regression", "faster", "failed")


def run_labels(runs: list[Path]) -> list[str]:
    """Each run's name, with its parent folder's where two runs share a name."""
    names = [p.name for p in runs]
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in runs]


@dataclass
class History:
    runs: list[Path]
    rows: list[TableRow]  # one per (run, case)
    flagged: dict[str, list[str]] = field(default_factory=dict)  # run name -> its flagged cases
    notes: list[str] = field(default_factory=list)  # unreadable files, machines that differ


def _utc(run: Path) -> str:
    import json

    try:
        return str(json.loads(RunLayout(run).env_file.read_text()).get("utc_time") or "")
    except (OSError, ValueError):
        return ""


def collect_run_dirs(paths: list[Path]) -> list[Path]:
    """Run folders in the order given; a folder of runs adds its runs oldest first (by env.json's
    UTC time, then name: the workflow's run ids do not sort by time)."""
    runs: list[Path] = []
    for path in paths:
        if RunLayout(path).is_run():
            runs.append(path)
            continue
        inner = [p for p in sorted(Path(path).iterdir()) if RunLayout(p).is_run()] if Path(path).is_dir() else []
        if not inner:
            raise ResultError(f"{path}: neither a fsdp-bench run folder nor a folder of them")
        runs += sorted(inner, key=lambda p: (_utc(p), p.name))
    seen: dict[Path, Path] = {}  # resolved path -> the run as first given
    for run in runs:  # one run twice would be read as two, "no change" between them
        key = Path(run).resolve()
        if key in seen:
            raise ResultError(f"--history: {run} is given twice (also as {seen[key]}); each run once")
        seen[key] = run
    if len(runs) < 2:
        raise ResultError(f"--history needs at least two runs, got {len(runs)}")
    return runs


def _case_row(run: str, order: int, row: TableRow) -> TableRow:
    """One table row (build_table's, not a case result) of one run, as history.csv has it."""
    record = row
    interval = speed_interval(record)
    if interval is not None:
        interval = widened(*interval, record.get(M.repeats), record.get(M.repeat_spread_pct))
    return {
        "run": run,
        "run_order": order,
        "case_id": record["case_id"],
        "status": record.get("status"),
        M.tokens_per_s_per_device: record.get(M.tokens_per_s_per_device),
        "tokens_per_s_per_device_ci_low": interval[0] if interval else None,
        "tokens_per_s_per_device_ci_high": interval[1] if interval else None,
        M.peak_allocated_gib: record.get(M.peak_allocated_gib),
        M.repeats: record.get(M.repeats),
    }


def build_history(runs: list[Path], *, threshold_pct: float) -> History:
    history = History(runs, [])
    loaded = []
    for run, label in zip(runs, run_labels(runs)):
        results, env, problems = load_report_inputs(run)
        history.notes += problems
        loaded.append((label, results, env, build_table(results)))
    reference = 0
    for order, (run, results, env, df) in enumerate(loaded):
        verdicts: dict[str, TableRow] = {}
        ref_name = loaded[reference][0] if order > 0 else None
        if order > 0:
            ref_run, ref_results, ref_env, ref_df = loaded[reference]
            rows = compare_tables(
                ref_df, df, threshold_pct=threshold_pct, base_results=ref_results, new_results=results
            )[0]
            verdicts = {r["case_id"]: r for r in rows}
            history.notes += [f"{run} vs {ref_run}: {d}" for d in env_differences(ref_env, env)]
        flagged = sorted(c for c, r in verdicts.items() if r["verdict"] in FLAGGED)
        if flagged:
            history.flagged[run] = flagged
        elif order > 0:
            reference = order  # the reference moves on only past a run that changed nothing
        for record in df.to_dict("records") if not df.empty else []:
            row = _case_row(run, order, record)
            judged = verdicts.get(record["case_id"], {})
            row["reference_run"] = ref_name if judged else None
            row["verdict"] = judged.get("verdict")
            for key in (
                "step_time_change_ci_low_pct",
                "step_time_change_ci_high_pct",
                "step_time_detectable_change_pct",
            ):
                row[key] = judged.get(key)
            row["step_time_change_pct"] = judged.get(f"{M.step_time_s_median}_change_pct")
            row["flagged"] = record["case_id"] in flagged
            history.rows.append(row)
    return history
