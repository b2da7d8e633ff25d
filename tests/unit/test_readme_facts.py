"""Issue #39 item 10: the README's numbers are read off the code or its files, and a test holds
them: the default sweep's grid and counts, the CPU measurement rule, the noise band, the estimate
table's arithmetic, the sample's short answer, the result schema version in docs/metrics.md. Test
counts, which every commit changes, are not stated at all. (The GPU sections and the generated
reference block are held by test_reference_docs.py and test_ci_versions.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from fsdp_bench.analysis.run_noise import SINGLE_RUN_NOISE
from fsdp_bench.plan.catalog import STRATEGIES
from fsdp_bench.plan.sweep import CPU_TARGET_CI_PCT, Sweep
from fsdp_bench.report.answer import ANSWER_MAX_CHARS
from fsdp_bench.results.schema import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _seconds(text: str) -> int:
    minutes, seconds = re.fullmatch(r"(\d+)m(\d\d)s", text).groups()
    return 60 * int(minutes) + int(seconds)


def test_the_default_sweep_is_what_the_readme_says():
    sweep = Sweep()
    assert len(sweep.strategies) == 6 and all(s in STRATEGIES for s in sweep.strategies)
    assert (sweep.batch_sizes, sweep.grad_accums, sweep.steps, sweep.warmup) == ((2, 4), (1, 2), 10, 3)
    assert "six core strategies x batch 2, 4 x grad-accum 1, 2 on `gpt_tiny`" in README
    assert "for 10 measured steps after 3 warmup steps" in README
    assert f"+-{CPU_TARGET_CI_PCT:g}% or {sweep.measure_cap_s:g} s" in README
    assert f"widened +-{100 * SINGLE_RUN_NOISE:.0f}%" in README


def test_the_readme_counts_are_the_collected_ones():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    selected, total, deselected = map(int, re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", out).groups())
    assert f"the default sweep: {selected} cases" in README
    assert f"pytest's `{deselected} deselected` are the suites' cases" in README
    assert f"collected {total} items / {deselected} deselected / {selected} selected" in README
    assert f"[{selected}/{selected}] " in README
    assert not re.search(r"\b\d{3,} tests\b", README), "test counts change with every commit; say what runs"


def test_the_estimate_table_errors_are_its_own_arithmetic():
    rows = re.findall(r"^\| [^|]+ \| [^|]+ \| (\d+m\d\ds) \| (\d+m\d\ds) \| ([+-]\d+)% \|$", README, flags=re.M)
    assert len(rows) >= 3, rows
    for estimate, took, error in rows:
        assert round(100 * (_seconds(estimate) / _seconds(took) - 1)) == int(error), (estimate, took, error)


def test_the_samples_short_answer_fits():
    sample = [line for line in README.splitlines() if line.startswith("Recommendation (")]
    assert sample and all(len(line) <= ANSWER_MAX_CHARS for line in sample), sample


def test_docs_metrics_states_the_schema_version():
    text = (ROOT / "docs" / "metrics.md").read_text()
    assert f"Result files carry `schema_version: {SCHEMA_VERSION}`" in text
    assert f"reads versions 1-{SCHEMA_VERSION}" in text


def test_the_tuner_table_states_the_scripts_settings():
    script = (ROOT / "scripts" / "measure_autotune.py").read_text()
    seq_len = re.search(r'"--bench-seq-len",\s*"(\d+)"', script).group(1)
    assert f"with 2 repeats at\nsequence length {seq_len}, the script's settings, not a default run's" in README
