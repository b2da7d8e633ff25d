"""docs/metrics.md's "Formula over counter" paragraph against the committed records it was read
from (docs/flop_ratio/, issue 35 item 4): the ratio under both torch versions, the counter's
per-op table and the two terms that make the gap."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "docs" / "flop_ratio"


def _record(version: str) -> dict:
    return json.loads((FILES / f"torch-{version}.json").read_text())


def _doc() -> str:
    return " ".join((ROOT / "docs" / "metrics.md").read_text().split())


def test_the_ratio_is_the_same_under_both_torch_versions():
    doc = _doc()
    for version in ("2.13", "2.11"):
        record = _record(version)
        assert record["torch"].startswith(version)
        ratio = record["flops"]["formula_over_counter"]
        assert f"{version} ({ratio:.5f})" in doc
        assert round(ratio, 3) == 0.980


def test_the_counter_table_and_the_two_terms_match_the_records():
    doc, new, old = _doc(), _record("2.13"), _record("2.11")
    ops = new["counter_ops_per_step"]
    assert ops == {k: v for k, v in old["counter_ops_per_step"].items() if k != "aten.bmm"}
    assert f"aten.bmm of {old['counter_ops_per_step']['aten.bmm']:,} FLOPs" in doc
    for op in ("aten.mm", "aten._scaled_dot_product_flash_attention_for_cpu"):
        assert f"{ops[op]:,}" in doc
    assert f"{ops['aten._scaled_dot_product_flash_attention_for_cpu_backward']:,} backward" in doc
    flops, tokens = new["flops"], 2 * 64
    inputs = flops["formula_inputs"]
    formula_attention = 12 * inputs["n_layers"] * inputs["n_heads"] * inputs["head_dim"] * 64
    counter_attention = sum(v for k, v in ops.items() if "attention" in k) / tokens
    assert counter_attention == formula_attention * 7 / 6
    assert f"{counter_attention:,.0f} against {formula_attention:,} FLOPs per token" in doc
    mm_params = ops["aten.mm"] / tokens / 6
    assert f"6 x {mm_params:,.0f} per token, the formula's 6 x {inputs['n_matmul_params']:,}" in doc
    assert f"the {inputs['n_matmul_params'] - mm_params:.0f} RMSNorm weights" in doc
    assert flops["per_token_formula"] == 6 * inputs["n_matmul_params"] + formula_attention
