"""The README's and docs/gpu-reference.md's GPU tables are the committed run folders': built by
fsdp_bench.report.reference, so a number there changes only with the files or the model."""

from pathlib import Path

from fsdp_bench.report.reference import case_rows, cases_table, fidelity_lines, run_folders, summary_table

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "results" / "reference" / "NVIDIA-H100-80GB-HBM3"


def _block(path: Path, start: str, end: str) -> str:
    text = path.read_text()
    assert start in text, f"{path.name} lacks its generated block ({start})"
    return text.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0].strip()


def test_readme_summary_is_built_from_the_run_folders():
    expected = f"{summary_table(GPU)}\n\n{fidelity_lines(GPU)}"
    block = _block(ROOT / "README.md", "<!-- reference summary:", "<!-- end of reference summary -->")
    assert block == expected, "run: python -m fsdp_bench.report.reference results/reference/NVIDIA-H100-80GB-HBM3"


def test_docs_case_table_is_built_from_the_run_folders():
    expected = cases_table(row for run in run_folders(GPU) for row in case_rows(run))
    block = _block(ROOT / "docs" / "gpu-reference.md", "<!-- reference cases:", "<!-- end of reference cases -->")
    assert block == expected


def test_every_finished_gpu_case_is_in_the_table():
    rows = [row for run in run_folders(GPU) for row in case_rows(run)]
    assert len(rows) == 42  # every finished case of both leases (29 on the first, 13 on the second)
    assert {r["case"].strategy for r in rows} >= {
        "ddp",
        "fsdp1_no_shard",
        "fsdp1_full_shard",
        "fsdp1_offload",
        "fsdp1_hybrid_shard",
        "fsdp2",
        "fsdp2_no_reshard",
        "fsdp2_offload",
        "fsdp2_hsdp",
        "accelerate_fsdp2",
    }
