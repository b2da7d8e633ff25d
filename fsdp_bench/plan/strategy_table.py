"""The strategies table docs/options.md holds (`python -m fsdp_bench.plan.strategy_table` prints
it; tests/unit/test_docs_registry.py fails until the docs say the same): each catalog row in a
user's words, so adding a strategy is one row in plan/catalog.py and a paste."""

from __future__ import annotations

import sys

from fsdp_bench.plan.catalog import STRATEGIES


def markdown_table() -> str:
    lines = ["| strategy | what it does | shards | in the default sweep | on CPU |", "|---|---|---|---|---|"]
    for row in STRATEGIES.values():
        default = "yes (the baseline)" if row.is_baseline else ("yes" if row.in_default_sweep else "named explicitly")
        cpu = "yes" if row.cpu_skip_reason is None else "skipped: " + row.cpu_skip_reason.split(": ", 1)[0]
        lines.append(f"| `{row.name}` | {row.description} | {row.sharding} | {default} | {cpu} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - prints the table for the docs
    sys.stdout.write(markdown_table() + "\n")
