import statistics

import pytest

from fsdp_bench.analysis.aggregate import aggregate_rank_metrics
from fsdp_bench.results.schema import GIB
from fsdp_bench.results.stats import percentile, slowest_rank_step_times, summarize_step_times


def test_percentile_interpolates_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 10) == pytest.approx(1.3)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summary_statistics():
    times = [0.10, 0.11, 0.09, 0.10, 0.30]
    s = summarize_step_times(times)
    assert s["step_time_s_median"] == 0.10
    assert s["step_time_s_mean"] == pytest.approx(statistics.fmean(times))
    assert s["step_time_s_min"] == 0.09 and s["step_time_s_max"] == 0.30
    assert s["step_time_s_p10"] <= s["step_time_s_median"] <= s["step_time_s_p90"]
    assert s["step_time_cv_pct"] == pytest.approx(100 * statistics.stdev(times) / statistics.fmean(times))
    assert summarize_step_times([]) == {}


def test_slowest_rank_defines_each_step():
    assert slowest_rank_step_times([[1, 5, 2], [3, 1, 2]]) == [3, 5, 2]


def test_aggregate_throughput_memory_and_loss():
    ranks = [
        {
            "step_times_s": [0.5, 0.5, 0.5],
            "losses": [2.0, 1.0],
            "params_changed": True,
            "memory": {"peak_allocated_bytes": 2 * GIB},
        },
        {
            "step_times_s": [0.4, 1.0, 0.5],
            "losses": [4.0, 3.0],
            "params_changed": True,
            "memory": {"peak_allocated_bytes": 3 * GIB},
        },
    ]
    m = aggregate_rank_metrics(tokens_per_step=1000, samples_per_step=10, world_size=2, ranks=ranks)
    assert m["step_time_s_median"] == 0.5
    assert m["tokens_per_s"] == pytest.approx(2000)
    assert m["tokens_per_s_per_device"] == pytest.approx(1000)
    assert m["samples_per_s"] == pytest.approx(20)
    assert m["peak_allocated_gib"] == 3
    assert (m["loss_first"], m["loss_last"]) == (3.0, 2.0)
    assert m["params_changed"] is True


def test_timed_share_of_the_measure_stage_is_the_worst_rank():
    def rank(measure_s, stages=True):
        record = {"step_times_s": [0.5, 0.5], "warmup_step_times_s": [0.5], "losses": [1.0, 1.0, 1.0]}
        if stages:
            record["stage_started_unix"] = {"warmup": 9.0, "measure": 10.0, "memory_probe": 10.0 + measure_s}
        return record

    def share(ranks):
        metrics = aggregate_rank_metrics(tokens_per_step=1, samples_per_step=1, world_size=len(ranks), ranks=ranks)
        return metrics["measure_timed_share_pct"]

    # rank 1 spent 0.5 s of its measure stage outside its timed steps
    assert share([rank(1.0), rank(1.5)]) == pytest.approx(100 * 1.0 / 1.5)
    # a file from before the stage times (or one rank without them): null, not a partial figure
    assert share([rank(1.0), rank(1.0, stages=False)]) is None


def test_params_changed_requires_every_rank():
    ranks = [{"params_changed": True}, {"params_changed": False}]
    assert (
        aggregate_rank_metrics(tokens_per_step=1, samples_per_step=1, world_size=2, ranks=ranks)["params_changed"]
        is False
    )
