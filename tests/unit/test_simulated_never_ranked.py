"""Simulated cases (--bench-simulate-world-size: rank 0 alone on a fake process group) are never
ranked or recommended: their collectives are free, so their speed is no strategy's. A CPU run of
two such cases (tests/data/simulated_cpu/run, 2026-11-27) had recommended fsdp1_full_shard "35% ahead
of fsdp2, beyond noise"; their memory is what they answer."""

from pathlib import Path

from fsdp_bench.report.recommend import recommendation_lines
from fsdp_bench.report.table import build_table, did_train, left_out
from fsdp_bench.report.terminal import summary_body_lines
from fsdp_bench.results.load import load_run

RUN = Path(__file__).resolve().parents[1] / "data" / "simulated_cpu" / "run"


def test_simulated_cases_are_not_ranked_and_the_terminal_says_why():
    results = load_run(RUN)[0]
    df = build_table(results)
    assert list(df["simulate"]) == [True, True] and list(df["params_changed"]) == [True, True]
    assert not df["trained"].any() and not df["is_best"].any()
    assert recommendation_lines(df) == []
    assert left_out(df).startswith("left out: 2 simulated, communication free (")
    lines = summary_body_lines(results)
    assert not any(line.startswith(("best of", "not trained")) for line in lines), lines
    assert any(line.startswith("simulated, communication free (never ranked; see their memory): ") for line in lines)
    # their memory is real: the peak prediction is judged on them
    from fsdp_bench.report.page import prediction_section

    assert any(line.startswith("Worst peak prediction error: ") for line in prediction_section(df))


def test_a_real_rank_that_trained_is_still_ranked():
    row = {"status": "ok", "params_changed": True, "loss_first": 6.0, "loss_last": 5.5, "steps_measured": 3}
    assert did_train(row) and did_train({**row, "simulate": False}) and not did_train({**row, "simulate": True})
