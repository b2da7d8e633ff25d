"""Will it fit? as files: fit.csv and one chart per model (predicted peak per device against
world size), and the command that writes them.

    python -m fsdp_bench.fit --models gpt_124m,gpt_350m --device-memory-gib 80 --out fit/
    python -m fsdp_bench.fit --calibrate results/<run>   # activation bytes measured by a run
    python -m fsdp_bench.fit --trace --models llama3_1b --strategies fsdp2 --world-sizes 512 \
        --batch-size 1 --seq-len 2048     # the fake-tensor estimator's peak beside the fast model's
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from pathlib import Path

from fsdp_bench.analysis.fit import WORLD_SIZES, calibrate_from_results, fit_table, fit_work_problem, gib_text
from fsdp_bench.analysis.host_memory import host_check
from fsdp_bench.plan.case import LOSSES, CaseError
from fsdp_bench.plan.catalog import DEFAULT_PRECISION, PRECISIONS, STRATEGIES
from fsdp_bench.plan.devices import available_host_bytes, resolve_device
from fsdp_bench.plan.option_values import parse_models, positive_gib, positive_int, writable_dir
from fsdp_bench.plan.options import OPTIONS
from fsdp_bench.report.charts.style import pyplot, save_figure
from fsdp_bench.report.trace import trace_cases, trace_line, trace_rows
from fsdp_bench.results.io import write_text_atomic
from fsdp_bench.results.layout import RunLayout
from fsdp_bench.results.load import load_run
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import TableRow
from fsdp_bench.results.schema import GIB


def write_fit(rows: list[TableRow], out: Path) -> list[Path]:
    """fit.csv and one chart per model: predicted peak per device against world size."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "fit.csv"
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(csv_path, text.getvalue())  # whole or not at all, as every other file the report writes
    written = [csv_path]
    plt = pyplot()
    for model in dict.fromkeys(r["model"] for r in rows):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        mine = [r for r in rows if r["model"] == model]
        for strategy in dict.fromkeys(r["strategy"] for r in mine):
            pts = [r for r in mine if r["strategy"] == strategy]
            ax.plot([r["world_size"] for r in pts], [r[M.predicted_peak_gib] for r in pts], marker="o", label=strategy)
        ax.axhline(mine[0]["device_memory_gib"], color="red", linestyle="--", label="device memory")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("world size (devices)")
        ax.set_ylabel("predicted peak memory per device (GiB)")
        ax.set_title(f"Will it fit? {model}, batch {mine[0]['batch_size']}/device, seq {mine[0]['seq_len']}")
        ax.legend(fontsize=7)
        path = out / f"fit_{re.sub(r'[^A-Za-z0-9_.-]+', '_', model).strip('_')}.png"  # hf:PATH too
        save_figure(fig, path)
        written.append(path)
    return written


class _OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line naming the problem, exit 2 (argparse would add a usage block)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _calibration_run(option: str, raw: str) -> Path:
    path = Path(raw)
    if not RunLayout(path).cases_dir.is_dir():
        raise CaseError(f"{option}: {raw!r} is not a run folder (no cases/ inside)")
    return path


# Each argument read as the sweep reads its --bench-* twin (plan.options), so the same text is
# refused by both with the same line, before anything is computed or written.
_CHECKS = {
    "models": ("--models", parse_models),
    "strategies": ("--strategies", OPTIONS["strategies"][1]),
    "world_sizes": ("--world-sizes", OPTIONS["simulate-world-size"][1]),
    "device_memory_gib": ("--device-memory-gib", positive_gib),
    "device": ("--device", OPTIONS["device"][1]),
    "seq_len": ("--seq-len", positive_int),
    "batch_size": ("--batch-size", positive_int),
    "calibrate": ("--calibrate", _calibration_run),
    "out": ("--out", writable_dir),
}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _OneLineParser(prog="python -m fsdp_bench.fit", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt_124m,gpt_350m,linear_odsc")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--world-sizes", default=",".join(map(str, WORLD_SIZES)))
    parser.add_argument("--device-memory-gib", default="80")
    parser.add_argument(
        "--device",
        default="auto",
        help="auto, cpu or cuda (as --bench-device); on cpu a row fits only where the sweep's host-memory guard "
        "would launch its case",
    )
    parser.add_argument("--seq-len", default="1024")
    parser.add_argument("--batch-size", default="8")
    parser.add_argument(
        "--precision",
        choices=tuple(PRECISIONS),
        default=DEFAULT_PRECISION,
        help="compute precision (as --bench-precision)",
    )
    parser.add_argument(
        "--loss", choices=LOSSES, default="full", help="cross-entropy: full or chunked (as --bench-loss)"
    )
    parser.add_argument("--calibrate", default=None, help="run folder whose ok cases give activation bytes")
    parser.add_argument("--out", default="fit")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="per case, the fake-tensor estimator's peak (a subprocess) beside the fast model's",
    )
    args = parser.parse_args(argv)
    try:
        for key, (option, check) in _CHECKS.items():
            if getattr(args, key) is not None:
                setattr(args, key, check(option, getattr(args, key)))
        rows = len(args.strategies) * len(args.world_sizes)
        for model in args.models:
            if problem := fit_work_problem(model, rows):
                raise CaseError(f"--models: {problem}")
    except (CaseError, ValueError) as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None, *, estimator=None, import_bytes=None) -> int:
    """`estimator`: what `--trace` runs each case through, launch.estimate.estimator; `import_bytes`:
    () -> what `import torch` costs a worker (launch.environment.torch_import_bytes), asked only
    for a CPU table (both handed in by fsdp_bench.fit: launching processes is launch/'s, which
    report/ does not import)."""
    args = _parse_args(argv)
    models = args.models
    if args.trace:
        if estimator is None:
            raise ValueError("--trace needs the estimator: run python -m fsdp_bench.fit")
        return print_trace(args, models, estimator)
    calibration = None
    if args.calibrate is not None:
        calibration = calibrate_from_results(load_run(args.calibrate)[0])
    device = resolve_device(args.device)
    try:
        rows = fit_table(
            models,
            args.strategies,
            device_memory_gib=args.device_memory_gib,
            seq_len=args.seq_len,
            batch_size=args.batch_size,
            world_sizes=list(args.world_sizes),
            calibration=calibration,
            precision=args.precision,
            loss=args.loss,
            device=device,
            host_check=host_check(available_host_bytes(), import_bytes and import_bytes()) if device == "cpu" else None,
        )
    except ValueError as exc:  # e.g. a Hugging Face model_type without a shape model
        print(f"python -m fsdp_bench.fit: error: {exc}", file=sys.stderr)
        return 2
    budget = args.device_memory_gib * GIB
    for row in rows:  # enough digits that a peak just over the budget never prints as the budget
        print(
            f"{row['model']} {row['strategy']} ws{row['world_size']} batch {row['batch_size']}: predicted peak "
            f"{gib_text(row[M.predicted_peak_gib] * GIB, budget)} ({row['peak_phase']}) of "
            f"{gib_text(budget)}, fits with a {row['fit_margin']:.0%} margin: {'yes' if row['fits'] else 'no'}; "
            f"largest batch that fits: {row['max_batch_size']}"
            + (f"; host memory: {row['host_refusal']}" if row["host_refusal"] else "")
        )
    for path in write_fit(rows, args.out):
        print(path)
    return 0


def print_trace(args: argparse.Namespace, models: tuple[str, ...], estimator) -> int:
    """`--trace`: one line per case; bad input is one line on stderr and exit 2."""
    try:
        cases = trace_cases(
            models,
            list(args.strategies),
            list(args.world_sizes),
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            precision=args.precision,
            loss=args.loss,
        )
    except (CaseError, ValueError) as exc:  # a combination no case allows (arguments were checked)
        print(f"python -m fsdp_bench.fit --trace: error: {exc}", file=sys.stderr)
        return 2
    failed = 0
    with estimator() as estimate_of:
        for row in trace_rows(cases, estimate_of):
            print(trace_line(row), flush=True)
            failed += row["estimate"].get("status") == "failed"
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
