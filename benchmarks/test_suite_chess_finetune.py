"""Suite `chess-finetune` (see README, "Suite: chess-finetune"): `pytest benchmarks --bench-suite=chess-finetune`
or `pytest benchmarks/test_suite_chess_finetune.py`. Scaled down automatically on CPU."""

BENCH_SUITE = "chess-finetune"


def test_case(bench_case, bench_run):
    bench_run(bench_case)
