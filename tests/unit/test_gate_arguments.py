"""The argument checks of visualize.py and scripts/ci_gate.py, in process (the command lines
themselves: tests/integration/test_visualize.py and test_ci_gate.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import visualize
from fsdp_bench.results.schema import ResultError

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"


def _gate():
    spec = importlib.util.spec_from_file_location("ci_gate", ROOT / "scripts" / "ci_gate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("text", ["inf", "1e400", "nan", "0", "-2", "forty"])
def test_budget_must_be_a_finite_positive_number_of_gib(text):
    with pytest.raises(ResultError, match=f"^--budget-gib: {text} is not a positive number of GiB$"):
        visualize.parse_budget(text)


def test_budget_accepts_a_number_and_none():
    assert visualize.parse_budget("0.5") == 0.5 and visualize.parse_budget(None) is None


def test_a_run_folder_problem_says_which(tmp_path):
    assert visualize.run_folder_problem(tmp_path / "gone").endswith("(the path does not exist)")
    assert visualize.run_folder_problem(tmp_path).endswith("(no cases/ or env.json)")
    assert visualize.run_folder_problem(GOLDEN / "base") is None


def test_out_is_refused_only_when_it_is_another_run(tmp_path):
    base, new = GOLDEN / "base", GOLDEN / "new"
    with pytest.raises(ResultError, match="is another fsdp-bench run folder"):
        visualize.check_out([base], new)
    with pytest.raises(ResultError, match="is a fsdp-bench run folder; give a new folder for the 2 reports"):
        visualize.check_out([base, new], base)
    with pytest.raises(ResultError, match=f"--out: {GOLDEN / 'base'} is another fsdp-bench run folder"):
        # two runs into GOLDEN: GOLDEN/base, a run of its own, would get x/base's report
        visualize.check_out([tmp_path / "x" / "base", tmp_path / "y" / "z"], GOLDEN)
    visualize.check_out([base], base)  # where it writes without --out
    visualize.check_out([base, new], GOLDEN)  # each into itself
    visualize.check_out([base, new], tmp_path / "fresh")
    visualize.check_out([base], None)


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["RUN", "--baseline", "NONE", "--threshold", "-1"], "--threshold: -1 is not a non-negative percentage"),
        (["RUN", "--baseline", "NONE", "--threshold", "nan"], "--threshold: nan is not a non-negative percentage"),
        (["RUN", "--baseline", "RUN"], "--baseline: RUN is the run itself; give the stored baseline's folder"),
        (["GONE", "--baseline", "NONE"], "GONE: not a fsdp-bench run folder (the path does not exist)"),
        (["RUN", "--baseline", "PLAIN"], "PLAIN: exists but is not a fsdp-bench run folder"),
        (["RUN", "--baseline", "NONE"], None),
    ],
)
def test_ci_gate_checks_its_own_arguments(tmp_path, argv, problem):
    names = {"RUN": GOLDEN / "base", "NONE": tmp_path / "none", "GONE": tmp_path / "gone", "PLAIN": tmp_path}
    gate = _gate()
    args = gate.parse_args([str(names.get(a, a)) for a in argv])
    found = gate.argument_problem(args)
    for name, path in names.items():
        found = found and found.replace(str(path), name)
    assert found == problem


def test_ci_gate_asks_for_write_access_only_where_it_writes(tmp_path, monkeypatch):
    """A first run (no baseline yet) copies RUN beside the baseline and writes nothing into RUN; a
    comparison writes compare.* into RUN, and beside the baseline only with --update-baseline. The
    gate used to ask for a writable RUN always and never for the baseline's folder, where
    store_baseline then failed with a traceback."""
    shelf = tmp_path / "shelf"
    shelf.write_text("a file where the baseline's folder should be")
    gate = _gate()

    def problem(baseline, *extra):
        return gate.argument_problem(gate.parse_args([str(GOLDEN / "new"), "--baseline", str(baseline), *extra]))

    # real checks: a baseline that cannot be stored is named before the sweep's run is read
    assert problem(shelf / "base") == f"--baseline: {str(shelf)!r} is not a folder ({str(shelf)!r} is a file)"
    assert problem(shelf / "base", "--suite-failed") is None  # never stored: nothing is written
    # which folders each mode asks about (as root, the test's user here, every folder is writable)
    asked = []
    monkeypatch.setattr(gate, "writable_dir", lambda option, raw: asked.append((option, raw)))
    fresh = tmp_path / "fresh" / "base"
    assert problem(fresh) is None and asked == [("--baseline", str(fresh.parent))]
    asked.clear()
    assert problem(GOLDEN / "base") is None and asked == [("RUN", str(GOLDEN / "new"))]
    asked.clear()
    assert problem(GOLDEN / "base", "--update-baseline") is None
    assert asked == [("RUN", str(GOLDEN / "new")), ("--baseline", str(GOLDEN))]
