"""Hybrid sharding (FSDP1 HYBRID_SHARD, FSDP2 HSDP) on a 2x2 mesh of 4 CPU ranks."""

from __future__ import annotations

import pytest

from fsdp_bench.launch.runner import run_case
from fsdp_bench.plan.case import Case, CaseError, hybrid_mesh_shape, parse_mesh


def test_default_mesh_replicates_across_nodes_and_shards_within_one():
    assert hybrid_mesh_shape("", world_size=16, ranks_per_node=8) == (2, 8)
    assert hybrid_mesh_shape("", world_size=4, ranks_per_node=4) == (1, 4)
    assert hybrid_mesh_shape("2x2", world_size=4, ranks_per_node=4) == (2, 2)
    with pytest.raises(CaseError, match="does not cover"):
        hybrid_mesh_shape("2x2", world_size=8, ranks_per_node=8)


def test_mesh_is_validated_and_named_in_the_id():
    assert parse_mesh("4x2") == (4, 2)
    case = Case(strategy="fsdp2_hsdp", nproc=4, mesh="2x2")
    assert case.id.endswith("-mesh2x2")
    with pytest.raises(CaseError, match="only applies"):
        Case(strategy="fsdp2", nproc=4, mesh="2x2")
    with pytest.raises(CaseError, match="has 6 ranks"):
        Case(strategy="fsdp2_hsdp", nproc=4, mesh="2x3")


@pytest.fixture(scope="module")
def hybrid_results(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("hybrid")
    (run_dir / "cases").mkdir()
    base = dict(model="gpt_tiny", nproc=4, mesh="2x2", batch_size=2, seq_len=32, steps=2, warmup=1)
    return {s: run_case(Case(strategy=s, **base), run_dir, timeout_s=300) for s in ("fsdp1_hybrid_shard", "fsdp2_hsdp")}


@pytest.mark.slow
@pytest.mark.versions  # 2D DeviceMesh for FSDP1 and FSDP2
@pytest.mark.parametrize("strategy", ["fsdp1_hybrid_shard", "fsdp2_hsdp"])
def test_hybrid_2x2_trains_on_four_gloo_ranks(hybrid_results, strategy):
    result = hybrid_results[strategy]
    assert result["status"] == "ok", result["reason"] + result["log_tail"][-2000:]
    assert sorted(r["rank"] for r in result["ranks"]) == [0, 1, 2, 3]
    assert all(r["params_changed"] for r in result["ranks"])
    losses = [r["losses"] for r in result["ranks"]]
    assert all(len(l) == 3 and l[-1] < l[0] for l in losses)
