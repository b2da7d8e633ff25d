"""The size of 'within noise': the smallest change a comparison could detect, and the repeats a
side that would bring it down to a target (analysis/run_noise.py)."""

from __future__ import annotations

import math

import pytest

from fsdp_bench.analysis.run_noise import RunNoise, repeats_needed, timing_change


def test_detectable_change_is_the_bound_a_slowdown_must_pass():
    noise = RunNoise(sd_log=0.2, dof=8, cases=2)
    change = timing_change([1.0] * 3, [1.0] * 3, noise)
    half = noise.t * 0.2 * math.sqrt(2 / 3)
    assert change.detectable_pct == pytest.approx(100 * math.expm1(half))
    # a slowdown just past the printed figure is significant, one just short of it is not
    just_past = timing_change([1.0] * 3, [1 + change.detectable_pct / 100 * 1.01] * 3, noise)
    just_short = timing_change([1.0] * 3, [1 + change.detectable_pct / 100 * 0.99] * 3, noise)
    assert just_past.significant and not just_short.significant
    # more repeats, a smaller detectable change; unknown noise, none at all
    assert timing_change([1.0] * 6, [1.0] * 6, noise).detectable_pct < change.detectable_pct
    assert timing_change([1.0], [1.0], None).detectable_pct is None


@pytest.mark.parametrize("sd_log, cases, target", [(0.05, 4, 10), (0.21, 4, 10), (0.10, 24, 5), (0.02, 1, 5)])
def test_repeats_needed_is_the_fewest_that_detect_the_target(sd_log, cases, target):
    n = repeats_needed(sd_log, cases, target)
    assert n is not None and n >= 2

    def detectable(repeats: int) -> float:
        noise = RunNoise(sd_log, 2 * cases * (repeats - 1), cases)
        return timing_change([1.0] * repeats, [1.0] * repeats, noise).detectable_pct

    assert detectable(n) <= target
    if n > 2:
        assert detectable(n - 1) > target


def test_repeats_needed_out_of_reach_or_without_target():
    assert repeats_needed(0.5, 24, 0.1) is None  # more than MAX_REPEATS
    assert repeats_needed(0.1, 4, 0) is None
