"""Which node ids xdist's controller takes for sweep cases (launch.parallel_pytest): every id the
plugin gives a case or a tuning request, and none of this project's own test ids."""

import json
from pathlib import Path

import pytest

from fsdp_bench.launch.parallel_pytest import is_bench_node_id, refusal_line
from fsdp_bench.plan.case import Case

HF_CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
PINNED = json.loads((Path(__file__).resolve().parents[1] / "data" / "pinned_case_ids.json").read_text())


def test_every_pinned_case_id_is_a_bench_node_id():
    ids = [case_id for group in PINNED.values() for _, case_id in group]
    assert len(ids) > 100
    missed = [i for i in ids if not is_bench_node_id(f"benchmarks/test_strategy_sweep.py::test_case[{i}]")]
    assert missed == []


@pytest.mark.parametrize(
    "fields",
    [
        {"strategy": "fsdp2", "model": f"hf:{HF_CONFIGS / 'llama_odd_vocab'}"},  # "/" and ":" become "_"
        {"strategy": "ddp", "model": "gpt_tiny", "precision": "bf16", "seq_len": 32},
        {"strategy": "fsdp1_full_shard", "model": "linear_small", "grad_accum": 4, "optimizer_timing": "before_shard"},
    ],
)
def test_case_ids_with_extra_parts_are_bench_node_ids(fields):
    case = Case(**fields)
    assert is_bench_node_id(f"test_sweep.py::test_case[{case.id}]"), case.id


def test_a_tuning_request_is_a_bench_node_id():
    from fsdp_bench.analysis.tune import tune_requests
    from fsdp_bench.plan.options import parse_sweep

    (request,) = tune_requests(parse_sweep({"device": "cpu", "model": "gpt_tiny"}).cases())
    assert is_bench_node_id(f"benchmarks/test_strategy_sweep.py::test_case[{request.id}]")


@pytest.mark.parametrize(
    "node_id",
    [
        "tests/unit/test_case.py::test_id",
        "tests/unit/test_results.py::test_fast_paths[3]",
        "tests/integration/test_simulation.py::test_predicted_comm_bytes_match_the_profiler_trace[fsdp2_hsdp-4-2x2-1]",
        "tests/integration/test_workloads.py::test_case_runs_and_trains[fsdp1_knobs]",
        "tests/unit/test_case.py::test_x[ws2-bs4]",
        "tests/unit/test_reference_peaks.py::test_x[strategies/ddp-gpt_124m-ws1-bs4-ga1-opt_after-sl1024-bf16]",
        "tests/unit/test_x.py::test_y[ddp2-gpt_tiny-ws2-bs2-ga1-opt_after]",  # no such strategy
    ],
)
def test_the_projects_own_test_ids_are_not(node_id):
    assert not is_bench_node_id(node_id)


def test_no_test_id_of_this_session_reads_as_a_case(request):
    """Every id this session collected (the whole suite, as CI runs it): one that read as a case or a
    tuning request would refuse `pytest tests -n N`; ids naming a case inside a longer one did."""
    ids = [item.nodeid for item in request.session.items]
    assert request.node.nodeid in ids
    assert [i for i in ids if is_bench_node_id(i)] == []


def test_the_refusal_names_the_option_and_the_way_out():
    line = refusal_line(4)
    assert "\n" not in line and "-n 4" in line and "-n 0" in line
