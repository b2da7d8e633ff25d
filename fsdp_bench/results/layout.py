"""Every path in a run folder, named once. Nothing else in the project spells a run-folder path.

results/<run-id>/
  env.json                      where the run came from (node 0)
  .lock                         flock held by the sweep using the folder
  sweep.json                    the settings the cases were measured with (node 0), for resume
  cases/<case-id>.json          merged result of one case (node 0), written once
  cases/<case-id>/              node 0's work folder for the case (`CaseDir`: case.json, log.txt,
                                torchrun.pid, rank-N.pid, rank-N.json)
  cases/<case-id>/repeat-<r>/   with --bench-repeats N > 1: repeat r's own work folder (`CaseDir`)
  cases/<case-id>/repeat-<r>.json  repeat r's result; cases/<case-id>.json merges the repeats
  cases/.attempts/<case-id>.N/  an earlier attempt a resume does not keep (not ok, older loop)
  cases/.attempts/<case-id>-repeat<r>.N/  the same for one repeat
  nodes/node-<R>/cases/...      node R > 0: the same work folders for its own ranks
  tune/tune-<model>.json        --bench-tune: the tuning's answer (pick, rounds, cost), rewritten
                                when a resumed tuning ends; its cases are ordinary results above
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from fsdp_bench.results.schema import ResultError


@dataclass(frozen=True)
class CaseDir:
    """One case's work folder on one node: what the runner writes and the ranks fill."""

    path: Path

    @property
    def case_file(self) -> Path:
        """The case the ranks run; its path is on every process's command line (see launch.processes)."""
        return self.path / "case.json"

    @property
    def log_file(self) -> Path:
        return self.path / "log.txt"

    def rank_file(self, rank: int) -> Path:
        return self.path / f"rank-{rank}.json"

    def pid_file(self, rank: int) -> Path:
        return self.path / f"rank-{rank}.pid"

    @property
    def launcher_pid_file(self) -> Path:
        """torchrun's own pid, written by it before anything runs (see launch.processes)."""
        return self.path / "torchrun.pid"

    def pid_files(self) -> list[Path]:
        return sorted(self.path.glob("rank-*.pid"))

    def trace_file(self, rank: int) -> Path:
        """Collective bytes counted from one profiled step (worker.comm_trace)."""
        return self.path / f"trace-rank-{rank}.json"

    @property
    def profile_dir(self) -> Path:
        return self.path / "tb_profile"

    def memory_snapshot_file(self, rank: int) -> Path:
        return self.path / f"memory_snapshot_rank{rank}.pickle"

    def oom_snapshot_file(self, rank: int) -> Path:
        return self.path / f"oom-snapshot-rank{rank}.pickle"


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run folder (`root`)."""

    root: Path

    @property
    def env_file(self) -> Path:
        return self.root / "env.json"

    @property
    def sweep_file(self) -> Path:
        """The sweep's measuring settings (`Sweep.fingerprint`), written when the run is created."""
        return self.root / "sweep.json"

    @property
    def lock_file(self) -> Path:
        return self.root / ".lock"

    @property
    def cases_dir(self) -> Path:
        return self.root / "cases"

    @property
    def attempts_dir(self) -> Path:
        return self.cases_dir / ".attempts"

    def attempt_dir(self, case_id: str, n: int) -> Path:
        return self.attempts_dir / f"{case_id}.{n}"

    def node_root(self, node_rank: int) -> Path:
        """Where node `node_rank` keeps its logs and rank files (node 0: the run folder itself)."""
        return self.root if node_rank == 0 else self.root / "nodes" / f"node-{node_rank}"

    def result_file(self, case_id: str, node_rank: int = 0, repeat: int | None = None) -> Path:
        """The merged result of a case (node 0), or node R's own summary of its part; with
        `repeat`, that repeat's result inside the case's folder."""
        if repeat is not None:
            return self.node_root(node_rank) / "cases" / case_id / f"repeat-{repeat}.json"
        return self.node_root(node_rank) / "cases" / f"{case_id}.json"

    def case_dir(self, case_id: str, node_rank: int = 0, repeat: int | None = None) -> CaseDir:
        path = self.node_root(node_rank) / "cases" / case_id
        return CaseDir(path / f"repeat-{repeat}" if repeat is not None else path)

    def case_dirs(self, case_id: str, nnodes: int, repeat: int | None = None) -> list[CaseDir]:
        """Every node's work folder for one case (or one repeat of it), node 0 first."""
        return [self.case_dir(case_id, r, repeat) for r in range(nnodes)]

    def repeat_attempt_name(self, case_id: str, repeat: int) -> str:
        """The name an earlier attempt of one repeat is set aside under (see `attempt_dir`)."""
        return f"{case_id}-repeat{repeat}"

    def unfinished_case_dirs(self) -> list[CaseDir]:
        """Node 0's work folders of cases that have no merged result yet, and their repeats'
        folders (.attempts/ excluded)."""
        if not self.cases_dir.is_dir():
            return []
        found = []
        for p in sorted(self.cases_dir.iterdir()):
            if p.is_dir() and not p.name.startswith(".") and not self.result_file(p.name).exists():
                found.append(CaseDir(p))
                found += [CaseDir(r) for r in sorted(p.glob("repeat-*")) if r.is_dir()]
        return found

    def tune_file(self, request_id: str) -> Path:
        """The answer of one `--bench-tune` item (tune-<model>): the pick, the rounds, the cost."""
        return self.root / "tune" / f"{request_id}.json"

    def tune_files(self) -> list[Path]:
        return sorted((self.root / "tune").glob("*.json"))

    def result_files(self) -> list[Path]:
        return sorted(self.cases_dir.glob("*.json"))

    def is_run(self) -> bool:
        return self.cases_dir.is_dir() or self.env_file.is_file()


def foreign_entries(path: Path) -> list[str]:
    """What an existing folder holds that a new named run would adopt or overwrite (another
    node's `nodes/` is expected); [] for a missing or empty folder."""
    if not path.exists():
        return []
    if not path.is_dir():
        return [path.name]
    return sorted(p.name for p in path.iterdir() if p.name != "nodes")


def create_run_dir(results_dir: Path) -> Path:
    """A new, never-used run folder. Names sort by start time; the pid and a counter keep two
    sweeps started in the same second apart, and mkdir's exclusivity settles any race."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1000):
        layout = RunLayout(results_dir / f"{stamp}-{os.getpid()}-{attempt}")
        try:
            layout.root.mkdir()
        except FileExistsError:
            continue
        layout.cases_dir.mkdir()
        return layout.root
    raise ResultError(f"{results_dir}: could not create a new run folder")


def newest_run(results_dir: Path) -> Path:
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ResultError(f"{results_dir}: no results folder")
    runs = sorted((p for p in results_dir.iterdir() if p.is_dir() and RunLayout(p).is_run()), key=lambda p: p.name)
    if not runs:
        raise ResultError(f"{results_dir}: holds no runs (run `pytest benchmarks` first)")
    return runs[-1]
