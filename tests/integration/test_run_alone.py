"""`pytest tests -n 2 --dist loadfile`: a module marked `run_alone` (the regression gate, whose
planted slowdown must stand out from its sweeps' noise) runs while no other worker runs a module;
the other modules still run beside each other (tests/run_alone.py, the autouse fixture in
tests/conftest.py)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("xdist")

CONFTEST = """
import pytest
from tests.conftest import _run_alone_under_xdist  # noqa: F401  (the fixture under test)

def pytest_configure(config):
    config.addinivalue_line("markers", "run_alone: runs alone under xdist")
"""

# Each test writes when it ran; a module's tests together take about 1.5 s.
MODULE = """
import json, os, time
{mark}

def _ran(name, seconds):
    start = time.time()
    time.sleep(seconds)
    with open("intervals.jsonl", "a") as fh:
        fh.write(json.dumps({{"module": "{module}", "test": name, "start": start, "end": time.time()}}) + "\\n")

def test_a():
    _ran("a", 0.5)

def test_b():
    _ran("b", 0.5)

def test_c():
    _ran("c", 0.5)
"""


def _intervals(pytester: pytest.Pytester, alone: set[str]) -> dict[str, tuple[float, float]]:
    """Runs four modules under -n 2 --dist loadfile; each module's (first start, last end)."""
    pytester.makeconftest(CONFTEST)
    for module in ("m1", "m2", "m3", "m4"):
        mark = "import pytest\npytestmark = pytest.mark.run_alone" if module in alone else ""
        pytester.makepyfile(**{f"test_{module}": MODULE.format(mark=mark, module=module)})
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    spans: dict[str, tuple[float, float]] = {}
    for line in (pytester.path / "intervals.jsonl").read_text().splitlines():
        row = json.loads(line)
        start, end = spans.get(row["module"], (row["start"], row["end"]))
        spans[row["module"]] = (min(start, row["start"]), max(end, row["end"]))
    return spans


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_a_run_alone_module_overlaps_no_other_module(pytester: pytest.Pytester):
    spans = _intervals(pytester, alone={"m2"})
    others = [m for m in spans if m != "m2"]
    assert not [m for m in others if _overlap(spans["m2"], spans[m])], spans
    # the rest still run in parallel: two workers, three 1.5-s modules, some pair side by side
    assert any(_overlap(spans[a], spans[b]) for a in others for b in others if a < b), spans


def test_without_the_mark_modules_run_side_by_side(pytester: pytest.Pytester):
    """The check above can fail: unmarked, the two workers run modules at the same time."""
    spans = _intervals(pytester, alone=set())
    assert any(_overlap(spans[a], spans[b]) for a in spans for b in spans if a < b), spans
