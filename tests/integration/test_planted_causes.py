"""The step-time attribution names causes planted on purpose (FSDP_BENCH_FAULTS KIND@step:1), on
real 2-rank gloo cases: a delay inside rank 1's collectives is exposed communication, a host
delay inside rank 1's step is host time, a slower optimizer on rank 1 is the optimizer step.

Each planted case is compared with the same case without the fault, as the report compares a
case with the fastest one (report.why): the explanation must name the planted part first, and
that part must have grown by at least half of what was planted (the rest of the step moves with
the machine's load, by tens of ms on a shared 2-core CPU)."""

from __future__ import annotations

import pytest

from fsdp_bench.plan.case import Case
from fsdp_bench.plan.faults import PLANTED_COMM_DELAY_S, PLANTED_DELAY_S
from fsdp_bench.results.layout import create_run_dir

pytestmark = [pytest.mark.slow]

CASE = {"strategy": "fsdp2", "model": "gpt_tiny", "seq_len": 32, "steps": 3, "warmup": 1}
# part -> (the fault, the least it must add per step): fsdp2 gpt_tiny calls at least 4
# collectives from Python per step (2 blocks' all-gathers and reduce-scatters).
PLANTED = {
    "comm_exposed": ("comm_delay", 4 * PLANTED_COMM_DELAY_S / 2),
    "host": ("host_delay", PLANTED_DELAY_S / 2),
    "optimizer": ("slow_optimizer", PLANTED_DELAY_S / 2),
}
LABELS = {"comm_exposed": "more exposed communication", "host": "more host time", "optimizer": "more optimizer step"}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """comparison.csv rows of the clean case and of each planted one (each in its own run folder:
    the case id does not carry the fault)."""
    from fsdp_bench.launch.runner import run_case

    out = {}
    mp = pytest.MonkeyPatch()
    try:
        for name, fault in (("clean", ""), *((part, f"{kind}@step:1") for part, (kind, _) in PLANTED.items())):
            mp.setenv("FSDP_BENCH_FAULTS", fault)
            result = run_case(Case(**CASE), create_run_dir(tmp_path_factory.mktemp(name)), timeout_s=300)
            assert result["status"] == "ok", (name, result["reason"], result["log_tail"][-2000:])
            out[name] = result
    finally:
        mp.undo()
    return out


def _row(result):
    from fsdp_bench.report.table import build_table

    return build_table([result]).to_dict("records")[0]


@pytest.mark.parametrize("part", list(PLANTED))
def test_the_planted_cause_is_the_part_named(rows, part):
    pytest.importorskip("pandas")
    from fsdp_bench.analysis.attribution import PARTS, part_differences
    from fsdp_bench.report.why import row_parts, why_slower

    clean, planted = _row(rows["clean"]), _row(rows[part])
    for row in (clean, planted):  # the parts sum to the probe step
        total = sum(row[f"part_{p}_s_per_step"] for p in PARTS)
        assert total == pytest.approx(row["probe_step_s"], rel=0.01)
    grown = dict(part_differences(row_parts(clean), row_parts(planted)))
    text = why_slower(planted, clean)
    assert max(grown, key=grown.get) == part, (text, grown)
    assert grown[part] >= PLANTED[part][1], (text, grown)
    assert text.split(": ", 1)[1].split(" (", 1)[0].endswith(LABELS[part]), text
