"""history.csv, history.md, history.html and history.png for `visualize.py --history`
(report/history.py computes them)."""

from __future__ import annotations

from pathlib import Path

from fsdp_bench.report import document as doc
from fsdp_bench.report.document import Bullets, Cell, Heading, Image, Paragraph, Row, Table, plain
from fsdp_bench.report.history import History, run_labels
from fsdp_bench.results.io import write_text_atomic
from fsdp_bench.results.metrics import M
from fsdp_bench.results.stats import CONFIDENCE_PCT


def _num(value, spec: str) -> str:
    return "" if value is None or value != value else format(value, spec)


def _case_table(history: History, case_id: str) -> Table:
    rows = []
    for r in (r for r in history.rows if r["case_id"] == case_id):
        low, high = r["tokens_per_s_per_device_ci_low"], r["tokens_per_s_per_device_ci_high"]
        cells = (
            Cell(r["run"], left=True),
            Cell(_num(r[M.tokens_per_s_per_device], ",.0f")),
            Cell("" if low is None else f"{low:,.0f}..{high:,.0f}"),
            Cell(_num(r[M.peak_allocated_gib], ".3f")),
            Cell(_num(r["step_time_change_pct"], "+.1f")),
            Cell(_num(r["step_time_detectable_change_pct"], "+.0f")),
            Cell(r["verdict"] or "", left=True, flagged=r["flagged"]),
            Cell(r["reference_run"] or "", left=True),
        )
        rows.append(Row(cells, bad=r["status"] != "ok"))
    header = (
        "run",
        "tokens/s/device",
        f"{CONFIDENCE_PCT}% interval",
        "peak GiB",
        "step time change %",
        "detectable %",
        "verdict",
        "against",
    )
    return Table(header, tuple(rows))


def history_document(history: History, threshold_pct: float) -> doc.Document:
    flagged = [f"{run}: {', '.join(cases)}" for run, cases in history.flagged.items()]
    blocks: list = [
        Paragraph(
            plain(
                f"{len(history.runs)} runs in order: {', '.join(run_labels(history.runs))}. Each run is "
                f"judged as visualize.py --compare judges it (run-to-run noise from the repeats, threshold "
                f"{threshold_pct:g}%) against the newest earlier run that was not flagged."
            ),
            note=True,
        ),
        Heading("Flagged runs"),
        Bullets(tuple(plain(f) for f in flagged)) if flagged else Paragraph(plain("None: no change beyond noise.")),
        Image("tokens/s per device and peak memory across runs", "history.png"),
    ]
    if history.notes:
        blocks += [Heading("Notes"), Bullets(tuple(plain(n) for n in history.notes))]
    for case_id in dict.fromkeys(r["case_id"] for r in history.rows):
        blocks += [Heading(case_id, level=3), _case_table(history, case_id)]
    return doc.Document("History", blocks)


def write_history(history: History, out_dir: Path, *, threshold_pct: float) -> list[Path]:
    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {ext: out_dir / f"history.{ext}" for ext in ("csv", "md", "html", "png")}
    write_text_atomic(paths["csv"], pd.DataFrame(history.rows).to_csv(index=False))
    document = history_document(history, threshold_pct)
    write_text_atomic(paths["md"], doc.render_markdown(document))
    write_text_atomic(paths["html"], doc.render_html(document))
    plot_history(history, paths["png"])
    return list(paths.values())


def plot_history(history: History, path: Path) -> None:
    """Per case: tokens/s per device with its interval (error bars) and peak memory, by run;
    flagged runs in red."""
    from fsdp_bench.report.charts.style import pyplot, save_figure

    plt = pyplot()
    cases = list(dict.fromkeys(r["case_id"] for r in history.rows))
    names = run_labels(history.runs)
    fig, (speed, memory) = plt.subplots(2, 1, figsize=(max(6, 1.2 * len(names) + 3) + 4, 8), sharex=True)
    for case_id in cases:
        rows = [r for r in history.rows if r["case_id"] == case_id and r[M.tokens_per_s_per_device]]
        x = [r["run_order"] for r in rows]
        y = [r[M.tokens_per_s_per_device] for r in rows]
        err = [
            [0.0, 0.0]
            if r["tokens_per_s_per_device_ci_low"] is None
            else [v - r["tokens_per_s_per_device_ci_low"], r["tokens_per_s_per_device_ci_high"] - v]
            for r, v in zip(rows, y)
        ]
        line = speed.errorbar(x, y, yerr=list(zip(*err)) if err else None, marker="o", capsize=3, label=case_id)
        bad = [(r["run_order"], r[M.tokens_per_s_per_device]) for r in rows if r["flagged"]]
        if bad:
            speed.scatter(*zip(*bad), s=120, facecolors="none", edgecolors="#c0392b", linewidths=2, zorder=5)
        mem = [(r["run_order"], r[M.peak_allocated_gib]) for r in rows if r[M.peak_allocated_gib] is not None]
        if mem:
            memory.plot(*zip(*mem), marker="o", color=line[0].get_color())
    speed.set_ylabel(f"tokens/s per device ({CONFIDENCE_PCT}% interval)")
    speed.set_title("Across runs; red rings: changed beyond noise (visualize.py --compare's verdict)")
    speed.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))  # many cases: beside, not over
    memory.set_ylabel("peak allocated (GiB)")
    memory.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    save_figure(fig, path)
