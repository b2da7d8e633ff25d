"""Run folders turned into what people read (pandas and matplotlib only here): the comparison
table, the summary lines, run-to-run comparison, report.md/html and the charts."""

from fsdp_bench.report.writer import write_report

__all__ = ["write_report"]
