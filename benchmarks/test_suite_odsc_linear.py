"""Suite `odsc-linear` (see README, "Suite: odsc-linear"): `pytest benchmarks --bench-suite=odsc-linear`
or `pytest benchmarks/test_suite_odsc_linear.py`. Scaled down automatically on CPU."""

BENCH_SUITE = "odsc-linear"


def test_case(bench_case, bench_run):
    bench_run(bench_case)
