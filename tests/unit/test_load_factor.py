"""The duration estimate's allowance for load (issue #39 item 2): a probe that ran in a quiet
moment of a busy machine is slowed to the share a process gets over the load average; a probe
that already ran among the busy tasks, or a quiet machine, keeps its rate."""

import pytest

from fsdp_bench.analysis.duration import LOAD_CPU_BOUND, REFERENCE_GFLOPS, Calibration, estimate_sweep, load_factor
from fsdp_bench.plan.options import parse_sweep


def test_a_quiet_machine_keeps_the_probe_rate():
    assert load_factor(0.0, 2, 1.0) == 1.0
    assert load_factor(1.0, 2, 1.2) == 1.0  # load 0-1: nothing lost


def test_a_probe_in_a_quiet_moment_of_a_busy_machine_is_slowed():
    # load 8 on 2 CPUs, the probe alone on the run queue: a process keeps 2 / (1 + 0.3 x 8)
    assert load_factor(8.0, 2, 1.0) == pytest.approx(2 / (1 + LOAD_CPU_BOUND * 8))
    assert load_factor(8.0, 2, None) == load_factor(8.0, 2, 1.0)  # no /proc/stat: the same assumption


def test_a_probe_that_ran_among_the_busy_tasks_keeps_its_rate():
    # a steady burner: the probe shared 2 CPUs with 4 busy tasks and already measured that
    assert load_factor(4.0, 2, 5.0) == 1.0
    # between the two: the probe saw some of the contention the load average says
    partial = load_factor(10.0, 2, 2.5)
    assert load_factor(10.0, 2, 1.0) < partial < 1.0


def test_the_estimate_grows_with_the_load_a_quiet_probe_missed():
    cases = parse_sweep({"device": "cpu"}).cases()
    facts = {"cpu_matmul_gflops": REFERENCE_GFLOPS, "cpu_probe_runnable": 1.0}
    quiet = estimate_sweep(cases, calibration=Calibration.from_facts(facts, 0.5, 2))
    busy = estimate_sweep(cases, calibration=Calibration.from_facts(facts, 8.0, 2))
    assert quiet.calibration.load_factor == 1.0
    factor = load_factor(8.0, 2, 1.0)
    assert busy.calibration.cpu_flops == pytest.approx(quiet.calibration.cpu_flops * factor)
    assert busy.calibration.fixed_scale == pytest.approx(quiet.calibration.fixed_scale / factor)
    assert busy.calibration.startup_scale == pytest.approx(quiet.calibration.startup_scale / factor**0.5)
    # the measured phase is capped in seconds (adaptive measuring), so the whole grows by less
    assert quiet.total_s * 1.1 < busy.total_s < quiet.total_s / factor
    # the facts alone (no load average given) are the probe's rate, as before
    assert Calibration.from_facts(facts).load_factor == 1.0
