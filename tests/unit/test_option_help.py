"""Defaults live on the dataclasses only: every option's help states its default from there, and no
help text spells one by hand (a changed default cannot leave a stale help line behind)."""

from dataclasses import fields

import pytest

from fsdp_bench.plan.case import Case
from fsdp_bench.plan.options import OPTIONS, SWITCH_OPTIONS, default_text, option_help
from fsdp_bench.plan.sweep import Sweep


# ids as the user types them: a bare "tune-..." would read as a tuning request (launch.parallel_pytest)
@pytest.mark.parametrize("name", sorted(OPTIONS), ids=lambda name: f"--bench-{name}")
def test_no_help_text_spells_a_default(name):
    assert "default" not in OPTIONS[name][2], OPTIONS[name][2]


def test_help_states_the_dataclass_defaults():
    assert option_help("batch-sizes").endswith(f"(default: {','.join(map(str, Sweep.batch_sizes))})")
    assert option_help("steps").endswith(f"(default: {Sweep.steps})")
    assert option_help("timeout").endswith(f"(default: {Sweep.timeout_s:g})")
    assert option_help("precision").endswith(f"(default: {Case.precision})")
    assert option_help("act-ckpt").endswith("(default: off)")
    assert option_help("strategies").endswith(f"(default: {','.join(Sweep.strategies)})")
    assert "(default" not in option_help("resume")  # nothing to state
    assert "(default" not in option_help("profile")  # a switch: off unless given


def test_every_option_names_a_dataclass_field():
    sweep_fields = {f.name for f in fields(Sweep)}
    case_fields = {f.name for f in fields(Case)}
    for name, (field_name, _parse, _text) in OPTIONS.items():
        owner, _, attr = field_name.rpartition(".")
        assert attr in (case_fields if owner == "knobs" else sweep_fields), name
        if name not in SWITCH_OPTIONS:
            default_text(field_name)  # resolvable


def test_pytest_help_shows_them(pytester):
    pytester.makeconftest('pytest_plugins = ["fsdp_bench.pytest_plugin"]')
    out = pytester.runpytest("--help").stdout.str()
    assert "default: 2,4)" in " ".join(out.split())  # argparse wraps lines
    assert "within +-PCT %, or" in " ".join(out.split())  # a % in help text must not break --help


def test_a_misspelled_bench_option_gets_the_closest_name():
    from fsdp_bench.plan.options import unknown_option_line

    line = unknown_option_line("usage: pytest ...\npytest: error: unrecognized arguments: --bench-strategy=ddp -x")
    assert (
        line
        == "unknown option --bench-strategy (did you mean --bench-strategies?); `pytest --help` lists every --bench-* option"
    )
    assert "--bench-zzz;" in unknown_option_line("unrecognized arguments: --bench-zzz")  # nothing close: no guess
    assert unknown_option_line("unrecognized arguments: --bogus") is None  # pytest's own words stand
