"""Starting the fake-tensor estimator (`python -m fsdp_bench.worker.estimate`), one subprocess per
case, so the parent never imports torch; its answer is read from the JSON file it writes, never
from stdout. Used by `python -m fsdp_bench.fit --trace` (report.trace formats what it returns)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from fsdp_bench.plan.case import Case
from fsdp_bench.results.io import read_json, write_json_atomic
from fsdp_bench.results.records import CaseFields, PeakEstimate

ESTIMATOR = "fsdp_bench.worker.estimate"
ESTIMATE_TIMEOUT_S = 600.0


def run_estimator(case: Case, workdir: Path, timeout_s: float = ESTIMATE_TIMEOUT_S) -> PeakEstimate:
    """The estimator's JSON for `case`, or {"status": "failed", "reason": ...} with its last words."""
    case_path, out = workdir / f"{case.id}.case.json", workdir / f"{case.id}.estimate.json"
    write_json_atomic(case_path, case.to_dict(), shape=CaseFields, overwrite=True)
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", ESTIMATOR, "--case", str(case_path), "--out", str(out)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"no estimate within {timeout_s:.0f} s"}
    if done.returncode != 0 or not out.exists():
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return {"status": "failed", "reason": f"estimator exited {done.returncode}: {last}"}
    return read_json(out)


@contextmanager
def estimator(workdir: Path | None = None) -> Iterator[Callable[[Case], PeakEstimate]]:
    """run_estimator bound to a scratch folder (deleted after) or to `workdir` (kept)."""
    with tempfile.TemporaryDirectory(prefix="fsdp-bench-trace-") as scratch:
        yield lambda case: run_estimator(case, Path(workdir or scratch))
