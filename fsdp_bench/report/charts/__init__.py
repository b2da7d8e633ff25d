"""The report's charts, in the order the report shows them, and drawing them all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fsdp_bench.report.charts.memory import chart_memory_breakdown, chart_memory_stages, chart_memory_timeline
from fsdp_bench.report.charts.pareto import chart_pareto
from fsdp_bench.report.charts.scaling import chart_gpu_util, chart_mfu, chart_peak_memory, chart_throughput
from fsdp_bench.report.charts.style import ChartSkipped, RunData
from fsdp_bench.report.charts.time import chart_communication, chart_loss_curves, chart_step_breakdown
from fsdp_bench.report.charts.tuning import chart_tune_rounds


@dataclass(frozen=True)
class Chart:
    file: str
    title: str
    draw: Callable[[RunData, Path], None]


CHARTS = (
    Chart(
        "pareto_throughput_vs_memory.png",
        "Throughput vs peak memory: the Pareto frontier and the recommendation",
        chart_pareto,
    ),
    Chart("throughput_vs_batch_size.png", "Throughput per device vs batch size", chart_throughput),
    Chart("peak_memory_vs_batch_size.png", "Peak memory vs batch size", chart_peak_memory),
    Chart("memory_stages.png", "Memory at each stage", chart_memory_stages),
    Chart("memory_breakdown.png", "Memory breakdown vs the ZeRO expectation", chart_memory_breakdown),
    Chart("memory_timeline.png", "Memory over time", chart_memory_timeline),
    Chart("loss_curves.png", "Loss curves per strategy and optimizer timing", chart_loss_curves),
    Chart("communication.png", "Total vs exposed communication", chart_communication),
    Chart("step_time_breakdown.png", "Step-time breakdown", chart_step_breakdown),
    Chart("gpu_utilization.png", "GPU busy share (NVML sampled for older runs)", chart_gpu_util),
    Chart("mfu_vs_batch_size.png", "MFU vs batch size", chart_mfu),
    Chart("tune_rounds.png", "Autotune rounds: measured tokens/s per round, the pick ringed", chart_tune_rounds),
)
CHART_FILES = tuple(c.file for c in CHARTS)


@dataclass(frozen=True)
class ChartOutcome:
    chart: Chart
    path: Path | None  # None: skipped
    note: str = ""


def draw_charts(run: RunData, out_dir: Path) -> list[ChartOutcome]:
    """Draw every chart the run has data for; a chart without data becomes a one-line note."""
    outcomes = []
    for chart in CHARTS:
        path = Path(out_dir) / chart.file
        if run.df.empty or "status" not in run.df or not (run.df["status"] == "ok").any():
            outcomes.append(ChartOutcome(chart, None, f"{chart.file} skipped: no finished case"))
            continue
        try:
            chart.draw(run, path)
        except ChartSkipped as exc:
            outcomes.append(ChartOutcome(chart, None, f"{chart.file} skipped: {exc}"))
            continue
        outcomes.append(ChartOutcome(chart, path))
    return outcomes
