"""Schema version 2 is written; version 1 files still load; the new switches parse and validate."""

from __future__ import annotations

import pytest

from fsdp_bench.plan.case import Case, CaseError
from fsdp_bench.plan.options import parse_sweep
from fsdp_bench.results.load import load_case_result
from fsdp_bench.results.schema import SCHEMA_VERSION, ResultError
from fsdp_bench.results.io import write_json_atomic


def _result(version):
    return {"schema_version": version, "case_id": "ddp-x", "case": {}, "status": "ok", "metrics": {}, "ranks": []}


def test_schema_is_2_and_version_1_still_loads(tmp_path):
    assert SCHEMA_VERSION == 2
    for v in (1, 2):
        write_json_atomic(tmp_path / f"v{v}.json", _result(v))
        assert load_case_result(tmp_path / f"v{v}.json")["schema_version"] == v
    write_json_atomic(tmp_path / "v3.json", _result(3))
    with pytest.raises(ResultError, match="reads 1, 2"):
        load_case_result(tmp_path / "v3.json")


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
