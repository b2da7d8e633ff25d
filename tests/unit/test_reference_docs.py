"""The README's and docs/gpu-reference.md's GPU tables are the committed run folders': built by
fsdp_bench.report.reference, so a number there changes only with the files or the model."""

from pathlib import Path

from fsdp_bench.report.reference import case_rows, cases_table, fidelity_lines, run_folders, summary_table

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "results" / "reference" / "NVIDIA-H100-80GB-HBM3"


def _block(path: Path, start: str, end: str) -> str:
    text = path.read_text()
    assert start in text, f"{path.name} lacks its generated block ({start})"
    return text.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0].strip()


def test_readme_summary_is_built_from_the_run_folders():
    expected = f"{summary_table(GPU)}\n\n{fidelity_lines(GPU)}"
    block = _block(ROOT / "README.md", "<!-- reference summary:", "<!-- end of reference summary -->")
    assert block == expected, "run: python -m fsdp_bench.report.reference results/reference/NVIDIA-H100-80GB-HBM3"


def test_docs_case_table_is_built_from_the_run_folders():
    expected = cases_table(row for run in run_folders(GPU) for row in case_rows(run))
    block = _block(ROOT / "docs" / "gpu-reference.md", "<!-- reference cases:", "<!-- end of reference cases -->")
    assert block == expected


def test_every_finished_gpu_case_is_in_the_table():
    rows = [row for run in run_folders(GPU) for row in case_rows(run)]
    assert len(rows) == 42  # every finished case of both leases (29 on the first, 13 on the second)
    assert {r["case"].strategy for r in rows} >= {
        "ddp",
        "fsdp1_no_shard",
        "fsdp1_full_shard",
        "fsdp1_offload",
        "fsdp1_hybrid_shard",
        "fsdp2",
        "fsdp2_no_reshard",
        "fsdp2_offload",
        "fsdp2_hsdp",
        "accelerate_fsdp2",
    }


# --- the statements of docs/gpu-reference.md "What the leases show", read off the files ----------


def _gpt2_ranks_by_day(part: str) -> dict[str, list[tuple[dict, dict]]]:
    """(case result, rank record) of every ok case of a part's GPT-2 runs, by the day it started."""
    from fsdp_bench.results.load import load_case_result

    days: dict[str, list[tuple[dict, dict]]] = {}
    for path in sorted(GPU.glob(f"{part}/*/cases/*.json")):
        result = load_case_result(path)
        if result["status"] == "ok" and "gpt_124m" in result["case_id"]:
            for rank in result["ranks"]:
                days.setdefault(rank["started_utc"][:10], []).append((result, rank))
    return days


def _span(values) -> str:
    values = list(values)
    return f"{min(values):.1f}-{max(values):.1f}%"


def test_the_leases_statements_match_their_files():
    from fsdp_bench.analysis.case_time import measure_timed_share_pct

    text = " ".join((ROOT / "docs" / "gpu-reference.md").read_text().split())
    sweep = _gpt2_ranks_by_day("part3_gpt2_sweep")
    share = {day: _span(measure_timed_share_pct(r) for _, r in rows) for day, rows in sweep.items()}
    assert f"2026-11-24 spent {share['2026-11-24']} of their measure stage" in text
    assert f"those of 2026-11-26 {share['2026-11-26']}" in text
    nvml = {day: [res["metrics"]["gpu_util_pct_mean"] for res, _ in rows] for day, rows in sweep.items()}
    nvml["2026-11-26"] += [
        res["metrics"]["gpu_util_pct_mean"] for res, _ in _gpt2_ranks_by_day("part7_tune")["2026-11-26"]
    ]
    assert f"read {_span(nvml['2026-11-24'])} on the 2026-11-24 GPT-2 cases and {_span(nvml['2026-11-26'])}" in text
    fsdp2_bs8 = next(res for res, _ in sweep["2026-11-24"] if res["case_id"].startswith("fsdp2-gpt_124m-ws1-bs8-"))
    assert f"fsdp2 bs8 took {1e3 * fsdp2_bs8['metrics']['step_time_s_median']:.1f} ms on 2026-11-24" in text
    pairs = (GPU / "part4_fidelity" / "fidelity-fsdp2-bf16-bs8-m2.txt").read_text()
    suite = sorted(float(x) for x in pairs.split("raw: suite=[")[1].split("]")[0].split(","))
    assert f"{1e3 * suite[0]:.1f} and {1e3 * suite[1]:.1f} ms on 2026-11-26" in text


def test_the_repeat_ran_on_the_same_lease_minutes_later():
    """The README once called part3_gpt2_sweep_repeat 'a second machine'; its cases started on the
    first lease, 11 minutes after the same cases of the first sweep."""
    from datetime import datetime

    first = {res["case_id"]: rank["started_utc"] for res, rank in _gpt2_ranks_by_day("part3_gpt2_sweep")["2026-11-24"]}
    again = {
        res["case_id"]: rank["started_utc"] for res, rank in _gpt2_ranks_by_day("part3_gpt2_sweep_repeat")["2026-11-24"]
    }
    minutes = {
        round(
            (datetime.fromisoformat(again[c].rstrip("Z")) - datetime.fromisoformat(first[c].rstrip("Z"))).seconds / 60
        )
        for c in again
    }
    assert minutes == {11}
    assert "(`part3_gpt2_sweep_repeat` is the same lease, 11 minutes later)" in (ROOT / "README.md").read_text()
