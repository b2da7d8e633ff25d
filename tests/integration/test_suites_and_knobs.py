"""Named suites and knob options: collection without torch, expected cases, ids, skips."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_bench.plan.case import Case, CaseError, Grid, expand_grid
from fsdp_bench.plan.flavors import MODEL_FLAVORS
from fsdp_bench.plan.options import parse_sweep
from fsdp_bench.plan.suites import SUITES, SuiteSettings, suite_cases

ROOT = Path(__file__).resolve().parents[2]
CPU = SuiteSettings(device="cpu", nproc=2, steps=3, warmup=1, pg_timeout_s=60.0)
GPU = SuiteSettings(device="cuda", nproc=8, steps=3, warmup=1, pg_timeout_s=60.0)


def test_every_suite_collects_without_importing_torch():
    code = (
        "import sys, subprocess\n"
        "import pytest\n"
        f"names = {list(SUITES)!r}\n"
        "for name in names:\n"
        "    rc = pytest.main(['benchmarks', '--collect-only', '-q', '-p', 'no:randomly', '--bench-suite', name])\n"
        "    assert rc == 0, name\n"
        "print('TORCH_IMPORTED', 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "TORCH_IMPORTED False" in out.stdout
    for suite in SUITES:
        assert f"test_suite_{suite.replace('-', '_')}.py::test_case[" in out.stdout


def test_each_suite_has_its_module_and_docs_heading():
    docs = (ROOT / "docs" / "suites.md").read_text()
    for suite in SUITES.values():
        assert (ROOT / suite.module).is_file()
        assert f"## Suite: {suite.name}" in docs


def test_suites_list_the_expected_cases():
    ids = {name: [c.id for c in suite_cases(name, GPU)] for name in SUITES}
    assert "ddp-linear_odsc-ws8-bs8192-ga1-opt_after-sl1" in ids["odsc-linear"]
    assert "fsdp1_offload-linear_odsc-ws8-bs8192-ga1-opt_after-sl1" in ids["odsc-linear"]
    assert "fsdp1_full_shard-linear_odsc-ws8-bs8192-ga1-opt_after-sl1-fwdpf1-bwdpf_post" in ids["odsc-linear"]
    assert "fsdp1_full_shard-linear_odsc-ws8-bs8192-ga1-opt_after-sl1-wrap_size_based-mnp1000000" in ids["odsc-linear"]
    # chess: grad-accum keeps the total batch 32 per rank-count as per-device batch grows
    chess = suite_cases("chess-finetune", GPU)
    assert {c.batch_size * c.grad_accum for c in chess} == {32}
    assert {c.act_ckpt for c in chess} == {False, True} and {c.model for c in chess} == {"codellama_7b"}
    nano = suite_cases("nanogpt-fsdp", GPU)
    assert {c.strategy for c in nano} == {"ddp", "fsdp1_full_shard", "fsdp2"}
    assert all(c.compile and c.precision == "bf16" for c in nano)
    assert {c.checkpoint for c in nano} == {"none", "full", "sharded"}
    z = suite_cases("zero2-vs-zero3", GPU)
    assert len(z) == 4 * 4 * 3 and all(c.optimizer_impl == "fused" and c.model == "qwen2_1_5b" for c in z)
    opt = [(c.strategy, c.optimizer_timing) for c in suite_cases("optimizer-timing", GPU)]
    assert opt == [
        ("fsdp2", "after_shard"),
        ("fsdp2", "before_shard"),
        ("fsdp2", "before_shard_fixed"),
        ("accelerate_fsdp2", "before_shard_fixed"),
    ]


def test_suites_scale_down_on_cpu_and_say_so():
    for name in SUITES:
        cpu, gpu = suite_cases(name, CPU), suite_cases(name, GPU)
        assert all(c.scaled_down.startswith("cpu:") and c.suite == name for c in cpu)
        assert all(c.scaled_down == "" for c in gpu)
        for c in cpu:
            assert MODEL_FLAVORS[c.model].name.endswith("_tiny") and not c.compile


def test_knob_options_cross_as_axes_and_appear_in_ids_only_when_not_default():
    sweep = parse_sweep(
        {
            "strategies": "ddp,fsdp1_full_shard,fsdp2",
            "batch-sizes": "2",
            "grad-accum": "1",
            "precision": "fp32,bf16",
            "wrap-policy": "module,none",
            "device": "cpu",
        }
    )
    ids = [c.id for c in sweep.cases()]
    assert "fsdp1_full_shard-gpt_tiny-ws2-bs2-ga1-opt_after-bf16-wrap_none" in ids
    assert "ddp-gpt_tiny-ws2-bs2-ga1-opt_after" in ids
    assert not any(i.startswith(("ddp", "fsdp2")) and "wrap_" in i for i in ids)  # FSDP1-only knob
    assert len(ids) == 2 + 4 + 2


def test_knob_option_errors_name_the_option():
    for raw, message in (
        ({"precision": "fp8"}, "--bench-precision: unknown value 'fp8'"),
        ({"act-ckpt": "maybe"}, "--bench-act-ckpt: 'maybe' is not on or off"),
        ({"grad-clip": "-1"}, "--bench-grad-clip: '-1' is not a non-negative number"),
        ({"suite": "nope"}, "--bench-suite: unknown value 'nope'"),
        ({"model": "hf:/nonexistent"}, "--bench-model: hf:/nonexistent: /nonexistent is not a folder"),
    ):
        with pytest.raises(CaseError, match="^" + message.replace("(", r"\(")):
            parse_sweep(raw)


def test_grad_sync_and_prefetch_collapse_where_they_do_not_apply():
    cases = expand_grid(
        Grid(
            strategies=("ddp", "fsdp2"),
            batch_sizes=(2,),
            grad_accums=(1, 2),
            optimizer_timings=("after_shard",),
            knobs={"grad_sync": ("every", "last"), "forward_prefetch": (0, 1)},
        )
    )
    ids = [c.id for c in cases]
    assert "ddp-gpt_tiny-ws2-bs2-ga1-opt_after" in ids and "ddp-gpt_tiny-ws2-bs2-ga2-opt_after-sync_last" in ids
    assert not any("sync_last" in i and "ga1" in i for i in ids)
    assert not any(i.startswith("ddp") and "fwdpf" in i for i in ids)
    assert "fsdp2-gpt_tiny-ws2-bs2-ga2-opt_after-fwdpf1-sync_last" in ids


def test_hf_path_flavor_reads_a_local_config(tmp_path):
    shipped = json.loads((ROOT / "fsdp_bench/plan/configs/gpt2_124m.json").read_text())
    (tmp_path / "config.json").write_text(
        json.dumps({**shipped, "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 300, "n_positions": 64})
    )
    case = Case(strategy="ddp", model=f"hf:{tmp_path}", seq_len=64)
    assert tmp_path.name in case.id
    with pytest.raises(CaseError, match="has no config.json"):
        Case(strategy="ddp", model=f"hf:{ROOT / 'benchmarks'}")
    with pytest.raises(CaseError, match="exceeds"):
        Case(strategy="ddp", model="gpt2_tiny", seq_len=257)
    # The model builds from the folder's config on the meta device; blocks come from the model.
    from fsdp_bench.worker.models.build import block_modules, build_model, get_flavor

    model = build_model(get_flavor(case.model), seed=0, meta=True)
    assert all(p.is_meta for p in model.parameters())
    assert [type(b).__name__ for b in block_modules(model)] == ["GPT2Block"]
