"""The GPU reference tables, built from the committed run folders of `scripts/gpu_reference.sh`
(results/reference/<gpu-name>/partN_NAME/<run>/ and each part's log): what the README and
docs/gpu-reference.md print, so every number there comes from those files (a test holds them).

    python -m fsdp_bench.report.reference results/reference/NVIDIA-H100-80GB-HBM3
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

from fsdp_bench.analysis.fit import predict_case_peak
from fsdp_bench.plan.case import Case, parse_mesh
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.load import load_environment_file, load_run
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import TableRow

GIB = 1 << 30
# One pytest run of a part: "== RUN: pytest ...", its estimate, and pytest's last line "... in 93.71s".
_RUN = re.compile(r"^== (?P<run>[\w.-]+): pytest ", re.M)
_ESTIMATE = re.compile(
    r"estimated duration (?P<m>\d+)m(?P<s>\d+)s for (?P<planned>\d+) case\(s\)(?: \((?P<kept>\d+) kept from the resumed run\))?"
)
_TOOK = re.compile(r"^\d+ (?:passed|deselected|failed|xfailed).* in (?P<s>[\d.]+)s", re.M)


def run_folders(gpu_dir: Path) -> list[Path]:
    """Every run folder of every part, in part order."""
    return sorted(p.parent for p in gpu_dir.glob("part*/*/sweep.json"))


def predicted_peak_gib(case: Case, world_size: int, torch_version: str | None) -> float:
    """This commit's prediction for a recorded case (the records keep the one of their run), for
    the torch the run used."""
    mesh = parse_mesh(case.mesh) if case.mesh else None
    return predict_case_peak(case, world_size, mesh=mesh, torch_version=torch_version)["peak_bytes"] / GIB


def run_torch_version(run_dir: Path) -> str | None:
    """The torch a run folder's env.json names (None: no env.json)."""
    env = RunLayout(run_dir).env_file
    return load_environment_file(env).get("torch") if env.is_file() else None


def case_rows(run_dir: Path) -> list[TableRow]:
    """One row per finished case of a run folder: what it reached and what was predicted."""
    rows, torch_version = [], run_torch_version(run_dir)
    for result in load_run(run_dir)[0]:
        metrics, case = result.get("metrics") or {}, Case.from_dict(result["case"])
        if result["status"] != "ok" or not metrics.get(M.peak_allocated_gib):
            continue
        world = result["ranks"][0]["world_size"] if result.get("ranks") else case.nproc
        predicted = predicted_peak_gib(case, world, torch_version)
        rows.append(
            {
                "run": f"{run_dir.parent.name}/{run_dir.name}",
                "case": case,
                "trained": metrics.get(M.params_changed) is True and not case.simulate,
                "tokens": metrics.get(M.tokens_per_s_per_device),
                "mfu": metrics.get(M.mfu_pct),
                "cv": metrics.get(M.step_time_cv_pct),
                "steps": metrics.get(M.steps_measured),
                "allocated": metrics[M.peak_allocated_gib],
                "predicted": predicted,
                "error_pct": 100 * (predicted / metrics[M.peak_allocated_gib] - 1),
            }
        )
    return rows


_STARTED = re.compile(r"; started (\S+) on ")


def _started(log_text: str) -> str:
    """The UTC start a part's log names on its first line (ISO 8601: sorts as text)."""
    found = _STARTED.search(log_text)
    return found[1] if found else ""


def part_timings(gpu_dir: Path) -> list[TableRow]:
    """Each pytest run of each part's log: its estimate, what it took, whether it was stopped, and
    how many ok cases it kept from an earlier run of the same folder (--bench-resume). Logs are
    read in the order they were started, so a resumed run's entry is its latest."""
    out = []
    logs = [(log, log.read_text(errors="replace")) for log in gpu_dir.glob("part*/part*.log")]
    for log, text in sorted(logs, key=lambda pair: (_started(pair[1]), pair[0].name)):
        starts = list(_RUN.finditer(text))
        for k, start in enumerate(starts):
            block = text[start.end() : starts[k + 1].start() if k + 1 < len(starts) else len(text)]
            estimate, took = _ESTIMATE.search(block), _TOOK.search(block)
            if estimate and took:
                out.append(
                    {
                        "key": f"{log.parent.name}/{start['run']}",
                        "estimated_s": 60 * int(estimate["m"]) + int(estimate["s"]),
                        "planned": int(estimate["planned"]),
                        "took_s": float(took["s"]),
                        "kept": int(estimate["kept"] or 0),
                        "interrupted": "\ninterrupted; " in block,
                    }
                )
    return out


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _what(case: Case) -> str:
    extras = [case.precision] + ["compile"] * case.compile + ["act-ckpt"] * case.act_ckpt
    extras += [f"sim ws{case.nproc}"] * bool(case.simulate) + [f"mesh {case.mesh}"] * bool(case.mesh)
    return f"{case.strategy} {case.model} bs{case.batch_size} x{case.seq_len} ({', '.join(extras)})"


def cases_table(rows: Iterable[TableRow]) -> str:
    lines = [
        "| run | case | tokens/s/device | MFU % | step CV % (steps) | peak allocated GiB | predicted GiB | error % |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        tokens = _num(r["tokens"], 0) + ("" if r["trained"] else " (not trained)")
        lines.append(
            f"| {r['run']} | {_what(r['case'])} | {tokens} | {_num(r['mfu'])} "
            f"| {_num(r['cv']) if r['steps'] > 1 else 'n/a'} ({r['steps']:.0f}) "
            f"| {r['allocated']:.2f} | {r['predicted']:.2f} | {r['error_pct']:+.1f} |"
        )
    return "\n".join(lines)


def summary_table(gpu_dir: Path) -> str:
    """One row per run folder: its best trained case, the CV and prediction-error ranges, minutes."""
    timings = {t["key"]: t for t in part_timings(gpu_dir)}
    lines = [
        "| run | ok cases | best tokens/s/device (case) | MFU % | step CV % | peak predicted vs allocated | minutes: measured / estimated |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for run_dir in run_folders(gpu_dir):
        rows = case_rows(run_dir)
        if not rows:
            continue
        trained = [r for r in rows if r["trained"] and r["tokens"]]
        best = max(trained, key=lambda r: r["tokens"]) if trained else None
        # a CV of one measured step is no spread at all (n/a in the case table)
        cvs = [r["cv"] for r in rows if r["cv"] is not None and r["steps"] > 1]
        errors = [r["error_pct"] for r in rows]
        t = timings.get(f"{run_dir.parent.name}/{run_dir.name}")
        minutes = f"{t['took_s'] / 60:.1f} / {t['estimated_s'] / 60:.1f}" if t else ""
        if t and t["interrupted"]:
            minutes += f" (stopped after {len(rows)} of {t['planned']})"
        elif t and t["kept"]:
            minutes += f" ({t['planned']} of them; {t['kept']} kept from an earlier run)"
        what = (
            f"{_num(best['tokens'], 0)} ({best['case'].strategy} bs{best['case'].batch_size})"
            if best
            else "none trained"
        )
        lines.append(
            f"| {run_dir.parent.name}/{run_dir.name} | {len(rows)} | {what} | {_num(best['mfu']) if best else ''} "
            f"| {f'{min(cvs):.1f}-{max(cvs):.1f}' if cvs else 'n/a'} | {min(errors):+.1f}% to {max(errors):+.1f}% "
            f"| {minutes} |"
        )
    return "\n".join(lines)


def fidelity_lines(gpu_dir: Path) -> str:
    """The suite-vs-bare-loop lines of every fidelity report (parts 4 and 6), with each paired
    repeat's gap where the report has them, and the bare loop's version it was measured against
    (its "bare loop version: N" line, else `-bN` in its name: scripts/bare_loop.py's
    BARE_LOOP_VERSION; 1 for reports with neither, whose bare loop did not do quite the suite's
    work: docs/gpu-reference.md)."""
    out = []
    for path in sorted(gpu_dir.glob("part*/fidelity-*.txt")):
        text = path.read_text()
        case = re.search(r"^case: (.+)$", text, re.M)
        ratio = re.search(r"suite median step time: .+$", text, re.M)
        pairs = re.search(r"^suite vs bare per paired repeat: (.+)$", text, re.M)
        version = re.search(r"^bare loop version: (\d+)$", text, re.M) or re.search(r"-b(\d+)$", path.stem)
        if case and ratio:
            against = f" (bare loop {version[1] if version else 1})"
            out.append(f"- {case[1]}{against}: {ratio[0]}" + (f" (pairs: {pairs[1].strip()})" if pairs else ""))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m fsdp_bench.report.reference results/reference/<gpu-name>", file=sys.stderr)
        return 2
    gpu_dir = Path(args[0])
    print(summary_table(gpu_dir), "", fidelity_lines(gpu_dir), "", sep="\n")
    print(cases_table(row for run_dir in run_folders(gpu_dir) for row in case_rows(run_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
