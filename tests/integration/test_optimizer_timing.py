"""FSDP2 with the optimizer built before `fully_shard`: the benchmark must show it does not train."""

import pytest

from fsdp_bench.launch.runner import run_case
from fsdp_bench.plan.case import Case
from fsdp_bench.results.layout import create_run_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def timing_results(tmp_path_factory):
    run_dir = create_run_dir(tmp_path_factory.mktemp("timing"))
    return {
        timing: run_case(
            # no probe steps: nothing here reads their figures
            Case(strategy="fsdp2", optimizer_timing=timing, nproc=2, steps=3, warmup=1, seq_len=32, probes=False),
            run_dir,
            timeout_s=300,
        )
        for timing in ("after_shard", "before_shard", "before_shard_fixed")
    }


def test_all_three_run(timing_results):
    assert {t: r["status"] for t, r in timing_results.items()} == dict.fromkeys(timing_results, "ok")


def test_before_shard_leaves_parameters_unchanged(timing_results):
    stale = timing_results["before_shard"]
    assert stale["metrics"]["params_changed"] is False
    for rank in stale["ranks"]:
        assert rank["params_changed"] is False
        assert rank["optimizer_params_match_model"] is False
        assert len(set(rank["losses"])) == 1  # the loss is exactly flat


def test_after_and_fixed_train_identically(timing_results):
    after, fixed = timing_results["after_shard"], timing_results["before_shard_fixed"]
    assert after["metrics"]["params_changed"] and fixed["metrics"]["params_changed"]
    for a, f in zip(after["ranks"], fixed["ranks"]):
        assert a["losses"][-1] < a["losses"][0]
        assert f["losses"] == pytest.approx(a["losses"], rel=1e-6)
