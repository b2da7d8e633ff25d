"""Issue #39 item 4: every place a peak is shown has one unit per column and per line, and names
what was measured (allocated, or RSS where nothing else exists: a failed or skipped memory probe,
FSDP1 on CPU before its profiled peak)."""

from __future__ import annotations

import pandas as pd

from fsdp_bench.launch.progress import progress_line
from fsdp_bench.report.page import tuning_rows
from fsdp_bench.report.summary import memory_saved_vs_ddp
from fsdp_bench.results.schema import memory_unit


def _ok(case_id: str, device: str = "cpu", **metrics) -> dict:
    return {"status": "ok", "case": {"device": device}, "metrics": metrics}


def test_the_live_lines_keep_one_unit_and_name_rss_as_a_stand_in():
    ddp = progress_line(1, 2, "ddp", _ok("ddp", peak_allocated_gib=0.0099, peak_rss_gib=0.33), 1.0)
    fsdp1 = progress_line(2, 2, "fsdp1", _ok("fsdp1", peak_rss_gib=0.33), 2.0)
    assert "  peak alloc 10.1 MiB  " in ddp and "RSS" not in ddp
    assert "  peak alloc n/a, RSS 338 MiB  " in fsdp1  # was `peak RSS 0.33 GiB` beside ddp's MiB
    gpu = progress_line(1, 1, "ddp", _ok("ddp", "cuda", peak_reserved_gib=21.5, peak_allocated_gib=20.0), 1.0)
    assert "  peak reserved 21.50 GiB  " in gpu


def test_the_memory_line_of_the_summary_has_one_unit():
    rows = [
        {"model": "m", "strategy": s, "batch_size": 2, "grad_accum": 1, "status": "ok"}
        | {"optimizer_timing": "after_shard", "peak_allocated_gib": v}
        for s, v in (("ddp", 0.0099), ("fsdp2", 0.0051))
    ]
    (line,) = memory_saved_vs_ddp(pd.DataFrame(rows))
    assert "ddp 10.1 MiB" in line and "(5.22 MiB)" in line and "GiB" not in line, line


def test_the_tuning_table_has_one_unit_and_names_each_measure():
    answer = {
        "measured": [
            {"case_id": cid, "status": "ok", "repeat_count": 1, "predicted_step_s": 0.1, "measured_step_s": 0.1}
            | {"error_pct": 0.0, "speed_tokens_per_s": 1000.0, "peak_gib": peak, "fits_budget": True}
            | {"case_seconds": 3.0}
            for cid, peak in (("ddp-a", 0.0099), ("fsdp1-b", 0.33))
        ]
    }
    df = pd.DataFrame(
        [
            {"case_id": "ddp-a", "peak_allocated_gib": 0.0099, "peak_rss_gib": 0.33},
            {"case_id": "fsdp1-b", "peak_allocated_gib": None, "peak_rss_gib": 0.33},
        ]
    )
    head, rows = tuning_rows(answer, df)
    column = head.index("peak MiB")
    assert [r[column] for r in rows] == ["10.14 allocated", "337.9 RSS"]
    assert memory_unit(0.5) == (1024.0, "MiB") and memory_unit(2.0) == (1.0, "GiB")
