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


def test_fidelity_lines_say_which_bare_loop_a_report_was_measured_against(tmp_path):
    """The bare loop changed (version 2: the root resharded as the suite's, the suite's threads);
    a case measured against both versions reads as two lines that say which."""
    from fsdp_bench.report.reference import fidelity_lines

    old = STRATEGIES_BF16.parents[1] / "part4_fidelity" / "fidelity-fsdp2-bf16-bs8-m2.txt"
    (tmp_path / "part4_fidelity").mkdir()
    (tmp_path / "part4_fidelity" / old.name).write_text(old.read_text())
    (tmp_path / "part4_fidelity" / "fidelity-fsdp2-bf16-bs8-m2-b2.txt").write_text(
        old.read_text().replace("bare loop: 50.29 ms", "bare loop: 44.00 ms")
    )
    second, first = fidelity_lines(tmp_path).splitlines()  # by file name: "-b2.txt" sorts first
    case = "fsdp2-gpt_124m-ws1-bs8-ga1-opt_after-sl1024-bf16"
    assert first.startswith(f"- {case}: suite median step time: 43.30 ms   bare loop: 50.29 ms")
    assert second.startswith(f"- {case} (bare loop 2): suite median step time: 43.30 ms   bare loop: 44.00 ms")
