"""`python -m fsdp_bench.fit`: will-it-fit tables and charts (see fsdp_bench.report.fit_chart)."""

from fsdp_bench.report.fit_chart import main

if __name__ == "__main__":
    raise SystemExit(main())
