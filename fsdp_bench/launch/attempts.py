"""Earlier attempts in a run folder: which result a resume keeps, which plain result becomes the
tuner's repeat 1, and where an attempt that is not kept goes (cases/.attempts/, never
overwritten). Used by launch.session (no torch, no pytest)."""

from __future__ import annotations

import shutil
from pathlib import Path

from fsdp_bench.results.io import write_json_atomic
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.load import load_case_result
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import CaseResult
from fsdp_bench.results.schema import ResultError, is_current_ok


def load_or_none(path: Path) -> CaseResult | None:
    """A result file (of a case or one repeat), None when absent, a failed stand-in when unreadable."""
    if not path.exists():
        return None
    try:
        return load_case_result(path)
    except ResultError:
        return {"status": "failed"}


def has_repeats(merged: CaseResult | None, repeats: int) -> bool:
    """True when a merged result is ok with at least `repeats` repeats (not run again). An ok
    result of a plain sweep (no repeats list) is one repeat: the sweep's resume keeps it, and so
    does the tuner's."""
    return is_current_ok(merged) and (len(merged.get(M.repeats) or []) or 1) >= repeats


def promote_plain_result(run: RunLayout, case_id: str, merged: CaseResult | None) -> bool:
    """A plain sweep's ok result (no repeats list) that the tuner wants repeated becomes its
    repeat 1 (issue 37): its work files move into `repeat-1/` and its result to `repeat-1.json`,
    where the rounds keep it, instead of measuring repeat 1 again. True when it was promoted."""
    if not is_current_ok(merged) or merged.get(M.repeats) or run.result_file(case_id, repeat=1).exists():
        return False
    folder, target = run.case_dir(case_id).path, run.case_dir(case_id, repeat=1).path
    target.mkdir(parents=True, exist_ok=True)
    for entry in list(folder.iterdir()) if folder.is_dir() else []:
        if entry != target and not entry.name.startswith("repeat-"):
            shutil.move(str(entry), str(target / entry.name))
    write_json_atomic(run.result_file(case_id, repeat=1), {**merged, "repeat": 1}, shape=CaseResult)
    return True


def set_aside(run: RunLayout, case_id: str, *, repeat: int | None = None, with_dir: bool = True) -> None:
    """Keep an earlier attempt that is not kept (not ok, or measured by an older loop: results.schema.
    MEASUREMENT_VERSION), of the case or of one repeat, under cases/.attempts/
    instead of overwriting it. `with_dir=False`: the merged result only, the repeats stay."""
    run.attempts_dir.mkdir(exist_ok=True)
    name = case_id if repeat is None else run.repeat_attempt_name(case_id, repeat)
    n = 1
    while run.attempt_dir(name, n).exists():
        n += 1
    dest = run.attempt_dir(name, n)
    dest.mkdir()
    sources = [run.case_dir(case_id, repeat=repeat).path] if with_dir else []
    for src in (*sources, run.result_file(case_id, repeat=repeat)):
        if src.exists():
            shutil.move(str(src), str(dest / src.name))
