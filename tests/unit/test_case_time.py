"""The split of a case's wall time into launch, setup, train, probes and exit (pure)."""

from pathlib import Path

import pytest

from fsdp_bench.analysis.case_time import case_time_split, measure_timed_share_pct, sweep_time_split


def _result(**stages):
    return {
        "launched_unix": 100.0,
        "finished_unix": 110.0,
        "ranks": [{"rank": 1, "stage_started_unix": {"init": 0.0}}, {"rank": 0, "stage_started_unix": stages}],
    }


def test_parts_tile_the_case_from_launch_to_finish():
    split = case_time_split(
        _result(
            init=102.5,
            data=102.6,
            model=102.7,
            shard=103.0,
            optimizer=104.0,
            first_step=104.1,
            warmup=104.3,
            measure=104.5,
            memory_probe=105.5,
            end=106.0,
        )
    )
    assert split == pytest.approx(
        {"time_launch_s": 2.5, "time_setup_s": 1.6, "time_train_s": 1.4, "time_probes_s": 0.5, "time_exit_s": 4.0}
    )
    assert sum(split.values()) == pytest.approx(10.0)


def test_a_case_that_failed_while_sharding_counts_the_rest_as_setup():
    split = case_time_split(_result(init=101.0, data=101.0, model=101.5, shard=102.0))
    assert split["time_setup_s"] == pytest.approx(9.0) and split["time_train_s"] == 0.0


def test_results_without_timestamps_give_no_split():
    assert case_time_split({"launched_unix": 1.0, "finished_unix": 2.0, "ranks": []}) == {}
    assert case_time_split({"ranks": [{"rank": 0, "stage_started_unix": {"init": 1.0}}]}) == {}


def test_sweep_split_sums_cases():
    rows = [{"time_launch_s": 1.0, "time_train_s": 2.0}, {"time_launch_s": 3.0, "time_exit_s": None}]
    assert sweep_time_split(rows) == {"launch": 4.0, "setup": 0.0, "train": 2.0, "probes": 0.0, "exit": 0.0}


def test_a_case_run_as_repeats_sums_their_splits():
    from fsdp_bench.analysis.case_time import summed_time_split

    first = _result(init=102.0, measure=104.0, end=108.0)  # 10 s: launch 2, setup 2, train 4, exit 2
    second = {**_result(init=101.0, measure=105.0, end=109.0), "launched_unix": 100.0, "finished_unix": 110.0}
    summed = summed_time_split([first, second])
    assert summed == pytest.approx(
        {"time_launch_s": 3.0, "time_setup_s": 6.0, "time_train_s": 8.0, "time_probes_s": 0.0, "time_exit_s": 3.0}
    )
    assert case_time_split({"time_split_s": summed, **first}) == summed
    assert summed_time_split([first, {"ranks": []}]) == {}


def test_effective_sharding_reads_alike_for_every_family_and_old_records():
    from fsdp_bench.analysis.aggregate import effective_sharding

    assert effective_sharding([{"effective_sharding": "FULL_SHARD"}] * 2) == "full_shard"  # an old record
    assert effective_sharding([{"effective_sharding": "HYBRID_SHARD"}]) == "hybrid_full_shard"
    assert effective_sharding([{"effective_sharding": "NO_SHARD"}]) == "replicated"
    assert effective_sharding([{"effective_sharding": "full_shard"}, {"effective_sharding": "replicated"}]) is None
    assert effective_sharding([{"effective_sharding": "full_shard"}, {}]) is None


# --- the share of the measured stretch that the timed steps fill (issue 32) ---------------------

REFERENCE = Path(__file__).resolve().parents[2] / "results/reference/NVIDIA-H100-80GB-HBM3/part3_gpt2_sweep"


def _rank_record(stages, steps, warmup=(0.5,)):
    return {"stage_started_unix": stages, "step_times_s": list(steps), "warmup_step_times_s": list(warmup)}


def test_timed_share_is_the_steps_over_the_measure_stage():
    # measure stage 100.0 -> 102.5 (the probes start), 2.0 s of it inside timed steps
    rank = _rank_record({"first_step": 98.0, "warmup": 99.0, "measure": 100.0, "memory_probe": 102.5}, [0.5] * 4)
    assert measure_timed_share_pct(rank) == pytest.approx(80.0)
    # a checkpoint benchmark after the steps ends the stretch as the probes would
    rank["stage_started_unix"]["checkpoint"] = 102.0
    assert measure_timed_share_pct(rank) == pytest.approx(100.0)


def test_without_warmup_the_stretch_starts_with_the_first_step():
    # warmup 0: step 0 is measured and runs in the first_step stage
    rank = _rank_record({"first_step": 10.0, "measure": 10.4, "end": 11.0}, [0.4, 0.4], warmup=())
    assert measure_timed_share_pct(rank) == pytest.approx(80.0)


def test_timed_share_is_null_where_the_record_cannot_say():
    assert measure_timed_share_pct({"step_times_s": [0.1], "warmup_step_times_s": [0.1]}) is None  # old file
    # a rank that failed while measuring never reached the probes or the end
    assert measure_timed_share_pct(_rank_record({"measure": 1.0}, [0.1])) is None
    assert measure_timed_share_pct(_rank_record({"measure": 1.0, "end": 2.0}, [])) is None  # nothing measured
    # the stage clock and the step clock disagree by a hair: never above 100
    assert measure_timed_share_pct(_rank_record({"measure": 1.0, "end": 2.0}, [0.5, 0.5000001])) == 100.0


@pytest.mark.parametrize(
    ("case", "share_pct"),
    [
        # 2026-11-24: an update norm (host copy of every parameter) between every two measured steps
        ("ddp-gpt_124m-ws1-bs8-ga1-opt_after-sl1024-bf16", 8.8),
        ("fsdp2-gpt_124m-ws1-bs32-ga1-opt_after-sl1024-bf16", 18.7),
        # 2026-11-26: norms on the first and last measured step only
        ("fsdp2_no_reshard-gpt_124m-ws1-bs8-ga1-opt_after-sl1024-bf16", 75.2),
        ("fsdp2_offload-gpt_124m-ws1-bs32-ga1-opt_after-sl1024-bf16", 95.2),
    ],
    # ids that are not case ids: xdist's controller refuses a case id as a sweep (launch.parallel_pytest)
    ids=lambda value: f"{value}%" if isinstance(value, float) else value.split("-ws")[0],
)
def test_timed_share_of_the_h100_reference_cases(case, share_pct):
    """Read off the committed H100 files: what issue 32 reported from them."""
    import json

    rank = json.loads((REFERENCE / "gpt2-124m-sweep/cases" / case / "rank-0.json").read_text())
    assert measure_timed_share_pct(rank) == pytest.approx(share_pct, abs=0.05)
