import dataclasses

import pytest

from fsdp_bench.plan.case import Case, CaseError, Grid, expand_grid
from fsdp_bench.plan.catalog import STRATEGIES


def test_id_names_every_axis():
    case = Case(strategy="fsdp2", model="gpt_tiny", nproc=2, batch_size=8, grad_accum=2)
    assert case.id == "fsdp2-gpt_tiny-ws2-bs8-ga2-opt_after"


def test_id_adds_non_default_fields_only():
    assert Case(strategy="ddp", seq_len=64).id.endswith("-sl64")
    assert "seed" not in Case(strategy="ddp").id
    assert Case(strategy="ddp", seed=3).id.endswith("-seed3")
    # measurement settings never change the id, so a resumed run finds the same cases
    assert Case(strategy="ddp", steps=50, warmup=9).id == Case(strategy="ddp").id


def test_optimizer_timing_short_names_are_distinct():
    ids = {Case(strategy="fsdp2", optimizer_timing=t).id for t in ("after_shard", "before_shard", "before_shard_fixed")}
    assert len(ids) == 3


def test_case_is_frozen_and_keyword_only():
    case = Case(strategy="ddp")
    with pytest.raises(dataclasses.FrozenInstanceError):
        case.batch_size = 3
    with pytest.raises(TypeError):
        Case("ddp")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"strategy": "zero9"}, "unknown strategy 'zero9'; known: ddp, fsdp1_full_shard"),
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"batch_size": 2.5}, "batch_size must be a positive integer, got 2.5"),
        ({"grad_accum": -1}, "grad_accum must be a positive integer"),
        ({"optimizer_timing": "later"}, "unknown optimizer timing 'later'"),
        ({"model": "resnet"}, "unknown model 'resnet'"),
        ({"device": "tpu"}, "unknown device 'tpu'"),
        ({"warmup": -1}, "warmup must be a non-negative integer"),
        ({"seq_len": 4096}, "seq_len 4096 exceeds gpt_tiny's context of 256 tokens"),
    ],
)
def test_validation_messages(changes, message):
    with pytest.raises(CaseError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        Case(**{"strategy": "ddp", **changes})


def test_round_trip_and_unknown_fields():
    case = Case(strategy="fsdp2", batch_size=4)
    assert Case.from_dict(case.to_dict()) == case
    with pytest.raises(CaseError, match="unknown case field"):
        Case.from_dict({**case.to_dict(), "flux": 1})


def test_grid_is_the_product_without_ddp_duplicates():
    grid = Grid(
        strategies=("ddp", "fsdp2"),
        batch_sizes=(2, 4),
        grad_accums=(1, 2),
        optimizer_timings=("after_shard", "before_shard", "before_shard_fixed"),
    )
    cases = expand_grid(grid)
    ddp = [c for c in cases if c.strategy == "ddp"]
    fsdp2 = [c for c in cases if c.strategy == "fsdp2"]
    assert len(ddp) == 4 and {c.optimizer_timing for c in ddp} == {"after_shard"}
    assert len(fsdp2) == 12
    assert len({c.id for c in cases}) == len(cases)
    assert [c.id for c in cases] == [c.id for c in expand_grid(grid)]  # stable order


def test_every_catalog_family_has_its_apply_verb():
    from fsdp_bench.plan.catalog import FAMILIES
    from fsdp_bench.worker.strategies import APPLY_BY_FAMILY

    assert set(APPLY_BY_FAMILY) == set(FAMILIES)
    assert {row.family for row in STRATEGIES.values()} <= set(FAMILIES)


def test_derived_sizes():
    case = Case(strategy="ddp", batch_size=4, grad_accum=2, nproc=2, seq_len=32)
    assert case.global_batch_size == 16
    assert case.tokens_per_step == 512


def test_an_hf_folder_whose_name_holds_a_newline_is_one_line(tmp_path):
    """The model is in the case id, the live line and the recommendation (#37)."""
    from fsdp_bench.plan.option_values import parse_models

    folder = tmp_path / "my\nmodel"
    folder.mkdir()
    (folder / "config.json").write_text(
        '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 64}'
    )
    with pytest.raises(CaseError) as info:
        parse_models("--bench-model", f"hf:{folder}")
    assert "\n" not in str(info.value) and "control character" in str(info.value)


def test_on_off_axes_take_the_spellings_every_switch_takes():
    """--bench-compile took "1" and "true" but refused "yes", which the flags with a value take."""
    import pytest

    from fsdp_bench.plan.case import CaseError
    from fsdp_bench.plan.option_values import _on_off

    assert _on_off("--bench-compile", "yes,No") == (True, False)
    assert _on_off("--bench-act-ckpt", "ON,off,1,false") == (True, False)
    with pytest.raises(CaseError, match=r"^--bench-compile: 'maybe' is not on or off$"):
        _on_off("--bench-compile", "maybe")
