"""Reading a run back: one case file checked against the schema, or every readable case of a run
with one line per file that could not be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdp_bench.results.io import read_json
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.migrate import migrate_case_result
from fsdp_bench.results.schema import STATUSES, ResultError, check_field_types, check_schema


def load_case_result(path: Path) -> dict[str, Any]:
    data = read_json(path)
    check_schema(path, data)
    for key in ("case_id", "case", "status"):
        if key not in data:
            raise ResultError(f"{path}: missing required field {key!r}")
    check_field_types(path, data)
    if data["status"] not in STATUSES:
        raise ResultError(f"{path}: unknown status {data['status']!r}; known: {', '.join(STATUSES)}")
    return migrate_case_result(data)



def load_run(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every readable case result of a run, and one line per file that could not be read."""
    layout = RunLayout(Path(run_dir))
    if not layout.root.is_dir():
        raise ResultError(f"{run_dir}: not a folder")
    results, problems = [], []
    for path in layout.result_files():
        try:
            results.append(load_case_result(path))
        except ResultError as exc:
            problems.append(str(exc))
    return results, problems
