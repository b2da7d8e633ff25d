"""The tested version sets: .ci/run pins them, pyproject.toml's ranges are exactly what they test,
the README names them, and the `versions` tests .ci/run runs under the older set cover every path
that moves with library versions."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from tests.pyproject_file import read_pyproject

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("torch", "accelerate", "transformers")

# Each version-sensitive path, and a test file whose `versions` tests exercise it for real.
COVERED_BY = {
    "FLOP counting (FlopCounterMode)": "test_metrics_inprocess.py",
    "MemTracker": "test_metrics_inprocess.py",
    "HF models with grouped-query attention (llama3_tiny, qwen2_tiny) and without (gpt2_tiny)": "test_workloads.py",
    "transformers' module layout": "test_hf_units.py",
    "accelerate's FSDP2 plugin and prepare": "test_workloads.py",
    "torch.compile": "test_workloads.py",
    "checkpoint save and resume": "test_workloads.py",
    "profiler traces and HTA": "test_metrics_torchrun.py",
    "the fake process group (simulation)": "test_hf_simulated_world_sizes.py",
    "collectives in the profiler trace": "test_simulation.py",
    "2D DeviceMesh (HSDP)": "test_hybrid.py",
    "gloo's reduce-scatter (its copy, the name FSDP2 calls)": "test_gloo_reduce_scatter.py",
}


def ci_sets() -> dict[str, dict[str, str]]:
    """NAME_PINS="lib==version ..." lines of .ci/run, as {NAME: {lib: version}}."""
    text = (ROOT / ".ci" / "run").read_text()
    return {
        name: dict(pin.split("==") for pin in pins.split())
        for name, pins in re.findall(r'^(\w+)_PINS="([^"]*)"$', text, re.MULTILINE)
    }


def project_requirements() -> dict[str, Requirement]:
    project = read_pyproject()["project"]
    lines = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {req.name: req for req in map(Requirement, lines)}


def test_ci_pins_torch_accelerate_and_transformers_in_two_sets():
    sets = ci_sets()
    assert set(sets) == {"NEWEST", "GPU"}, sets
    for name, pins in sets.items():
        assert set(pins) == set(LIBRARIES), name
    run = (ROOT / ".ci" / "run").read_text()
    # the whole suite, as the README says, on two xdist workers
    assert '"$NEWEST_PINS" "$NEWEST_LIMIT_S" tests -n 2 --dist loadfile -q' in run
    assert '"$GPU_PINS" "$GPU_LIMIT_S" tests -m versions -n 2 --dist loadfile' in run


def test_pyproject_ranges_are_exactly_the_tested_versions():
    """Every pinned version is allowed; each lower bound is the oldest tested version, and torch
    (whose internals the worker uses) stops before the minor release after the newest that passed
    the whole suite (TORCH_TESTED: CI's, or once by hand); a cap below it would make pip replace a
    user's tested torch with an older one."""
    from fsdp_bench.launch.environment import TORCH_TESTED

    requirements, sets = project_requirements(), ci_sets()
    for name, pins in sets.items():
        for library, version in pins.items():
            assert requirements[library].specifier.contains(version), (name, library, version)
    for library in LIBRARIES:
        oldest = min(Version(pins[library]) for pins in sets.values())
        lower = [Version(s.version) for s in requirements[library].specifier if s.operator == ">="]
        assert lower == [oldest], (library, str(requirements[library].specifier), oldest)
    newest_torch = max(Version(v) for v, how in TORCH_TESTED.items() if how in ("ci", "once"))
    upper = [Version(s.version) for s in requirements["torch"].specifier if s.operator == "<"]
    assert upper == [Version(f"{newest_torch.major}.{newest_torch.minor + 1}")], upper


def test_the_torch_releases_ci_tests_are_the_ones_the_sweep_stays_quiet_about():
    """TORCH_TESTED's "ci" releases are exactly .ci/run's torch pins; the sweep's line before its
    first case names any other torch, and the README's table lists every release tested once."""
    from fsdp_bench.launch.environment import TORCH_TESTED, torch_version_line

    pinned = {".".join(pins["torch"].split(".")[:2]) for pins in ci_sets().values()}
    assert {v for v, how in TORCH_TESTED.items() if how == "ci"} == pinned
    for version in ("2.11.0+cu130", "2.13.0+cpu", "2.13.1", None):
        assert torch_version_line(version) is None, version
    once = torch_version_line("2.14.1+cu130")
    assert once.startswith("fsdp-bench: torch 2.14.1+cu130 passed the whole test suite once, on CPU; CI tests ")
    assert "2.11 and 2.13" in once and "\n" not in once
    assert "torch 2.15.0+cu132 passed the whole test suite once" in torch_version_line("2.15.0+cu132")
    for untested in ("2.12.0", "2.16.0", "2.10.0+cu128"):
        assert f"torch {untested} was never tested with fsdp-bench" in torch_version_line(untested)
    readme = (ROOT / "README.md").read_text()
    for version, how in TORCH_TESTED.items():
        assert how == "ci" or f"| `{version}." in readme, version


def test_readme_names_each_tested_set_on_one_line():
    lines = (ROOT / "README.md").read_text().splitlines()
    for name, pins in ci_sets().items():
        assert any(all(f"`{v}`" in line for v in pins.values()) for line in lines), (name, pins)


def test_each_version_sensitive_path_has_versions_tests():
    for path, filename in COVERED_BY.items():
        (found,) = (ROOT / "tests").rglob(filename)  # tests/unit or tests/integration
        assert "pytest.mark.versions" in found.read_text(), (path, filename)


def test_the_readme_gpu_install_pins_the_gpu_machines_torch():
    """The GPU block installs the torch the GPU set of .ci/run tests (issue 39 item 10), not the
    CPU set's newer one."""
    root = Path(__file__).resolve().parents[2]
    gpu_pins = re.search(r'^GPU_PINS="([^"]+)"', (root / ".ci" / "run").read_text(), re.M)[1]
    torch_pin = next(p for p in gpu_pins.split() if p.startswith("torch=="))
    readme = (root / "README.md").read_text()
    block = readme.split("torch with CUDA", 1)[1].split("```", 2)[1]
    assert f"pip install {torch_pin} " in block


def test_pytest_limits_leave_ci_inside_its_90_minutes():
    """Both sets' pytest limits, their 60 s kill grace periods, one rerun of failed tests and an
    allowance for both installs (the CUDA wheels of the GPU set are the long one) fit CI's limit:
    a hung test ends as a named failure, not as a CI run cut off with nothing reported."""
    text = (ROOT / ".ci" / "run").read_text()
    limits = {name: int(v) for name, v in re.findall(r"^(\w+)_LIMIT_S=\$\{\w+:-(\d+)\}$", text, re.MULTILINE)}
    rerun = int(re.search(r"^RERUN_LIMIT_S=(\d+)$", text, re.MULTILINE).group(1))
    installs_s = 600
    assert set(limits) == {"NEWEST", "GPU"}, limits
    assert sum(limits.values()) + 2 * 60 + rerun + installs_s <= 90 * 60


def test_the_gpu_sets_install_runs_while_the_newest_set_is_tested():
    """The GPU set's CUDA wheels install in the background from the start, so CI's wall time is
    not the two installs and the two test runs in a row; run_set waits for it."""
    text = (ROOT / ".ci" / "run").read_text()
    background = text.index('install_in_background gpu .venv-ci-211 "$GPU_PINS"\n')
    assert background < text.index("run_set newest ") < text.index("run_set gpu .venv-ci-211 ")
