"""Suite `zero2-vs-zero3` (see README, "Suite: zero2-vs-zero3"): `pytest benchmarks --bench-suite=zero2-vs-zero3`
or `pytest benchmarks/test_suite_zero2_vs_zero3.py`. Scaled down automatically on CPU."""

BENCH_SUITE = "zero2-vs-zero3"


def test_case(bench_case, bench_run):
    bench_run(bench_case)
