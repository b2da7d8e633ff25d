"""The peak-memory model against an H100's allocator: every case of the committed GPU reference
runs (results/reference/) whose record has `max_memory_allocated`, predicted again from its case
file. Pure: no GPU needed, the measurements are on disk."""

import json
from pathlib import Path

import pytest

from fsdp_bench.analysis.fit import predict_case_peak
from fsdp_bench.plan.case import Case, parse_mesh

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference"
RECORDS = sorted(REFERENCE.glob("*/*/*/cases/*/rank-0.json"))


def _measured_and_predicted(path: Path) -> tuple[Case, int, int]:
    record = json.loads(path.read_text())
    case = Case.from_dict(json.loads((path.parent / "case.json").read_text()))
    mesh = parse_mesh(case.mesh) if case.mesh else None
    predicted = predict_case_peak(case, record["world_size"], mesh=mesh)["peak_bytes"]
    return case, record["memory"]["peak_allocated_bytes"], predicted


def _measured_cases() -> list[Path]:
    """Finished CUDA cases (FSDP1's records say its MemTracker breakdown is unavailable; the
    allocator's peak is there all the same)."""
    records = {p: json.loads(p.read_text()) for p in RECORDS}
    return [
        p
        for p, r in records.items()
        if r.get("status") == "ok" and r["device"].startswith("cuda") and r["memory"].get("peak_allocated_bytes")
    ]


def test_the_reference_runs_are_there():
    assert len(_measured_cases()) >= 29, RECORDS


@pytest.mark.parametrize("path", _measured_cases(), ids=lambda p: f"{p.parents[2].name}/{p.parent.name}")
def test_predicted_peak_against_the_gpu_allocator(path):
    case, measured, predicted = _measured_and_predicted(path)
    error = predicted / measured - 1
    if case.warmup + case.steps == 1:
        # One step in all: AdamW's state is created inside it, after backward's peak, so the
        # model (which counts it, as in every later step) is above by that state alone.
        pytest.skip(f"a single step: AdamW state not alive at its backward ({error:+.1%})")
    if case.compile:
        # Inductor chooses what to save (and recomputes pointwise work): the eager count is an
        # upper bound. Measured: +8% to +14% on llama3_1b, -1% on gpt_124m (H100, bf16).
        assert -0.05 <= error <= 0.15, (measured, predicted)
    else:
        assert abs(error) <= 0.05, (measured, predicted)


def test_calibration_skips_the_offload_records_that_hold_the_hosts_categories():
    """The H100 GPT-2 sweep's fsdp2_offload records hold the host's MemTracker categories (0
    activations: the breakdown read the first device MemTracker saw); read first, they set
    gpt_124m's activations to 0. They are skipped; the other cases' figure stands."""
    from fsdp_bench.analysis.fit import calibrate_from_results
    from fsdp_bench.results.load import load_run

    results = load_run(REFERENCE / "NVIDIA-H100-80GB-HBM3" / "part3_gpt2_sweep" / "gpt2-124m-sweep")[0]
    offload_first = sorted(results, key=lambda r: "offload" not in r["case_id"])
    assert "offload" in offload_first[0]["case_id"]
    per_sample = calibrate_from_results(offload_first)["gpt_124m"]
    others = calibrate_from_results([r for r in results if "offload" not in r["case_id"]])["gpt_124m"]
    assert per_sample == others > 0.5 * 2**30  # GiB per sample of 1,024 tokens, bf16
