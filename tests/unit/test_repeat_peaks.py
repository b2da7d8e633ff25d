"""A case measured in repeats reports each rank's median peak, not its first repeat's: two
identical gpt_tiny sweeps once compared as a +6.3% memory regression because rank 1's MemTracker
peak was 144 KB higher in one repeat (2,444,408 against 2,300,024 bytes)."""

from fsdp_bench.analysis.repeats import _pooled_ranks


def _repeat(peaks_by_rank, times=(0.1,)):
    ranks = [
        {"rank": i, "step_times_s": list(times), "memory": {"peak_allocated_bytes": p}}
        for i, p in enumerate(peaks_by_rank)
    ]
    return {"status": "ok", "ranks": ranks}


def test_each_rank_reports_its_median_peak_and_every_step():
    results = [_repeat([2300024, 2444408]), _repeat([2300024, 2300024]), _repeat([2300024, 2300024], (0.2,))]
    pooled = _pooled_ranks(results, keep=1)
    assert [r["memory"]["peak_allocated_bytes"] for r in pooled] == [2300024, 2300024]
    assert pooled[1]["step_times_s"] == [0.1, 0.1, 0.2]


def test_a_repeat_with_more_steps_gives_as_many_as_the_fewest_evenly_spaced():
    results = [_repeat([1, 1], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]), _repeat([1, 1], (0.9, 0.8))]
    assert _pooled_ranks(results, keep=2)[0]["step_times_s"] == [0.1, 0.4, 0.9, 0.8]


def test_a_missing_peak_keeps_the_first_repeats_record():
    results = [_repeat([100, 200]), {"status": "ok", "ranks": [{"rank": 0, "memory": {}}, {"rank": 1, "memory": {}}]}]
    assert [r["memory"]["peak_allocated_bytes"] for r in _pooled_ranks(results, keep=1)] == [100, 200]
