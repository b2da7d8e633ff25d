"""The strategy catalog is the one place a strategy's traits live: every consumer reads the row,
so a new strategy of an existing family is one row (the README's contributor example)."""

import pytest

from fsdp_bench.analysis.comm_model import comm_volume, model_units
from fsdp_bench.analysis.fit import predict_peak_bytes
from fsdp_bench.analysis.model_state import expected_model_state_bytes
from fsdp_bench.plan import catalog
from fsdp_bench.plan.case import Case, skip_reason
from fsdp_bench.plan.catalog import STRATEGIES, Strategy
from fsdp_bench.plan.flavors import MODEL_FLAVORS


def test_rows_answer_the_questions_code_used_to_ask_of_names():
    assert catalog.names_where(family="fsdp1") == (
        "fsdp1_full_shard",
        "fsdp1_shard_grad_op",
        "fsdp1_no_shard",
        "fsdp1_offload",
        "fsdp1_hybrid_shard",
    )
    assert catalog.names_where(hybrid=True) == ("fsdp1_hybrid_shard", "fsdp2_hsdp")
    assert catalog.DEFAULT_STRATEGIES == (
        "ddp",
        "fsdp1_full_shard",
        "fsdp1_shard_grad_op",
        "fsdp1_no_shard",
        "fsdp2",
        "fsdp2_no_reshard",
    )
    assert {n: s.fsdp1_sharding_strategy for n, s in STRATEGIES.items() if s.family == "fsdp1"} == {
        "fsdp1_full_shard": "FULL_SHARD",
        "fsdp1_shard_grad_op": "SHARD_GRAD_OP",
        "fsdp1_no_shard": "NO_SHARD",
        "fsdp1_offload": "FULL_SHARD",
        "fsdp1_hybrid_shard": "HYBRID_SHARD",
    }
    assert STRATEGIES["accelerate_fsdp2"].layout == "fsdp2_dim0"  # accelerate's FSDP2 pads like FSDP2
    assert STRATEGIES["fsdp1_no_shard"].layout == "fsdp1_flat" and STRATEGIES["ddp"].layout == "whole"
    assert [s.zero_stage for s in STRATEGIES.values()] == [0, 3, 2, 0, 3, 2, 3, 3, 3, 3, 3]


def test_every_strategy_has_a_model_state_expectation_and_a_comm_volume():
    units = model_units(MODEL_FLAVORS["gpt_tiny"])
    for name in STRATEGIES:
        assert expected_model_state_bytes(name, n_params=1000, world_size=4)["layout"] != "unknown"
        assert comm_volume(name, units, world_size=4, mesh=(2, 2)).shard_group >= 1


@pytest.fixture
def new_row(monkeypatch):
    row = Strategy(
        "fsdp2_keep_params",
        "FSDP2, reshard_after_forward=False, under a new name",
        "fsdp2",
        "shard_grad_op",
        in_default_sweep=False,
    )
    monkeypatch.setitem(STRATEGIES, row.name, row)
    return row


def test_a_new_row_is_planned_predicted_and_trained_without_other_edits(new_row):
    case = Case(strategy=new_row.name, nproc=1, steps=2, warmup=0, seq_len=16)
    assert case.id.startswith("fsdp2_keep_params-gpt_tiny-ws1") and skip_reason(case) is None
    units = model_units(MODEL_FLAVORS["gpt_tiny"])
    assert comm_volume(new_row.name, units, world_size=4) == comm_volume("fsdp2_no_reshard", units, world_size=4)
    assert predict_peak_bytes(new_row.name, MODEL_FLAVORS["gpt_tiny"], 4, 2, seq_len=16) == predict_peak_bytes(
        "fsdp2_no_reshard", MODEL_FLAVORS["gpt_tiny"], 4, 2, seq_len=16
    )
    pytest.importorskip("torch")
    from fsdp_bench.worker.loop import run

    record = run(case)
    assert record["status"] == "ok" and record["params_changed"] is True
