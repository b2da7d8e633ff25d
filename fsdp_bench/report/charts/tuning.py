"""The autotune rounds (`--bench-tune`): per round, each measured case's tokens/s per device with
its interval, against the prediction it was chosen on; the pick ringed."""

from __future__ import annotations

from pathlib import Path

from fsdp_bench.report.charts.style import ChartSkipped, RunData, pyplot, save_figure

KIND_COLORS = {"probe": "#7f8c8d", "boundary": "#c0392b", "explore": "#2980b9", "repeat": "#27ae60"}


def chart_tune_rounds(run: RunData, path: Path) -> None:
    answers = [a for a in run.tuning if a.get("rounds")]
    if not answers:
        raise ChartSkipped("no --bench-tune answer in this run (RUN/tune/*.json)")
    plt = pyplot()
    fig, axes = plt.subplots(1, len(answers), figsize=(7 * len(answers), 4.8), squeeze=False)
    for ax, answer in zip(axes[0], answers):
        for entry in answer["rounds"]:
            for j, case in enumerate(entry["runs"]):
                speed = case.get("speed_tokens_per_s")
                if speed is None:
                    continue
                x = entry["round"] + 0.08 * (j - (len(entry["runs"]) - 1) / 2)
                low, high = case.get("speed_low_tokens_per_s") or speed, case.get("speed_high_tokens_per_s") or speed
                ax.errorbar(
                    [x],
                    [speed],
                    yerr=[[speed - low], [high - speed]],
                    fmt="o",
                    color=KIND_COLORS.get(entry["kind"], "black"),
                    capsize=3,
                )
                if case["case_id"] == answer.get("pick"):
                    ax.scatter([x], [speed], s=200, facecolors="none", edgecolors="black", linewidths=1.5)
        ax.set_xticks([e["round"] for e in answer["rounds"]])
        ax.set_xticklabels([f"{e['round']}\n{e['kind']}" for e in answer["rounds"]])
        cost = answer["cost"]
        ratio = f", {100 * cost['ratio']:.0f}% of the full grid" if cost.get("ratio") else ""
        ax.set_title(
            f"{answer['model']}: pick ringed; {cost['measured_cases']} of {cost['grid_cases']} cases{ratio}", fontsize=9
        )
        ax.set_xlabel("round")
        ax.set_ylabel("tokens/s per device (median, CI)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
