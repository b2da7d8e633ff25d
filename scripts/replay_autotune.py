"""What would `--bench-tune` spend and answer on a grid whose ground truth is already measured?
Replays the real tuning loop (launch.tune.run_tune, every decision analysis.tune's) against a run
folder of the full grid with repeats: each time the tuner runs a case, the run is one of that
case's measured repeats (its step-time median and its case-seconds), in an order drawn per seed.
No process is started, so a schedule change is judged on hundreds of replays in seconds before a
real tuning run (scripts/measure_autotune.py) checks it on the machine.

    python scripts/replay_autotune.py RUN_FOLDER [--repeats 2] [--seeds 50]
    python scripts/replay_autotune.py --from-truth TRUTH.json ...  (its folder rebuilt, approximately)

Prints, over the seeds: the tuner's cost (its case-seconds / the folder's full grid's), its runs
by purpose (probe, explore, control, repeat), how often it answers a single winner, how often its
pick is within the ground truth's noise of the truth's best (report.recommend.speeds_overlap) and
how often its answer (pick or tied set) holds the truth's best. A replay cannot show the
machine's drift between the truth and a later tuning: every run it draws was measured during the
truth. `--drift-sd-log` adds one: each run's step time drawn x a log-normal factor, so a schedule
change meant for a loaded machine is replayed at the drift a loaded run measured.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.analysis.tune import tune_requests  # noqa: E402
from fsdp_bench.launch.tune import RUN_PURPOSES, run_tune, runs_by_purpose  # noqa: E402
from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.plan.options import parse_sweep  # noqa: E402
from fsdp_bench.report.recommend import speeds_overlap  # noqa: E402
from fsdp_bench.results.layout import RunLayout  # noqa: E402
from fsdp_bench.results.metrics import M  # noqa: E402
from fsdp_bench.results.script_records import TRUTH_METRICS  # noqa: E402
from scripts.measure_autotune import remerged_results  # noqa: E402


class ReplaySession:
    """The one method of launch.session.SweepSession the tuner calls, served from measured repeats."""

    def __init__(self, truth: dict[str, dict], seed: int, root: Path, drift_sd_log: float = 0.0) -> None:
        self.truth, self.rng, self.layout = truth, random.Random(seed), RunLayout(root)
        self.order: dict[str, list[int]] = {}
        # the added drift draws from its own generator: the repeats' order stays the seed's
        self.drift_sd_log, self.drift_rng = drift_sd_log, random.Random(f"drift-{seed}")
        self.drift: dict[tuple[str, int], float] = {}

    def _drifted(self, case_id: str, i: int, step_s: float) -> float:
        """A run's step time under the added drift: one log-normal factor per run, drawn once, so
        the n-th run of a case keeps its value when the tuner asks for more repeats."""
        if not self.drift_sd_log:
            return step_s
        key = (case_id, i)
        if key not in self.drift:
            self.drift[key] = self.drift_rng.gauss(0.0, self.drift_sd_log)
        return step_s * math.exp(self.drift[key])

    def _draws(self, case_id: str, n: int) -> list[dict]:
        repeats = self.truth[case_id]["repeats"]
        if case_id not in self.order:
            self.order[case_id] = self.rng.sample(range(len(repeats)), len(repeats))
        return [repeats[self.order[case_id][i % len(repeats)]] for i in range(n)]

    def run_round(self, batch):
        for case, n in batch:
            yield case, self._result(case.id, n)

    def _result(self, case_id: str, n: int) -> dict:
        truth = self.truth[case_id]
        if truth["status"] != "ok":
            return {**truth, "repeats": truth["repeats"][:n]}
        draws = self._draws(case_id, n)
        medians = [self._drifted(case_id, i, d["step_time_s_median"]) for i, d in enumerate(draws)]
        m = truth["metrics"]
        step = statistics.median(medians)
        tokens = m[M.tokens_per_s_per_device] * m[M.step_time_s_median]  # per step and device
        metrics = {
            **m,
            M.step_time_s_median: step,
            M.step_time_s_median_ci_low: step * m[M.step_time_s_median_ci_low] / m[M.step_time_s_median],
            M.step_time_s_median_ci_high: step * m[M.step_time_s_median_ci_high] / m[M.step_time_s_median],
            M.tokens_per_s_per_device: tokens / step,
            M.repeat_step_time_s_medians: medians,
            M.repeat_spread_pct: 100 * (max(medians) - min(medians)) / step if n > 1 else None,
        }
        duration = sum(d["duration_s"] for d in draws)
        return {**truth, "metrics": metrics, "repeats": draws, "duration_s": duration}


def _row(result: dict) -> dict:
    return {"case_id": result["case_id"], **result["metrics"]}


def replay(run: Path, repeats: int, seeds: int, drift_sd_log: float = 0.0) -> list[dict]:
    """One judged answer per seed."""
    truth = {r["case_id"]: r for r in remerged_results(run)}
    if not truth:
        raise SystemExit(f"replay_autotune: {run} holds no case results")
    ok = {k: r for k, r in truth.items() if r["status"] == "ok" and r["metrics"].get(M.params_changed) is not False}
    best = max(ok.values(), key=lambda r: r["metrics"][M.tokens_per_s_per_device])
    grid_s = sum(r["duration_s"] or 0 for r in truth.values())
    (request,) = tune_requests([Case.from_dict(r["case"]) for r in truth.values()])
    out = []
    for seed in range(seeds):
        with tempfile.TemporaryDirectory() as tmp:
            session = ReplaySession(truth, seed, Path(tmp), drift_sd_log)
            answer = run_tune(
                session, request, budget_gib=None, max_repeats=repeats, time_budget_s=None, on_result=lambda c, r: None
            )
        pick = ok.get(answer["pick"])
        out.append(
            {
                "cost": answer["cost"]["spent_case_s"] / grid_s,
                "runs": sum(r["repeat_count"] for r in answer["measured"]),
                "single": answer["single_winner"],
                "within_noise": pick is not None and speeds_overlap(_row(best), _row(pick)),
                "holds_best": best["case_id"] in [answer["pick"], *answer["tied"]],
                "best_unmeasured": best["case_id"] in answer.get("unmeasured_within_noise", []),
                "tied": 1 + len(answer["tied"]),
                "unmeasured": len(answer.get("unmeasured_within_noise", [])),
                "purpose": runs_by_purpose(answer),
            }
        )
    return out


def truth_options(data: dict, grid: str) -> dict[str, str]:
    """A --truth-only file's grid options as parse_sweep reads them (a switch given as "on")."""
    raw, options = {"model": grid, "repeats": str(data["repeats"])}, data["options"]
    for i, flag in enumerate(options):
        if flag.startswith("--bench-"):
            value = options[i + 1] if i + 1 < len(options) and not options[i + 1].startswith("--") else "on"
            raw[flag.removeprefix("--bench-")] = value
    return raw


def rebuild_folder(truth_file: Path, root: Path) -> Path:
    """A run folder rebuilt from a committed --truth-only file, for when the truth's own folder is
    lost: each case's cases rebuilt from the file's options, its two repeats' step-time medians
    approximated as median x (1 -+ spread / 2) (the file keeps the merged median and the repeats'
    spread, not each repeat), its seconds split evenly. An approximation: say so beside its replays."""
    data = json.loads(truth_file.read_text())
    (truth,) = data["truths"]
    sweep = parse_sweep(truth_options(data, truth["grid"]), no_report=True, plan_only=True, root=ROOT)
    cases = {c.id: c for c in sweep.cases()}
    (root / "cases").mkdir(parents=True)
    for row in truth["cases"]:
        step, spread = row.get(M.step_time_s_median), (row.get(M.repeat_spread_pct) or 0.0) / 100
        medians = [step * (1 - spread / 2), step * (1 + spread / 2)] if step else []
        repeats = [{M.step_time_s_median: m, "duration_s": row["duration_s"] / 2} for m in medians]
        metrics = {k: row[k] for k in TRUTH_METRICS if k in row} | {M.repeat_step_time_s_medians: medians}
        result = {"case_id": row["case_id"], "status": row["status"], "case": cases[row["case_id"]].to_dict()}
        result |= {"metrics": metrics, "repeats": repeats, "duration_s": row["duration_s"]}
        (root / "cases" / f"{row['case_id']}.json").write_text(json.dumps(result))
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, nargs="?", help="run folder of the full grid with repeats")
    parser.add_argument("--from-truth", type=Path, default=None, help="a --truth-only file, its folder rebuilt")
    parser.add_argument("--repeats", type=int, default=2, help="the tuner's --bench-repeats")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument(
        "--drift-sd-log",
        type=float,
        default=0.0,
        help="a machine drifting while tuning: each run's step time x exp(N(0, this)), drawn per run "
        "(0.33 is the +-91%% per run a loaded gpt_tiny-96 run measured)",
    )
    args = parser.parse_args()
    if (args.run is None) == (args.from_truth is None):
        raise SystemExit("replay_autotune: give a run folder or --from-truth FILE, not both")
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run if args.from_truth is None else rebuild_folder(args.from_truth, Path(tmp) / "run")
        if not (run / "cases").is_dir():
            raise SystemExit(f"replay_autotune: {run} is not a run folder (no cases/)")
        rows = replay(run, args.repeats, args.seeds, args.drift_sd_log)
    n = len(rows)
    costs = sorted(r["cost"] for r in rows)
    print(
        f"{n} replays: cost median {100 * costs[n // 2]:.1f}% (max {100 * costs[-1]:.1f}%), "
        f"runs median {sorted(r['runs'] for r in rows)[n // 2]}, single winner {sum(r['single'] for r in rows)}, "
        f"pick within noise {sum(r['within_noise'] for r in rows)}, answer holds best {sum(r['holds_best'] for r in rows)}, "
        f"single winner outside noise {sum(r['single'] and not r['within_noise'] for r in rows)}, "
        f"tied set median {sorted(r['tied'] for r in rows)[n // 2]}, "
        f"best among the unmeasured within noise {sum(r['best_unmeasured'] for r in rows)}, "
        f"unmeasured named median {sorted(r['unmeasured'] for r in rows)[n // 2]} (max {max(r['unmeasured'] for r in rows)})"
    )
    purpose = sum((r["purpose"] for r in rows), Counter())
    print("runs per replay by purpose (mean): " + ", ".join(f"{k} {purpose[k] / n:.1f}" for k in RUN_PURPOSES))


if __name__ == "__main__":
    main()
