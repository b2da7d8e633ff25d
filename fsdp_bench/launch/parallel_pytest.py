"""pytest-xdist (`-n N`) and the sweep: cases run one at a time, each alone on its machine. Under
xdist every worker would be a sweep of its own, launching its share of the cases at the same
time as the others, into run folders of their own, with no report or recommendation at the end
(seen: `pytest benchmarks -n 2` gave two run folders and 2 "passed"). Each step time and memory
figure would then measure the neighbours too. So a sweep under xdist is refused before any case
launches; the project's own tests (no case among them) may still use it.

No pytest or xdist import here: the plugin asks these questions and raises."""

from __future__ import annotations

import re
from typing import Any

from fsdp_bench.plan.catalog import STRATEGIES

# The parameter of a bench item: a case id (plan.case.Case.id: strategy-model-wsN-bsB-gaG-opt_T...)
# or a tuning request's (tune-MODEL). xdist's controller sees only node ids. Neither ever holds "/"
# or ":" (the model's are replaced), and a case id starts with a catalog strategy: the project's own
# tests name cases inside longer ids ("strategies/ddp-gpt_124m-ws1-..."), which must not read as
# cases, or `pytest tests -n 4` is refused as a sweep.
_BENCH_PARAM = re.compile(
    r"\[(tune-[^\]/:]+|(?P<strategy>[a-z0-9_]+)-[^\]/:]+-ws\d+-bs\d+-ga\d+-opt_[a-z_]+(-[^\]/:]*)?)\]$"
)


def is_xdist_worker(config: Any) -> bool:
    """An xdist worker's config carries `workerinput` (xdist's documented test for it)."""
    return hasattr(config, "workerinput")


def xdist_workers(config: Any) -> int | None:
    """How many workers `-n` asked for (None: no xdist, or `-n 0`)."""
    n = getattr(config.option, "numprocesses", None)
    return n if isinstance(n, int) and n > 0 else None


def is_bench_node_id(node_id: str) -> bool:
    match = _BENCH_PARAM.search(node_id)
    return match is not None and (match["strategy"] is None or match["strategy"] in STRATEGIES)


def refusal_line(workers: int | None) -> str:
    n = f"-n {workers}" if workers else "-n"
    return (
        f"fsdp-bench: pytest-xdist ({n}) would run cases at the same time on this machine, and each "
        "step time and memory figure would then measure the others too; run the sweep without -n "
        "(or with -n 0 / -p no:xdist)"
    )
