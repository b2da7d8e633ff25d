"""Do verdicts survive noise? Back-to-back pairs of identical real sweeps compared with
`visualize.py --compare`, plus one pair whose second run is slowed on purpose.

    python scripts/measure_verdict_noise.py [--pairs 3] [--repeats 2] [--strategies ddp,fsdp2]
                                            [--batch-sizes 2,4] [--slow-fraction 0.3] [--workdir DIR]

For each identical pair (A then B, same grid, same machine): the compare's exit code, how many
cases it calls a regression (target: 0, exit 0), its verdict per case, and whether A and B give
the same recommendation (or both say tied). Then one pair whose second run has
FSDP_BENCH_FAULTS=slow@measure:0:F,slow@measure:1:F (each rank sleeps F, default 0.3, of its
fastest measured step inside every measured step):
the compare must exit 1 and name every slowed case. Prints one line per pair, the load average
before each sweep, and a closing tally; exits 1 when any target was missed.
"""

from __future__ import annotations

import argparse
import collections
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.report.recommend import recommend  # noqa: E402
from fsdp_bench.report.table import build_table  # noqa: E402
from fsdp_bench.report.writer import load_report_inputs  # noqa: E402

SWEEP_TEST = "def test_case(bench_case, bench_run):\n    bench_run(bench_case)\n"


def slow_spec(fraction: float) -> str:
    """Both ranks of every case slowed by `fraction` of their fastest measured step."""
    return f"slow@measure:0:{fraction:g},slow@measure:1:{fraction:g}"


def grid(args: argparse.Namespace) -> list[str]:
    return [
        "--bench-model",
        "gpt_tiny",
        "--bench-strategies",
        args.strategies,
        "--bench-batch-sizes",
        args.batch_sizes,
        "--bench-grad-accum",
        "1",
        "--bench-steps",
        "6",
        "--bench-warmup",
        "1",
        "--bench-seq-len",
        "32",
        "--bench-nproc",
        "2",
        "--bench-device",
        "cpu",
        "--bench-no-report",
        "--bench-no-probes",
        "--bench-repeats",
        str(args.repeats),
        "--bench-target-ci-pct",
        "3",
        "--bench-measure-cap-s",
        "2",
    ]


def _env(faults: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FSDP_BENCH_FAULTS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if faults:
        env["FSDP_BENCH_FAULTS"] = faults
    return env


def sweep(project: Path, name: str, args: argparse.Namespace, faults: str | None = None) -> tuple[Path, float]:
    """One sweep's run folder and the 1-minute load average when it started. A sweep with a case
    that did not finish (on a shared machine, e.g. a stray SIGTERM) is said and run again, up to
    twice: a failed case would be a regression that noise did not cause."""
    for attempt in range(3):
        results = project / f"{name}-{attempt}" if attempt else project / name
        load = os.getloadavg()[0]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                *grid(args),
                "--bench-results-dir",
                str(results),
            ],
            cwd=project,
            env=_env(faults),
            capture_output=True,
            text=True,
        )
        runs = [p for p in results.iterdir() if (p / "cases").is_dir()] if results.is_dir() else []
        if proc.returncode == 0 and len(runs) == 1:
            return runs[0], load
        reasons = sorted(
            {
                r.get("reason", "")
                for p in runs
                for r in map(_read, (p / "cases").glob("*.json"))
                if r.get("status") != "ok"
            }
        )
        print(
            f"  sweep {name}: pytest exit {proc.returncode}, not ok: {reasons or proc.stdout[-500:]}; again", flush=True
        )
    sys.exit(f"measure_verdict_noise: sweep {name} did not finish in 3 attempts")


def _read(path: Path) -> dict:
    import json

    return json.loads(path.read_text())


def compare(base: Path, new: Path, out: Path) -> tuple[int, list[str], dict[str, str]]:
    """(exit code, regressed case ids, verdict per case)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "visualize.py"), "--compare", str(base), str(new), "--out", str(out)],
        env=_env(),
        capture_output=True,
        text=True,
    )
    named = [line.split()[1].rstrip(":") for line in proc.stdout.splitlines() if line.startswith("REGRESSION ")]
    rows = {r["case_id"]: r["verdict"] for r in csv.DictReader((out / "compare.csv").open())}
    noise = next((line for line in proc.stdout.splitlines() if line.startswith("Run-to-run noise")), "")
    print(f"  {noise}", flush=True)
    return proc.returncode, named, rows


def leaders(run: Path) -> tuple[str, ...]:
    """The recommendation as a set of case ids: the one winner, or every case tied within noise."""
    results, _env_info, _problems = load_report_inputs(run)
    (rec,) = recommend(build_table(results))
    tied = rec.tied if len(rec.tied) > 1 else rec.picks[:1]
    return tuple(sorted(r["case_id"] for r in tied))


def agree(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Same winner, or both runs say tied (the tied sets may differ at their edge)."""
    return a == b or (len(a) > 1 and len(b) > 1)


def run(args: argparse.Namespace, project: Path) -> int:
    (project / "conftest.py").write_text('pytest_plugins = ["fsdp_bench.pytest_plugin"]\n')
    (project / "test_sweep.py").write_text(SWEEP_TEST)
    claimed, agreed, loads, verdicts = 0, 0, [], collections.Counter()
    started = time.monotonic()
    for pair in range(1, args.pairs + 1):
        (a, load_a), (b, load_b) = sweep(project, f"p{pair}a", args), sweep(project, f"p{pair}b", args)
        loads += [load_a, load_b]
        code, named, rows = compare(a, b, project / f"cmp{pair}")
        verdicts.update(rows.values())
        claimed += len(named)
        la, lb = leaders(a), leaders(b)
        agreed += agree(la, lb)
        print(
            f"pair {pair}: load {load_a:.1f}/{load_b:.1f}, compare exit {code}, {len(named)} regression(s) "
            f"{named}, verdicts {dict(collections.Counter(rows.values()))}; leaders A {list(la)} B {list(lb)} "
            f"-> {'same' if agree(la, lb) else 'DIFFERENT'}",
            flush=True,
        )
    base, load_base = sweep(project, "slow-base", args)
    slowed, load_slow = sweep(project, "slow-new", args, faults=slow_spec(args.slow_fraction))
    code, named, rows = compare(base, slowed, project / "cmp-slow")
    slow_ok = code == 1 and set(named) == set(rows)
    print(
        f"slow pair: load {load_base:.1f}/{load_slow:.1f}, compare exit {code}, named {sorted(named)} of "
        f"{len(rows)} cases, verdicts {dict(collections.Counter(rows.values()))}",
        flush=True,
    )
    print(
        f"tally: {args.pairs} identical pair(s), {claimed} claimed regression(s) (target 0); verdicts "
        f"{dict(verdicts)}; same recommendation or both tied in {agreed}/{args.pairs}; slowed pair "
        f"{'exit 1 naming every slowed case' if slow_ok else 'MISSED'}; load average 1 min at sweep starts "
        f"{min(loads + [load_base, load_slow]):.1f}-{max(loads + [load_base, load_slow]):.1f} on "
        f"{os.cpu_count()} cores; {time.monotonic() - started:.0f} s"
    )
    return 0 if claimed == 0 and agreed == args.pairs and slow_ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--strategies", default="ddp,fsdp2")
    parser.add_argument("--batch-sizes", default="2,4")
    parser.add_argument(
        "--slow-fraction", type=float, default=0.3, help="the slowed pair's planted slowdown (default 0.3: +30%%)"
    )
    parser.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    if args.pairs < 1 or args.repeats < 2:
        parser.error("--pairs must be >= 1 and --repeats >= 2 (a compare needs run-to-run noise)")
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return run(args, args.workdir)
    with tempfile.TemporaryDirectory(prefix="verdict-noise-") as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
