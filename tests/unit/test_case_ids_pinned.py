"""Case ids are the run folder's file names, the CSV key and what `--bench-resume` and the golden
runs look up: they must stay byte-identical across refactors. The pinned file was written from the
code before the layout move (tests/data/pinned_case_ids.json: case fields that differ from the
defaults, and the id they produced)."""

import json
from pathlib import Path

import pytest

from fsdp_bench.plan.case import Case

PINNED = json.loads((Path(__file__).resolve().parents[1] / "data" / "pinned_case_ids.json").read_text())


@pytest.mark.parametrize("group", sorted(PINNED))
def test_case_ids_are_unchanged(group):
    for fields, expected in PINNED[group]:
        assert Case(**fields).id == expected


def test_default_sweep_and_suites_expand_to_the_same_cases():
    from fsdp_bench.plan.options import parse_sweep
    from fsdp_bench.plan.suites import SUITES, SuiteSettings, suite_cases

    assert [c.id for c in parse_sweep({"device": "cpu"}).cases()] == [i for _, i in PINNED["default_cpu"]]
    for name in SUITES:
        for device, nproc in (("cpu", 2), ("cuda", 8)):
            settings = SuiteSettings(device=device, nproc=nproc, steps=10, warmup=3, pg_timeout_s=60.0)
            assert [c.id for c in suite_cases(name, settings)] == [i for _, i in PINNED[f"suite_{name}_{device}"]]
