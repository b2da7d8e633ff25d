"""The default sweep: every strategy x batch size x grad-accum x optimizer timing for the chosen
model(s), each case in its own torchrun. Axes come from the `--bench-*` options."""


def test_case(bench_case, bench_run):
    bench_run(bench_case)
