"""The report page people read: report.md (renders on GitHub) and report.html (a browser, with
the best values highlighted in colour). Both come from one list of sections."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fsdp_bench.report.cost import time_blocks
from fsdp_bench.report.document import (
    Bullets,
    Cell,
    Document,
    Heading,
    Image,
    Paragraph,
    Rich,
    Row,
    Table,
    md_text,
    plain,
)
from fsdp_bench.report.document import render_html as document_html
from fsdp_bench.report.document import render_markdown as document_markdown
from fsdp_bench.report.table import MODEL_SETTING, REPORT_COLUMNS, best_index, learned
from fsdp_bench.results.metrics import M
from fsdp_bench.results.records import Environment, TuneAnswer
from fsdp_bench.results.schema import memory_unit

ENV_FIELDS = (
    ("host", "host"),
    ("platform", "platform"),
    ("cpu_count", "CPU cores"),
    ("gpu_count", "GPUs"),
    ("gpu_names", "GPU model"),
    ("driver", "driver"),
    ("python", "Python"),
    ("torch", "torch"),
    ("cuda", "CUDA"),
    ("nccl", "NCCL"),
    ("transformers", "transformers"),
    ("accelerate", "accelerate"),
    ("git_sha", "git sha"),
    ("git_dirty", "uncommitted changes"),
    ("utc_time", "started (UTC)"),
    ("pytorch_cuda_alloc_conf", "PYTORCH_CUDA_ALLOC_CONF"),
    ("planted_faults", "planted faults (FSDP_BENCH_FAULTS)"),
)


@dataclass
class Page:
    """Everything the page shows, already computed."""

    run_name: str
    env: Environment | None
    df: Any
    summary: Sequence[tuple[str, str]]
    charts: Sequence[Any] | None  # ChartOutcome; None: not drawn on request (--no-charts)
    problems: Sequence[str] = field(default_factory=list)
    files: Sequence[str] = field(default_factory=list)
    tuning: Sequence[TuneAnswer] = field(default_factory=list)  # --bench-tune answers


def format_value(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def _table_columns(df) -> list[tuple[str, str, float]]:
    """The report table's columns as (column, label, factor its values are shown times): a model
    column (its sequence length and precision too where a model ran at several, else rows would
    differ by nothing shown) when the run has more than one; a GiB column in MiB when its largest
    value is under 1 GiB (schema.memory_unit), as the terminal's and the summary's peaks are."""
    lead = [(MODEL_SETTING, "model", 1.0)] if MODEL_SETTING in df and df[MODEL_SETTING].nunique() > 1 else []
    columns = []
    for c, label in REPORT_COLUMNS:
        if c not in df or not df[c].notna().any():
            continue
        factor = 1.0
        if c.endswith("_gib"):
            factor, unit = memory_unit(max((v for v in df[c] if isinstance(v, (int, float)) and v == v), default=0.0))
            label = label.replace("(GiB)", f"({unit})")
        columns.append((c, label, factor))
    return lead + columns


def _env_rows(env: Environment | None) -> list[tuple[str, str]]:
    if env is None:
        return [("environment", "unknown: env.json missing or unreadable")]
    rows = [(label, format_value(env.get(key))) for key, label in ENV_FIELDS if env.get(key) not in (None, "", [])]
    if env.get("torch_info_error"):
        rows.append(("torch info", f"not collected: {env['torch_info_error']}"))
    return rows


def _failed(df):
    return df[df["status"] != "ok"] if "status" in df else df.iloc[0:0]


def _pct(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:+.1f}%"


PREDICTION_HEADERS = (
    "case",
    "predicted peak GiB (rank 0)",
    "measured peak GiB (rank 0)",
    "peak error",
    "predicted model state GiB",
    "measured model state GiB",
    "model state error",
)


@dataclass
class PredictionTable:
    """The "Predicted vs measured" rows, already formatted: each cell is (text, flagged)."""

    rows: list[list[tuple[str, bool]]]
    worst: tuple[float, str, str] | None  # (error %, "peak" or "model state", case id)
    peak_tolerance_pct: float
    state_tolerance_pct: float
    worst_peak: tuple[float, str] | None = None  # (peak error %, case id), among cases that trained


def prediction_table(df) -> PredictionTable | None:
    """analysis.fit's peak and model state beside the measurement for every ok case that
    recorded a prediction, the error in %, flagged over the tolerances in analysis.aggregate,
    and the worst error. None when no case has a prediction."""
    from fsdp_bench.analysis.aggregate import MODEL_STATE_PREDICTION_TOLERANCE_PCT as STATE_TOL
    from fsdp_bench.analysis.aggregate import PEAK_PREDICTION_TOLERANCE_PCT as PEAK_TOL

    if df.empty or M.predicted_peak_gib not in df or "status" not in df:
        return None
    found = df[(df["status"] == "ok") & df[M.predicted_peak_gib].notna()]
    if found.empty:
        return None
    table = PredictionTable([], None, PEAK_TOL, STATE_TOL)
    for _, r in found.iterrows():
        errors = []
        # A case that did not train runs a broken program (e.g. an optimizer with no state): its
        # error is shown, but the prediction's worst error is judged on programs that train (a
        # simulated rank's too: its memory is real, only its communication is not).
        trained = learned(r)
        for key, tol in ((M.peak_prediction_error_pct, PEAK_TOL), (M.model_state_prediction_error_pct, STATE_TOL)):
            err = r.get(key)
            missing = err is None or (isinstance(err, float) and math.isnan(err))
            errors.append((_pct(err), not missing and abs(err) > tol))
            if trained and not missing and (table.worst is None or abs(err) > abs(table.worst[0])):
                table.worst = (err, key.split("_prediction")[0].replace("_", " "), str(r["case_id"]))
            peak = key == M.peak_prediction_error_pct and trained and not missing
            if peak and (table.worst_peak is None or abs(err) > abs(table.worst_peak[0])):
                table.worst_peak = (err, str(r["case_id"]))
        plain = [
            format_value(r.get(c))
            for c in (
                M.predicted_peak_gib,
                M.rank0_peak_allocated_gib,
                M.predicted_model_state_gib,
                M.measured_model_state_gib,
            )
        ]
        label = str(r["case_id"]) + ("" if trained else " (did not train: not in the worst error)")
        table.rows.append(
            [
                (label, False),
                (plain[0], False),
                (plain[1], False),
                errors[0],
                (plain[2], False),
                (plain[3], False),
                errors[1],
            ]
        )
    return table


def _worst_lines(table: PredictionTable) -> list[str]:
    """The worst error of either prediction when the model state's is the worse, then the peak's
    own (issue #26's figure), both judged on the cases that trained. When the worst is the peak's,
    one line: the report printed the same figure twice (issue #39)."""
    lines = []
    w = table.worst
    if w is not None and (table.worst_peak is None or (w[0], w[2]) != table.worst_peak):
        lines.append(f"Worst prediction error: {_pct(w[0])} ({w[1]}) on {w[2]}.")
    if table.worst_peak is not None:
        lines.append(f"Worst peak prediction error: {_pct(table.worst_peak[0])} ({table.worst_peak[1]})")
    return lines


def prediction_blocks(df) -> list:
    """ "Predicted vs measured" ([] when no case has a prediction); flagged errors marked."""
    table = prediction_table(df)
    if table is None:
        return []
    rule = (
        f"Error = (predicted - measured) / measured; flagged ({{mark}}) above {table.peak_tolerance_pct:g}% for "
        f"the peak and {table.state_tolerance_pct:g}% for the model state."
    )
    note = Rich(
        "Prediction: `python -m fsdp_bench.fit`'s model (fp32 AdamW, estimated activations). "
        + rule.format(mark="**!**"),
        "Prediction: <code>python -m fsdp_bench.fit</code>'s model (fp32 AdamW, estimated activations). "
        + html.escape(rule.format(mark="red, !")),
    )
    rows = tuple(
        Row(tuple(Cell(text, left=i == 0, flagged=flagged) for i, (text, flagged) in enumerate(r))) for r in table.rows
    )
    blocks = [Heading("Predicted vs measured"), Paragraph(note, note=True), Table(PREDICTION_HEADERS, rows)]
    return blocks + [Paragraph(plain(line)) for line in _worst_lines(table)]


def prediction_section(df) -> list[str]:
    """The section in markdown, as lines (for tests and the terminal)."""
    return document_markdown(Document("", prediction_blocks(df))).split("\n")[2:]


def _comparison_blocks(df) -> list:
    if df.empty:
        return [Heading("Comparison table"), Paragraph(plain("No case results."))]
    columns = _table_columns(df)
    best = {c: best_index(df, c) for c, _, _ in columns}
    scope = (
        "Best value per metric (among cases that trained and did the same work per optimizer step: model, "
        "seq_len, tokens per step, precision)"
    )
    note = Rich(
        f"{scope} in **bold**. Every metric is in `comparison.csv`; per-rank numbers in `per_rank.csv`.",
        f"{scope} highlighted green; cases that did not finish in red. Every metric is in "
        "<a href='comparison.csv'>comparison.csv</a>.",
    )
    rows = []
    for idx, row in df.iterrows():
        bad = row["status"] != "ok"
        cells = []
        for c, _, factor in columns:
            value = row.get(c)
            text = format_value(value * factor if factor != 1.0 and isinstance(value, float) else value)
            strong = c == "status" and bad
            cells.append(
                Cell(
                    text.upper() if strong else text,
                    left=c in (MODEL_SETTING, "strategy", "optimizer_timing", "status"),
                    best=idx in best[c],
                    strong=strong,
                )
            )
        rows.append(Row(tuple(cells), bad=bad))
    return [
        Heading("Comparison table"),
        Paragraph(note, note=True),
        Table(tuple(label for _, label, _ in columns), tuple(rows)),
    ]


def _why_blocks(df) -> list:
    """'Why': each compare group's fastest case taken apart, and why every other trained case is
    slower (report.why); nothing when no case measured its parts."""
    from fsdp_bench.report.why import why_lines

    lines = why_lines(df)
    if not lines:
        return []
    note = (
        "Each case's step is taken apart from one untimed profiled probe step (analysis.attribution): compute, "
        "exposed communication, optimizer step, data loading and host time, each scaled to the case's measured "
        "median step; a slower case names the one or two parts that grew most. The parts are columns of "
        "comparison.csv (part_*_s_per_step, unscaled), the reasons its why_vs_best column."
    )
    return [Heading("Why"), Paragraph(plain(note), note=True), Bullets(tuple(plain(line.strip()) for line in lines))]


def _chart_blocks(page: Page) -> list:
    blocks: list = [Heading("Charts")]
    if page.charts is None:
        return [*blocks, Paragraph(plain("Not drawn: written with --no-charts (python visualize.py RUN draws them)."))]
    for outcome in page.charts:
        if outcome.path is not None:
            blocks += [Heading(outcome.chart.title, level=3), Image(outcome.chart.title, outcome.path.name)]
    skipped = [o for o in page.charts if o.path is None]
    if skipped:
        blocks += [
            Paragraph(plain("Not drawn (this run lacks their data):")),
            Bullets(tuple(plain(o.note) for o in skipped), note=True),
        ]
    return blocks


def _failed_blocks(df) -> list:
    failed = _failed(df)
    if failed.empty:
        return [Heading("Failed cases"), Paragraph(plain("None."))]
    rows = tuple(
        Row(
            (
                Cell(str(r["case_id"]), left=True),
                Cell(str(r["status"]).upper(), left=True),
                Cell(str(r.get("reason") or ""), left=True),
            ),
            bad=True,
        )
        for _, r in failed.iterrows()
    )
    return [Heading("Failed cases"), Table(("case", "status", "reason"), rows)]


def _summary_blocks(page: Page) -> list:
    items = tuple(
        Rich(f"**{md_text(q)}** {md_text(line)}", f"<b>{html.escape(q)}</b> {html.escape(line)}")
        for q, line in page.summary
    ) or (plain("No finished cases to summarize."),)
    blocks = [Heading("Summary"), Bullets(items)]
    if page.problems:
        blocks += [Heading("Problems reading this run"), Bullets(tuple(plain(p) for p in page.problems))]
    env = tuple(Row((Cell(k, left=True), Cell(v, left=True))) for k, v in _env_rows(page.env))
    return blocks + [Heading("Environment"), Table(("", ""), env, md_header_line="| | |")]


def _files_blocks(page: Page) -> list:
    if not page.files:
        return []
    links = tuple(Rich(f"[{n}]({n})", f"<a href='{html.escape(n)}'>{html.escape(n)}</a>") for n in page.files)
    return [Heading("Files"), Bullets(links)]


def _fmt(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def tuning_rows(answer: TuneAnswer, df=None) -> tuple[list[str], list[list[str]]]:
    """Every measured case of one tuning: predicted vs measured step time, speed, peak, cost. The
    peak column has one unit and each cell names its measure, read off the run's table (`df`): a
    case without a measured peak has only RSS (~0.3 GiB) beside the others' allocated MiB (issue #39;
    FSDP1 on CPU was one until its profiled peak)."""
    peaks = [r["peak_gib"] for r in answer["measured"] if isinstance(r.get("peak_gib"), (int, float))]
    factor, unit = memory_unit(max(peaks, default=0.0))
    head = [
        "case",
        "status",
        "repeat runs",
        "predicted step s (when chosen)",  # the model as it stood then: round 0's probes were chosen uncalibrated
        "measured step s",
        "error % (when chosen)",
        "tokens/s/device",
        f"peak {unit}",
        "fits budget",
        "case-seconds",
    ]
    rows = [
        [
            r["case_id"],
            r["status"],
            str(r["repeat_count"]),
            _fmt(r["predicted_step_s"], ".4g"),
            _fmt(r["measured_step_s"], ".4g"),
            _fmt(r["error_pct"], "+.0f"),
            _fmt(r["speed_tokens_per_s"], ",.0f"),
            _peak_cell(r.get("peak_gib"), factor, _peak_measure(df, r["case_id"])),
            "yes" if r["fits_budget"] else "NO",
            _fmt(r["case_seconds"], ".1f"),
        ]
        for r in answer["measured"]
    ]
    return head, rows


def _peak_measure(df, case_id: str) -> str:
    """Which peak the tuner read for a case (its first of reserved, allocated, RSS), in words."""
    names = {M.peak_reserved_gib: "reserved", M.peak_allocated_gib: "allocated", M.peak_rss_gib: "RSS"}
    if df is None or "case_id" not in df:
        return ""
    row = df[df["case_id"] == case_id]
    found = [word for column, word in names.items() if column in row and row[column].notna().any()]
    return found[0] if found else ""


def _peak_cell(value: Any, factor: float, measure: str) -> str:
    return "" if not isinstance(value, (int, float)) else f"{factor * value:.4g} {measure}".rstrip()


def _drift_sentence(answer: TuneAnswer) -> str:
    """The machine's drift measured during the tuning (analysis.drift), which every comparison
    was widened by; answers written before it was measured say nothing of it."""
    if "drift" not in answer:
        return "Drift: not recorded (an answer from before the tuner measured it)."
    drift = answer.get("drift")
    if drift is None:
        return "Drift: not measured (no case was measured twice)."
    verdict = "a single winner" if answer.get("single_winner") else "no single winner"
    return (
        f"Drift measured while tuning: one run's band +-{drift['one_run_band_pct']:.0f}% "
        f"({drift['dof']} degrees of freedom over {drift['pooled_cases']} case(s)); {verdict}."
    )


def tuning_lines(answer: TuneAnswer) -> list[str]:
    """The answer in sentences: the pick, its ties, why it stopped, what was skipped, the cost."""
    cost = answer["cost"]
    ratio = f"{100 * cost['ratio']:.0f}%" if cost.get("ratio") is not None else "?"
    budget = "no memory budget" if answer.get("budget_gib") is None else f"budget {answer['budget_gib']:g} GiB/device"
    lines = [
        f"Pick ({budget}): {answer.get('pick') or 'none'}.",
        "Tied with it within noise: " + (", ".join(answer["tied"]) if answer["tied"] else "none") + ".",
        f"Stopped: {answer['stopped']}.",
        _drift_sentence(answer),
        f"Cost: {cost['spent_case_s']:.0f} case-seconds on {cost['measured_cases']} of {cost['grid_cases']} cases, "
        f"{ratio} of the full grid's {cost['full_grid_case_s']:.0f} (estimated at {answer['max_repeats']} "
        "repeat(s), scaled by this run's measured cases).",
    ]
    model = answer.get("step_model") or {}
    if model:
        lines.append(
            f"Step-time model after calibration on {model['fitted_on_cases']} case(s): "
            f"{model['device_flops_per_s'] / 1e9:.3g} GFLOP/s per rank, {model['wire_bytes_per_s'] / 1e9:.3g} GB/s "
            f"on the wire, {1000 * model['micro_step_overhead_s']:.3g} ms per micro-step, error band "
            f"{model['model_error_pct']:.0f}% (the table's predictions are the model's when each case was chosen)."
        )
    for s in answer["skipped"]:
        lines.append(f"Skipped {s['case_id']}: {s['reason']}.")
    check = answer.get("boundary_check")
    if check:
        lines.append(
            f"Boundary check {check['case_id']}: predicted {check['predicted_peak_in_gib']:.4g} GiB, measured "
            f"{_fmt(check['measured_peak_in_gib'], '.4g') or 'not measured'} GiB."
        )
    return lines


def _tuning_blocks(page: Page) -> list:
    blocks: list = []
    for answer in page.tuning:
        head, rows = tuning_rows(answer, page.df)
        blocks += [
            Heading(f"Autotune: {answer['model']}"),
            Bullets(tuple(plain(line) for line in tuning_lines(answer))),
            Table(tuple(head), tuple(Row(tuple(Cell(c, left=i == 0) for i, c in enumerate(r))) for r in rows)),
        ]
    return blocks


def page_document(page: Page) -> Document:
    """The page, section by section, in the order a reader wants them."""
    sections = (
        _summary_blocks(page),
        _why_blocks(page.df),
        _comparison_blocks(page.df),
        _tuning_blocks(page),
        prediction_blocks(page.df),
        _chart_blocks(page),
        _failed_blocks(page.df),
        time_blocks(page.df),
        _files_blocks(page),
    )
    return Document(f"fsdp-bench report: {page.run_name}", [b for section in sections for b in section])


def render_markdown(page: Page) -> str:
    return document_markdown(page_document(page))


def render_html(page: Page) -> str:
    return document_html(page_document(page))
