"""Suite `nanogpt-fsdp` (see README, "Suite: nanogpt-fsdp"): `pytest benchmarks --bench-suite=nanogpt-fsdp`
or `pytest benchmarks/test_suite_nanogpt_fsdp.py`. Scaled down automatically on CPU."""

BENCH_SUITE = "nanogpt-fsdp"


def test_case(bench_case, bench_run):
    bench_run(bench_case)
