"""What the report says about the H100 reference runs: at bf16 the loss curves of ddp (autocast)
and FSDP (cast parameters) part, and the report says why instead of implying a sharding bug."""

from pathlib import Path

from fsdp_bench.report.summary import loss_agreement
from fsdp_bench.report.table import build_table
from fsdp_bench.results.load import load_run

ROOT = Path(__file__).resolve().parents[1].parent
STRATEGIES_BF16 = ROOT / "results" / "reference" / "NVIDIA-H100-80GB-HBM3" / "part1_smoke" / "strategies"
GOLDEN_FP32 = ROOT / "tests" / "data" / "golden" / "base"


def test_bf16_loss_gap_is_explained_as_precision():
    (line,) = loss_agreement(build_table(load_run(STRATEGIES_BF16)[0]))
    assert line.startswith("Loss curves differ from ddp by more than 0.001 in 5 of 5 cases")
    assert "autocast" in line and "--bench-precision fp32" in line


def test_fp32_loss_line_has_no_precision_excuse():
    lines = loss_agreement(build_table(load_run(GOLDEN_FP32)[0]))
    assert lines and not any("autocast" in line for line in lines), lines
