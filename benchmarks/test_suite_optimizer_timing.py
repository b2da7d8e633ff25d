"""Suite `optimizer-timing` (see README, "Suite: optimizer-timing"): `pytest benchmarks --bench-suite=optimizer-timing`
or `pytest benchmarks/test_suite_optimizer_timing.py`. Scaled down automatically on CPU."""

BENCH_SUITE = "optimizer-timing"


def test_case(bench_case, bench_run):
    bench_run(bench_case)
