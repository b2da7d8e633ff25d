"""`python -m fsdp_bench.fit` (`fsdp-bench-fit`): will-it-fit tables and charts
(fsdp_bench.report.fit_chart), and with --trace each case through the fake-tensor estimator,
which launch.estimate starts; a CPU table counts the workers' torch import as the sweep's
host-memory guard does (launch.environment.torch_import_bytes)."""

from fsdp_bench.launch.environment import torch_import_bytes
from fsdp_bench.launch.estimate import estimator
from fsdp_bench.report import fit_chart


def main(argv: list[str] | None = None) -> int:
    return fit_chart.main(argv, estimator=estimator, import_bytes=torch_import_bytes)


if __name__ == "__main__":
    raise SystemExit(main())
