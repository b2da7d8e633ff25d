"""Reading a run back: one case file checked against the schema, or every readable case of a run
with one line per file that could not be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdp_bench.results.checks import record_problem, result_problem
from fsdp_bench.results.io import read_json
from fsdp_bench.results.layout import RunLayout, newest_run
from fsdp_bench.results.migrate import migrate_case_result
from fsdp_bench.results.records import (
    SWEEP_SCHEMA_VERSION,
    TUNE_SCHEMA_VERSION,
    CaseResult,
    Environment,
    SweepFile,
    SweepSettings,
    TuneAnswer,
)
from fsdp_bench.results.schema import STATUSES, ResultError, check_schema


def load_case_result(path: Path) -> CaseResult:
    """A case file checked against results.records before and after it is brought to the current
    version (a migration step computes from the old fields: what it wrote is checked too)."""
    data = read_json(path)
    check_schema(path, data)
    _check(path, data, CaseResult)
    if data["status"] not in STATUSES:
        raise ResultError(f"{path}: unknown status {data['status']!r}; known: {', '.join(STATUSES)}")
    migrated = migrate_case_result(data)
    _check(path, migrated, CaseResult)
    return migrated


def load_tune_answer(path: Path) -> TuneAnswer:
    """A --bench-tune answer (tune/<request>.json), checked as load_case_result checks a case."""
    data = read_json(path)
    if isinstance(data, dict):
        data.setdefault("schema_version", 1)  # answers written before the field: the same shape
        if type(data["schema_version"]) is not int or data["schema_version"] != TUNE_SCHEMA_VERSION:
            raise ResultError(
                f"{path}: tune answer version {data['schema_version']!r} is not supported "
                f"(this fsdp-bench reads {TUNE_SCHEMA_VERSION})"
            )
    _check(path, data, TuneAnswer)
    return data


def load_sweep_settings(path: Path) -> SweepSettings:
    """A run folder's sweep settings (sweep.json), from either shape it was written in."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ResultError(f"{path}: not a JSON object")
    if "schema_version" not in data:  # written before the file had a version: the settings alone
        data = {"schema_version": SWEEP_SCHEMA_VERSION, "settings": data}
    if type(data["schema_version"]) is not int or data["schema_version"] != SWEEP_SCHEMA_VERSION:
        raise ResultError(
            f"{path}: sweep file version {data['schema_version']!r} is not supported "
            f"(this fsdp-bench reads {SWEEP_SCHEMA_VERSION})"
        )
    _check(path, data, SweepFile)
    return data["settings"]


def load_environment_file(path: Path) -> Environment:
    """env.json, checked as load_case_result checks a case."""
    data = read_json(path)
    _check(path, data, Environment)
    return data


def _check(path: Path, data: Any, record: Any) -> None:
    problem = record_problem(data, record) or (result_problem(data) if record is CaseResult else None)
    if problem:
        raise ResultError(f"{path}: {problem}")


def read_case_files(run_dir: Path) -> tuple[dict[Path, CaseResult], dict[Path, str]]:
    """Every case file of a run, by path: the readable ones' results, and the others' one-line
    problem (the CI gate needs to know which case a file that could not be read was)."""
    layout = RunLayout(Path(run_dir))
    if not layout.root.is_dir():
        raise ResultError(f"{run_dir}: not a folder")
    read, unreadable = {}, {}
    for path in layout.result_files():
        try:
            read[path] = load_case_result(path)
        except ResultError as exc:
            unreadable[path] = str(exc)
    return read, unreadable


def load_run(run_dir: Path) -> tuple[list[CaseResult], list[str]]:
    """Every readable case result of a run, and one line per file that could not be read."""
    read, unreadable = read_case_files(run_dir)
    return list(read.values()), list(unreadable.values())


def first_readable_case(run_dir: Path) -> tuple[int, str | None]:
    """How many case files the run holds, and None as soon as one of them reads, else the first
    one's problem (0, None: no case file). Cheap on a good run: it stops at the first file."""
    files = RunLayout(Path(run_dir)).result_files()
    first = None
    for path in files:
        try:
            load_case_result(path)
            return len(files), None
        except ResultError as exc:
            first = first or str(exc)
    return len(files), first


def has_finished_case(run_dir: Path) -> bool:
    """Whether the run holds at least one readable case result with status ok."""
    for path in RunLayout(Path(run_dir)).result_files():
        try:
            if load_case_result(path)["status"] == "ok":
                return True
        except ResultError:
            continue
    return False


def newest_finished_run(results_dir: Path) -> tuple[Path, list[Path]]:
    """The newest run under `results_dir` with at least one ok case, and the newer runs passed
    over (none finished: a failed or interrupted sweep, one still running). ResultError when
    there is no run, or no run with a finished case."""
    newest = newest_run(results_dir)  # raises with one line when there is none at all
    runs = sorted(
        (p for p in Path(results_dir).iterdir() if p.is_dir() and RunLayout(p).is_run()),
        key=lambda p: p.name,
        reverse=True,
    )
    skipped = []
    for run in runs:
        if has_finished_case(run):
            return run, skipped
        skipped.append(run)
    raise ResultError(
        f"{results_dir}: none of its {len(runs)} run(s) has a finished case "
        f"(newest: {newest.name}); run `pytest benchmarks` first"
    )
