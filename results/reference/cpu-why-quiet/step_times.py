"""Writes each sweep's step_times.json from its run folder: per ok case, the timed step times
of the rank its parts describe (parts_rank), which test_why_quiet_facts.py reads to count how
often a block of five consecutive timed steps lands within 15% of the median.

    python results/reference/cpu-why-quiet/step_times.py RUN_DIR results/reference/cpu-why-quiet/sweepN
"""

import json
import sys
from pathlib import Path

run, out = Path(sys.argv[1]), Path(sys.argv[2])
times = {}
for path in sorted((run / "cases").glob("*.json")):
    case = json.loads(path.read_text())
    if case.get("status") == "ok":
        rank = (case.get("metrics") or {}).get("parts_rank", 0)
        times[case["case_id"]] = next(r for r in case["ranks"] if r["rank"] == rank)["step_times_s"]
(out / "step_times.json").write_text(json.dumps(times, indent=0) + "\n")
