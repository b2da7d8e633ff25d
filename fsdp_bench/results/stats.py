"""Statistics over measured step times (no torch).

Step-time statistics follow pytest-benchmark's and pyperf's vocabulary; percentiles use linear
interpolation between closest ranks (numpy's default), so p50 equals the median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside [0, 100]")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# A case whose step times vary more than this (coefficient of variation) is flagged noisy.
NOISY_CV_PCT = 10.0
# The one confidence level of every interval and verdict: the medians' intervals, the comparison's
# test, the recommendation's ties, the report's "faster by" lines and the CSV all use it.
CONFIDENCE = 0.95
MEDIAN_CI_LEVEL = CONFIDENCE
CONFIDENCE_PCT = round(100 * CONFIDENCE)


# Up to this many degrees of freedom t_quantile inverts the exact distribution function; beyond it
# the expansion is exact to far better than 0.1%.
EXACT_T_MAX_DOF = 200


def t_quantile(p: float, dof: float) -> float:
    """Student's t quantile, no scipy: for whole dof up to EXACT_T_MAX_DOF the exact value (the
    distribution function's closed form, inverted by bisection), else a Cornish-Fisher expansion
    around the normal quantile. The expansion alone read 2.7% low at dof 3 in the Bonferroni
    tails the comparison uses (p = 1 - 0.05/48: 9.80 against 10.07), which narrowed its intervals."""
    if dof == 1:  # closed forms
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    if dof <= 0 or math.isinf(dof):
        return statistics.NormalDist().inv_cdf(p)
    if dof == int(dof) and dof <= EXACT_T_MAX_DOF and 0 < p < 1:
        return _t_quantile_exact(p, int(dof))
    z = statistics.NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3 + g4 / dof**4


def _t_within(t: float, dof: int) -> float:
    """P(|T| < t) for Student's t with a whole number of degrees of freedom (Abramowitz and Stegun
    26.7.3-4: a finite sum of powers of cos(theta), theta = atan(t / sqrt(dof)))."""
    theta = math.atan(t / math.sqrt(dof))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    term, total = 1.0, 1.0
    if dof % 2 == 0:  # sin(theta) * (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ... up to c^(dof-2))
        for k in range(1, dof // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total
    # 2/pi * (theta + sin(theta) cos(theta) (1 + 2/3 c^2 + 2*4/(3*5) c^4 + ... up to c^(dof-3)))
    for k in range(1, (dof - 1) // 2):
        term *= c2 * (2 * k) / (2 * k + 1)
        total += term
    return 2 / math.pi * (theta + s * math.cos(theta) * total)


def _t_quantile_exact(p: float, dof: int) -> float:
    if p < 0.5:
        return -_t_quantile_exact(1 - p, dof)
    target, low, high = 2 * p - 1, 0.0, 1.0
    while _t_within(high, dof) < target:
        high *= 2
    for _ in range(200):  # bisection to the float's resolution
        mid = (low + high) / 2
        if mid in (low, high):
            break
        low, high = (mid, high) if _t_within(mid, dof) < target else (low, mid)
    return (low + high) / 2


def ci_halfwidth_pct(low: float, high: float, median: float) -> float | None:
    """The wider side of a median's interval, in percent of the median (the "+-" a reader sees)."""
    if not median > 0:
        return None
    return 100 * max(high - median, median - low) / median


def median_ci(values: Sequence[float], level: float = MEDIAN_CI_LEVEL) -> tuple[float, float, float]:
    """Distribution-free confidence interval of the median: order statistics (j, k) such that
    P(X(j) <= median <= X(k)) = P(j <= B < k) for B ~ Binomial(n, 1/2), the narrowest symmetric
    pair reaching `level`. Returns (low, high, achieved level); with few values (n < 6 at 95%)
    no pair reaches the level and (min, max) is returned with the level it does reach."""
    if not values:
        raise ValueError("median_ci of no values")
    ordered = sorted(values)
    n = len(ordered)
    pmf = [math.comb(n, i) / 2**n for i in range(n + 1)]
    best = (0, n - 1, 1 - 2 * pmf[0] if n > 1 else 0.0)
    for j in range(n // 2, -1, -1):  # j = 0-based index of the lower order statistic
        k = n - 1 - j
        coverage = sum(pmf[j + 1 : k + 1])  # P(j+1 <= B <= k): X(j) <= median <= X(k)
        if k >= j and coverage >= level:
            best = (j, k, coverage)
            break
    j, k, coverage = best
    return ordered[j], ordered[k], coverage


def intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def summarize_step_times(times_s: Sequence[float]) -> dict[str, float | None]:
    """Median (with its confidence interval), mean, spread and coefficient of variation of
    steady-state step times."""
    if not times_s:
        return {}
    low, high, level = median_ci(times_s)
    median = statistics.median(times_s)
    mean = statistics.fmean(times_s)
    stdev = statistics.stdev(times_s) if len(times_s) > 1 else 0.0
    return {
        "step_time_s_median": median,
        "step_time_s_mean": mean,
        "step_time_s_stdev": stdev,
        "step_time_s_p10": percentile(times_s, 10),
        "step_time_s_p90": percentile(times_s, 90),
        "step_time_s_min": min(times_s),
        "step_time_s_max": max(times_s),
        "step_time_cv_pct": 100 * stdev / mean if mean > 0 else None,
        "step_time_s_median_ci_low": low,
        "step_time_s_median_ci_high": high,
        # The stated level when the interval reaches it (its exact coverage is a little higher:
        # order statistics come in steps); with too few steps, the lower level it does reach.
        "step_time_median_ci_level_pct": CONFIDENCE_PCT if level >= CONFIDENCE else 100 * level,
        "step_time_median_ci_halfwidth_pct": ci_halfwidth_pct(low, high, median),
    }


def slowest_rank_step_times(per_rank_times: Iterable[Sequence[float]]) -> list[float]:
    """Per step, the slowest rank's time: a synchronous step ends when its last rank does."""
    columns = list(zip(*per_rank_times))
    return [max(col) for col in columns]


def mean_across_ranks(per_rank_values: Iterable[Sequence[float]]) -> list[float]:
    columns = list(zip(*per_rank_values))
    return [statistics.fmean(col) for col in columns]


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes, for (cost, value) pairs where a
    lower cost and a higher value are better (e.g. peak memory GiB, tokens/s per device);
    ordered by cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front
