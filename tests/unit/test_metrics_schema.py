"""Schema version 3 is written; versions 1 and 2 load through the migration; the new switches parse
and validate."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fsdp_bench.plan.case import Case, CaseError
from fsdp_bench.plan.options import parse_sweep
from fsdp_bench.results.io import write_json_atomic
from fsdp_bench.results.load import load_case_result
from fsdp_bench.results.schema import SCHEMA_VERSION, ResultError
from fsdp_bench.results.stats import slowest_rank_step_times, summarize_step_times


def _result(version):
    """The least an ok result holds: its case's axes and a median step time."""
    case = Case(strategy="ddp").to_dict()
    metrics = {"step_time_s_median": 0.1}
    return {
        "schema_version": version,
        "case_id": "ddp-x",
        "case": case,
        "status": "ok",
        "metrics": metrics,
        "ranks": [],
    }


def test_schema_is_5_and_older_versions_load_migrated(tmp_path):
    assert SCHEMA_VERSION == 5
    for v in (1, 2, 3, 4, 5):
        write_json_atomic(tmp_path / f"v{v}.json", _result(v), shape=Any)
        assert load_case_result(tmp_path / f"v{v}.json")["schema_version"] == 5
    write_json_atomic(tmp_path / "v6.json", _result(6), shape=Any)
    with pytest.raises(ResultError, match="reads 1, 2, 3, 4, 5"):
        load_case_result(tmp_path / "v6.json")


def test_the_work_is_written_with_the_result_and_migrated_into_older_files(tmp_path):
    """Readers take the like-for-like group from the file (results.work), never recompute it."""
    case = Case(strategy="ddp", model="gpt_tiny", batch_size=4, grad_accum=2, nproc=2, seq_len=32)
    old = {**_result(4), "case": case.to_dict()}
    write_json_atomic(tmp_path / "v4.json", old, shape=Any)
    work = load_case_result(tmp_path / "v4.json")["work"]
    assert work == {
        "global_batch_size": 16,
        "tokens_per_optimizer_step": 512,
        "compare_group": "gpt_tiny sl32 tok512 fp32",
    }
    assert case.tokens_per_step == work["tokens_per_optimizer_step"]


def test_migration_reads_which_loop_measured_each_rank(tmp_path):
    """Version-3 files name no measurement version: a rank that recorded which steps got an update
    norm was measured by the loop that took them on a few steps only (2), any other by the first (1)."""
    from fsdp_bench.results.schema import MEASUREMENT_VERSION, is_current_ok

    old = {**_result(3), "ranks": [{"rank": 0, "update_norm_steps": [0, 1, 24]}, {"rank": 1}]}
    write_json_atomic(tmp_path / "old.json", old, shape=Any)
    ranks = load_case_result(tmp_path / "old.json")["ranks"]
    assert [r["measurement_version"] for r in ranks] == [2, 1]
    assert MEASUREMENT_VERSION == 2
    assert not is_current_ok(load_case_result(tmp_path / "old.json"))  # rank 1 is the older loop
    old["ranks"] = old["ranks"][:1]
    write_json_atomic(tmp_path / "v2loop.json", old, shape=Any)
    assert is_current_ok(load_case_result(tmp_path / "v2loop.json"))


def test_migration_fills_what_the_report_used_to_backfill(tmp_path):
    """A version-2 file without the sharding metric and rank 0's peak (as written before they
    were metrics) reads as a version-3 one: the FSDP1 word translated, the peak taken from rank 0."""
    old = {
        **_result(2),
        "metrics": {"predicted_peak_gib": 0.5, "step_time_s_median": 0.1},
        "ranks": [
            {"rank": 1, "effective_sharding": "FULL_SHARD", "memory": {"peak_allocated_bytes": 2**29}},
            {"rank": 0, "effective_sharding": "FULL_SHARD", "memory": {"peak_allocated_bytes": 2**30}},
        ],
    }
    write_json_atomic(tmp_path / "old.json", old, shape=Any)
    metrics = load_case_result(tmp_path / "old.json")["metrics"]
    assert metrics["effective_sharding"] == "full_shard"
    assert metrics["rank0_peak_allocated_gib"] == 1.0
    assert old["metrics"] == {"predicted_peak_gib": 0.5, "step_time_s_median": 0.1}  # the input is never changed


def test_migration_adds_the_median_interval_early_version_2_files_lack(tmp_path):
    """Every verdict reads the median's interval; files written before it was a metric get it at
    load, from the slowest rank's step times, equal to what the aggregate writes today."""
    times = [[0.10, 0.12, 0.11, 0.30, 0.10, 0.11, 0.13], [0.11, 0.10, 0.12, 0.10, 0.14, 0.10, 0.12]]
    old = {
        **_result(2),
        "metrics": {"step_time_s_median": 0.12},
        "ranks": [{"rank": r, "step_times_s": t} for r, t in enumerate(times)],
    }
    write_json_atomic(tmp_path / "old.json", old, shape=Any)
    metrics = load_case_result(tmp_path / "old.json")["metrics"]
    expected = summarize_step_times(slowest_rank_step_times(times))
    assert metrics["step_time_s_median_ci_low"] == expected["step_time_s_median_ci_low"] == 0.11
    assert metrics["step_time_s_median_ci_high"] == expected["step_time_s_median_ci_high"]
    assert metrics["step_time_median_ci_level_pct"] == expected["step_time_median_ci_level_pct"]
    assert metrics["step_time_s_median"] == 0.12  # what the file had stays as it was
    recorded = {**old, "metrics": {"step_time_s_median": 0.12, "step_time_s_median_ci_low": 0.09}}
    write_json_atomic(tmp_path / "recorded.json", recorded, shape=Any)
    assert load_case_result(tmp_path / "recorded.json")["metrics"] == recorded["metrics"]


def test_profile_and_memory_snapshot_switches_reach_cases_without_changing_ids():
    base = {"strategies": "ddp", "batch-sizes": "2", "grad-accum": "1", "device": "cpu", "nproc": "2"}
    plain = parse_sweep(base).cases()
    profiled = parse_sweep({**base, "profile": "on", "memory-snapshot": "true"}).cases()
    assert [c.profile for c in plain] == [False] and [c.profile for c in profiled] == [True]
    assert profiled[0].memory_snapshot is True
    assert [c.id for c in plain] == [c.id for c in profiled]  # measurement settings stay out of ids
    with pytest.raises(CaseError, match="^--bench-profile: 'maybe' is not on/off"):
        parse_sweep({**base, "profile": "maybe"})


def test_case_rejects_non_boolean_switches():
    with pytest.raises(CaseError, match="profile must be true or false"):
        Case(strategy="ddp", profile="yes")


def test_a_metric_the_registry_does_not_hold_is_refused(tmp_path):
    """A misspelt metric would read as a missing column in every table; the loader names it."""
    data = _result(4)
    data["metrics"]["tokens_per_sec_per_device"] = 12.0
    write_json_atomic(tmp_path / "foreign.json", data, shape=Any)
    with pytest.raises(ResultError, match="metrics.tokens_per_sec_per_device is not a metric"):
        load_case_result(tmp_path / "foreign.json")
    # a family row covers the names it stands for, and no other
    from fsdp_bench.results.metrics import registered

    assert registered("predicted_step_time_s_pcie4_eth_100g_no_overlap").name.endswith("_no_overlap")
    assert registered("mfu_null_reason").name == "<metric>_null_reason"
    assert registered("predicted_step_time_s_") is None


def test_every_committed_result_names_only_registered_metrics():
    """What the runs in this repository wrote (reference, golden, fixtures) is what the registry holds."""
    import json
    from pathlib import Path

    from fsdp_bench.results.metrics import registered

    root = Path(__file__).resolve().parents[2]
    files = [p for d in ("results", "tests") for p in (root / d).rglob("cases/*.json")]
    assert len(files) > 20
    unknown = set()
    for path in files:
        try:
            metrics = json.loads(path.read_text()).get("metrics") or {}
        except (ValueError, AttributeError):
            continue  # the fixtures of unreadable files
        unknown |= {f"{path.name}: {name}" for name in metrics if registered(name) is None}
    assert not unknown


def test_sweep_json_is_versioned_and_the_old_shape_still_reads(tmp_path):
    """sweep.json carries its version and the settings; a file from before (the settings alone)
    reads the same; a future version is one line."""
    from fsdp_bench.results.load import load_sweep_settings

    settings = {"steps": 3, "batch_sizes": [1]}
    (tmp_path / "new.json").write_text(json.dumps({"schema_version": 1, "settings": settings}))
    (tmp_path / "old.json").write_text(json.dumps(settings))
    (tmp_path / "future.json").write_text(json.dumps({"schema_version": 2, "settings": settings}))
    assert load_sweep_settings(tmp_path / "new.json") == load_sweep_settings(tmp_path / "old.json") == settings
    with pytest.raises(ResultError, match="sweep file version 2 is not supported"):
        load_sweep_settings(tmp_path / "future.json")
