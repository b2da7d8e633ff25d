"""The report page people read: report.md (renders on GitHub) and report.html (a browser, with
the best values highlighted in colour). Both come from one list of sections."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from fsdp_bench.report.table import REPORT_COLUMNS, best_index, did_train
from fsdp_bench.report.cost import time_html, time_markdown
from fsdp_bench.results.metrics import M

ENV_FIELDS = (("host", "host"), ("platform", "platform"), ("cpu_count", "CPU cores"), ("gpu_count", "GPUs"),
              ("gpu_names", "GPU model"), ("driver", "driver"), ("python", "Python"), ("torch", "torch"),
              ("cuda", "CUDA"), ("nccl", "NCCL"), ("transformers", "transformers"), ("accelerate", "accelerate"),
              ("git_sha", "git sha"), ("git_dirty", "uncommitted changes"), ("utc_time", "started (UTC)"),
              ("pytorch_cuda_alloc_conf", "PYTORCH_CUDA_ALLOC_CONF"))


@dataclass
class Page:
    """Everything the page shows, already computed."""

    run_name: str
    env: dict[str, Any] | None
    df: Any
    summary: Sequence[tuple[str, str]]
    charts: Sequence[Any]  # ChartOutcome
    problems: Sequence[str] = field(default_factory=list)
    files: Sequence[str] = field(default_factory=list)
    tuning: Sequence[dict[str, Any]] = field(default_factory=list)  # --bench-tune answers


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


def _table_columns(df) -> list[tuple[str, str]]:
    if len(df.get("model", [])) and df["model"].nunique() > 1:
        lead = [("model", "model")]
    else:
        lead = []
    return lead + [(c, label) for c, label in REPORT_COLUMNS if c in df and df[c].notna().any()]


def _env_rows(env: dict[str, Any] | None) -> list[tuple[str, str]]:
    if env is None:
        return [("environment", "unknown: env.json missing or unreadable")]
    rows = [(label, format_value(env.get(key))) for key, label in ENV_FIELDS if env.get(key) not in (None, "", [])]
    if env.get("torch_info_error"):
        rows.append(("torch info", f"not collected: {env['torch_info_error']}"))
    return rows


def _failed(df):
    return df[df["status"] != "ok"] if "status" in df else df.iloc[0:0]


_MD_ESCAPES = {"\\": "\\\\", "|": "\\|", "`": "\\`", "*": "\\*", "[": "\\[", "]": "\\]", "<": "&lt;", ">": "&gt;",
               "&": "&amp;", "\n": " ", "\r": " "}


def _md_cell(text: str) -> str:
    """Text from a result file as one inert markdown table cell: no links, code, HTML or emphasis
    (`_` inside words is plain text in CommonMark, so case ids stay readable)."""
    return "".join(_MD_ESCAPES.get(ch, ch) for ch in str(text))


def _pct(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:+.1f}%"


PREDICTION_HEADERS = ("case", "predicted peak GiB (rank 0)", "measured peak GiB (rank 0)", "peak error", "predicted model state GiB",
                      "measured model state GiB", "model state error")


@dataclass
class PredictionTable:
    """The "Predicted vs measured" rows, already formatted: each cell is (text, flagged)."""

    rows: list[list[tuple[str, bool]]]
    worst: tuple[float, str, str] | None  # (error %, "peak" or "model state", case id)
    peak_tolerance_pct: float
    state_tolerance_pct: float


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
        # error is shown, but the prediction's worst error is judged on programs that train.
        trained = did_train(r)
        for key, tol in ((M.peak_prediction_error_pct, PEAK_TOL), (M.model_state_prediction_error_pct, STATE_TOL)):
            err = r.get(key)
            missing = err is None or (isinstance(err, float) and math.isnan(err))
            errors.append((_pct(err), not missing and abs(err) > tol))
            if trained and not missing and (table.worst is None or abs(err) > abs(table.worst[0])):
                table.worst = (err, key.split("_prediction")[0].replace("_", " "), str(r["case_id"]))
        plain = [format_value(r.get(c)) for c in (M.predicted_peak_gib, "rank0_peak_allocated_gib",
                                                   M.predicted_model_state_gib, M.measured_model_state_gib)]
        label = str(r["case_id"]) + ("" if trained else " (did not train: not in the worst error)")
        table.rows.append([(label, False), (plain[0], False), (plain[1], False), errors[0],
                           (plain[2], False), (plain[3], False), errors[1]])
    return table


def _worst_line(table: PredictionTable) -> str | None:
    w = table.worst
    return None if w is None else f"Worst prediction error: {_pct(w[0])} ({w[1]}) on {w[2]}."


def prediction_section(df) -> list[str]:
    """"Predicted vs measured" in markdown ([] when no case has a prediction); flagged errors
    carry **!**."""
    table = prediction_table(df)
    if table is None:
        return []
    out = ["## Predicted vs measured", "",
           f"Prediction: `python -m fsdp_bench.fit`'s model (fp32 AdamW, estimated activations). Error = "
           f"(predicted - measured) / measured; flagged (**!**) above {table.peak_tolerance_pct:g}% for the peak and "
           f"{table.state_tolerance_pct:g}% for the model state.", "",
           "| " + " | ".join(PREDICTION_HEADERS) + " |", "|" + "---|" * len(PREDICTION_HEADERS)]
    out += ["| " + " | ".join(_md_cell(text) + (" **!**" if flagged else "") for text, flagged in row) + " |"
            for row in table.rows]
    worst = _worst_line(table)
    return out + [""] + ([_md_cell(worst), ""] if worst else [])


def prediction_html(df) -> list[str]:
    """The same section for report.html ([] when no case has a prediction); flagged cells are
    red and carry "!", every text escaped."""
    table = prediction_table(df)
    if table is None:
        return []
    e = html.escape
    out = ["<h2>Predicted vs measured</h2>",
           f"<p class=note>Prediction: <code>python -m fsdp_bench.fit</code>'s model (fp32 AdamW, estimated "
           f"activations). Error = (predicted - measured) / measured; flagged (red, !) above "
           f"{table.peak_tolerance_pct:g}% for the peak and {table.state_tolerance_pct:g}% for the model state.</p>",
           "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in PREDICTION_HEADERS) + "</tr>"]
    for row in table.rows:
        cells = [f"<td class=t>{e(row[0][0])}</td>"]
        cells += [f"<td class=flag>{e(text)} !</td>" if flagged else f"<td>{e(text)}</td>" for text, flagged in row[1:]]
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    worst = _worst_line(table)
    return out + ([f"<p>{e(worst)}</p>"] if worst else [])


def _fmt(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def tuning_rows(answer: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Every measured case of one tuning: predicted vs measured step time, speed, peak, cost."""
    head = ["case", "status", "repeat runs", "predicted step s", "measured step s", "error %", "tokens/s/device",
            "peak GiB", "fits budget", "case-seconds"]
    rows = [[r["case_id"], r["status"], str(r["repeat_count"]), _fmt(r["predicted_step_s"], ".4g"),
             _fmt(r["measured_step_s"], ".4g"), _fmt(r["error_pct"], "+.0f"), _fmt(r["speed_tokens_per_s"], ",.0f"),
             _fmt(r["peak_gib"], ".4g"), "yes" if r["fits_budget"] else "NO", _fmt(r["case_seconds"], ".1f")]
            for r in answer["measured"]]
    return head, rows


def tuning_lines(answer: dict[str, Any]) -> list[str]:
    """The answer in sentences: the pick, its ties, why it stopped, what was skipped, the cost."""
    cost = answer["cost"]
    ratio = f"{100 * cost['ratio']:.0f}%" if cost.get("ratio") is not None else "?"
    budget = "no memory budget" if answer.get("budget_gib") is None else f"budget {answer['budget_gib']:g} GiB/device"
    lines = [f"Pick ({budget}): {answer.get('pick') or 'none'}.",
             "Tied with it within noise: " + (", ".join(answer["tied"]) if answer["tied"] else "none") + ".",
             f"Stopped: {answer['stopped']}.",
             f"Cost: {cost['spent_case_s']:.0f} case-seconds on {cost['measured_cases']} of {cost['grid_cases']} cases, "
             f"{ratio} of the full grid's {cost['full_grid_case_s']:.0f} (estimated at {answer['max_repeats']} "
             "repeat(s), scaled by this run's measured cases)."]
    model = answer.get("step_model") or {}
    if model:
        lines.append(f"Step-time model after calibration on {model['fitted_on_cases']} case(s): "
                     f"{model['device_flops_per_s'] / 1e9:.3g} GFLOP/s per rank, {model['wire_bytes_per_s'] / 1e9:.3g} GB/s "
                     f"on the wire, {1000 * model['micro_step_overhead_s']:.3g} ms per micro-step, error band "
                     f"{model['model_error_pct']:.0f}%.")
    for s in answer["skipped"]:
        lines.append(f"Skipped {s['case_id']}: {s['reason']}.")
    check = answer.get("boundary_check")
    if check:
        lines.append(f"Boundary check {check['case_id']}: predicted {check['predicted_peak_in_gib']:.4g} GiB, measured "
                     f"{_fmt(check['measured_peak_in_gib'], '.4g') or 'not measured'} GiB.")
    return lines


def tuning_section(page: Page) -> list[str]:
    out = []
    for answer in page.tuning:
        out += [f"## Autotune: {answer['model']}", ""] + [f"- {_md_cell(line)}" for line in tuning_lines(answer)] + [""]
        head, rows = tuning_rows(answer)
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows] + [""]
    return out


def tuning_html(page: Page) -> list[str]:
    e = html.escape
    out = []
    for answer in page.tuning:
        out += [f"<h2>Autotune: {e(answer['model'])}</h2><ul>"]
        out += [f"<li>{e(line)}</li>" for line in tuning_lines(answer)] + ["</ul>"]
        head, rows = tuning_rows(answer)
        out += ["<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"]
        out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows] + ["</table>"]
    return out


def render_markdown(page: Page) -> str:
    out = [f"# fsdp-bench report: {page.run_name}", ""]
    out += ["## Summary", ""]
    out += [f"- **{q}** {line}" for q, line in page.summary] or ["- No finished cases to summarize."]
    out += [""]
    if page.problems:
        out += ["## Problems reading this run", ""] + [f"- {_md_cell(p)}" for p in page.problems] + [""]
    out += ["## Environment", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_md_cell(v)} |" for k, v in _env_rows(page.env)] + [""]
    out += ["## Comparison table", ""]
    df = page.df
    if df.empty:
        out += ["No case results.", ""]
    else:
        columns = _table_columns(df)
        best = {c: best_index(df, c) for c, _ in columns}
        out += ["Best value per metric (among cases that trained and did the same work per optimizer step: model, seq_len, tokens per step, precision) in **bold**. Every metric is in "
                "`comparison.csv`; per-rank numbers in `per_rank.csv`.", ""]
        out += ["| " + " | ".join(label for _, label in columns) + " |", "|" + "---|" * len(columns)]
        for idx, row in df.iterrows():
            cells = []
            for c, _ in columns:
                text = _md_cell(format_value(row.get(c)))
                if c == "status" and row["status"] != "ok":
                    text = f"**{text.upper()}**"
                cells.append(f"**{text}**" if idx in best[c] and text else text)
            out.append("| " + " | ".join(cells) + " |")
        out += [""]
    out += prediction_section(df)
    out += tuning_section(page)
    out += ["## Charts", ""]
    for outcome in page.charts:
        if outcome.path is not None:
            out += [f"### {outcome.chart.title}", "", f"![{outcome.chart.title}]({outcome.path.name})", ""]
    skipped = [o for o in page.charts if o.path is None]
    if skipped:
        out += ["Not drawn (this run lacks their data):", ""] + [f"- {_md_cell(o.note)}" for o in skipped] + [""]
    out += ["## Failed cases", ""]
    failed = _failed(df)
    if failed.empty:
        out += ["None.", ""]
    else:
        out += ["| case | status | reason |", "|---|---|---|"]
        out += [f"| {_md_cell(r['case_id'])} | {_md_cell(str(r['status']).upper())} | "
                f"{_md_cell(str(r.get('reason') or ''))} |"
                for _, r in failed.iterrows()] + [""]
    out += time_markdown(df)
    if page.files:
        out += ["## Files", ""] + [f"- [{name}]({name})" for name in page.files] + [""]
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1300px;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:0.5em 0}th,td{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f3f3f3;position:sticky;top:0}td.t{text-align:left}td.best{background:#c8f0c8;font-weight:bold}
tr.bad td{background:#fde8e8}td.flag{background:#fde8e8;font-weight:bold}img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
.note{color:#666}li{margin:0.2em 0}"""


def render_html(page: Page) -> str:
    e = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'>",
           f"<title>fsdp-bench report: {e(page.run_name)}</title><style>{_CSS}</style></head><body>",
           f"<h1>fsdp-bench report: {e(page.run_name)}</h1>", "<h2>Summary</h2><ul>"]
    out += [f"<li><b>{e(q)}</b> {e(line)}</li>" for q, line in page.summary] or ["<li>No finished cases.</li>"]
    out.append("</ul>")
    if page.problems:
        out += ["<h2>Problems reading this run</h2><ul>"] + [f"<li>{e(p)}</li>" for p in page.problems] + ["</ul>"]
    out.append("<h2>Environment</h2><table>")
    out += [f"<tr><td class=t>{e(k)}</td><td class=t>{e(v)}</td></tr>" for k, v in _env_rows(page.env)]
    out.append("</table><h2>Comparison table</h2>")
    df = page.df
    if df.empty:
        out.append("<p>No case results.</p>")
    else:
        columns = _table_columns(df)
        best = {c: best_index(df, c) for c, _ in columns}
        out.append("<p class=note>Best value per metric (among cases that trained and did the same work per optimizer step: model, seq_len, tokens per step, precision) highlighted green; cases that "
                   "did not finish in red. Every metric is in <a href='comparison.csv'>comparison.csv</a>.</p><table>")
        out.append("<tr>" + "".join(f"<th>{e(label)}</th>" for _, label in columns) + "</tr>")
        for idx, row in df.iterrows():
            cells = []
            for c, _ in columns:
                cls = "t" if c in ("model", "strategy", "optimizer_timing", "status") else ""
                if idx in best[c]:
                    cls += " best"
                cells.append(f"<td class='{cls.strip()}'>{e(format_value(row.get(c)))}</td>")
            out.append(f"<tr{' class=bad' if row['status'] != 'ok' else ''}>" + "".join(cells) + "</tr>")
        out.append("</table>")
    out += prediction_html(df)
    out += tuning_html(page)
    out.append("<h2>Charts</h2>")
    for outcome in page.charts:
        if outcome.path is not None:
            out.append(f"<h3>{e(outcome.chart.title)}</h3><img src='{e(outcome.path.name)}' alt='{e(outcome.chart.title)}'>")
    skipped = [o for o in page.charts if o.path is None]
    if skipped:
        out += ["<p>Not drawn (this run lacks their data):</p><ul class=note>"]
        out += [f"<li>{e(o.note)}</li>" for o in skipped] + ["</ul>"]
    out.append("<h2>Failed cases</h2>")
    failed = _failed(df)
    if failed.empty:
        out.append("<p>None.</p>")
    else:
        out.append("<table><tr><th>case</th><th>status</th><th>reason</th></tr>")
        out += [f"<tr class=bad><td class=t>{e(r['case_id'])}</td><td class=t>{e(str(r['status']).upper())}</td>"
                f"<td class=t>{e(str(r.get('reason') or ''))}</td></tr>" for _, r in failed.iterrows()]
        out.append("</table>")
    out += time_html(df)
    if page.files:
        out += ["<h2>Files</h2><ul>"] + [f"<li><a href='{e(n)}'>{e(n)}</a></li>" for n in page.files] + ["</ul>"]
    out.append("</body></html>")
    return "\n".join(out)
