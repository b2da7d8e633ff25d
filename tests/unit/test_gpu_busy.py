"""Issue 32, item 1: the GPU busy share of a step, read off a real H100 device timeline (and item
3's host-bound threshold on timelines of both kinds; its labels are in test_host_bound.py).

The timeline is the profiler trace the H100 reference run committed in 6d3e059 (fsdp2 GPT-2 124M,
batch 4 x 1024 tokens, bf16, activation checkpointing; removed from git in 2f1728b), cut down by
scripts/extract_trace_fixture.py to its device activity and step spans (tests/data/h100_busy). Its
meta holds the same case's timed step times and NVML figure, from its rank-0.json at 6d3e059.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from fsdp_bench.analysis.busy import (
    HOST_BOUND_BUSY_PCT,
    NO_CUDA_KERNELS,
    NO_DEVICE_TIMELINE,
    busy_record,
    busy_share,
    device_busy,
    host_bound_text,
    is_host_bound,
)
from fsdp_bench.worker.profiling import (
    STEP_MARKER,
    attribute_events,
    busy_from_events,
    load_trace_events,
    summarize_events,
)

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests/data/h100_busy/fsdp2-gpt_124m-ws1-bs4-sl1024-bf16-ac.rank0.trace.json.gz"
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def _raw() -> dict:
    with gzip.open(TRACE, "rt") as fh:
        return json.load(fh)


def _meta() -> dict:
    return _raw()["meta"]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]  # three steps: the middle one


def _windows_us(raw: dict) -> list[tuple[float, float]]:
    return [
        (e["ts"], e["ts"] + e["dur"])
        for e in raw["traceEvents"]
        if e["name"] == STEP_MARKER and e["cat"] == "user_annotation"
    ]


def _covered_us(intervals: list[tuple[float, float]], window: tuple[float, float]) -> float:
    """Time inside `window` covered by at least one interval: a sweep over start/end points,
    written apart from analysis.intervals so the two can disagree."""
    points = []
    for start, end in intervals:
        start, end = max(start, window[0]), min(end, window[1])
        if end > start:
            points += [(start, 1), (end, -1)]
    covered, depth, last = 0.0, 0, None
    for at, delta in sorted(points):
        if depth > 0:
            covered += at - last
        depth, last = depth + delta, at
    return covered


def _per_step_bounds_us(raw: dict) -> list[dict[str, float]]:
    """Per step: the window, the covered time, and the bounds any busy time must lie within: at
    least the busiest stream's summed kernels (one stream runs its kernels one after another), at
    most every kernel summed and at most the window."""
    device = [e for e in raw["traceEvents"] if e["cat"] in DEVICE_CATEGORIES]
    out = []
    for window in _windows_us(raw):
        by_stream: dict[int, float] = defaultdict(float)
        for e in device:
            inside = min(e["ts"] + e["dur"], window[1]) - max(e["ts"], window[0])
            by_stream[e["tid"]] += max(inside, 0.0)
        out.append(
            {
                "window": window[1] - window[0],
                "covered": _covered_us([(e["ts"], e["ts"] + e["dur"]) for e in device], window),
                "lower": max(by_stream.values()),
                "upper": min(sum(by_stream.values()), window[1] - window[0]),
            }
        )
    return out


def test_fixture_is_small_and_is_the_h100_case():
    raw = _raw()
    assert TRACE.stat().st_size < 500_000
    assert raw["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert len(_windows_us(raw)) == 2 and sum(e["cat"] == "kernel" for e in raw["traceEvents"]) == 1816


def test_busy_time_per_step_is_the_union_of_the_steps_device_work():
    raw = _raw()
    busy = busy_from_events(load_trace_events(TRACE))
    steps = _per_step_bounds_us(raw)
    assert busy["steps"] == 2 and busy["null_reason"] is None
    # within 1 us: the trace's microsecond stamps (~4.7e12) lose a few ns each as float seconds
    expected_s = sum(s["covered"] for s in steps) / 2 / 1e6
    assert busy["busy_s_per_step"] == pytest.approx(expected_s, abs=1e-6)
    assert busy["window_s_per_step"] == pytest.approx(sum(s["window"] for s in steps) / 2 / 1e6, abs=1e-6)
    for s in steps:  # the recorded step: 19.6 ms of device work, on the busiest stream 19.0 ms
        assert s["lower"] <= s["covered"] <= s["upper"]
        assert 19_000 < s["covered"] < 19_600
    # the --bench-profile summary reads the same reduction
    assert (
        summarize_events(load_trace_events(TRACE), device_type="cuda")["device_busy_s_per_step"]
        == busy["busy_s_per_step"]
    )


def test_busy_share_of_the_timed_step_and_the_nvml_figure_outside_its_bounds():
    raw, meta = _raw(), _meta()
    busy = busy_from_events(load_trace_events(TRACE))
    record = busy_record(busy, meta["step_times_s"])
    median_us = 1e6 * _median(meta["step_times_s"])
    steps = _per_step_bounds_us(raw)
    lower_pct = 100 * min(s["lower"] for s in steps) / median_us
    assert lower_pct <= record["pct"] <= 100
    assert record["pct"] == pytest.approx(100 * sum(s["covered"] for s in steps) / 2 / median_us, abs=1e-3)
    assert record["pct"] == pytest.approx(15.66, abs=0.01)
    assert record["idle_ms_per_step"] == pytest.approx(124.865 - 19.557, abs=0.01)
    assert record["probe_window_ms"] == pytest.approx(153.26, abs=0.01)  # the profiler's host overhead
    nvml = meta["gpu_util"]["pct_mean"]
    assert not (lower_pct <= nvml <= 100), f"NVML's {nvml:.1f}% passes for a busy share: the test is too weak"


def test_the_nvml_figure_is_the_one_the_reference_run_recorded():
    meta = _meta()
    rank_json = ROOT / meta["rank_json"]
    if not rank_json.exists():
        pytest.skip(f"{meta['rank_json']} is no longer in the tree; the fixture's copy stands")
    recorded = json.loads(rank_json.read_text())
    assert recorded["gpu_util"]["pct_mean"] == meta["gpu_util"]["pct_mean"]
    assert recorded["step_times_s"] == meta["step_times_s"]


def _packed_events():
    """A GPU-bound step CONSTRUCTED from the recorded one: the same H100 kernels, copies and
    memsets (durations, order) laid back to back from the first one's start, as a step whose host
    launches ahead of the GPU runs them, plus 0.2 ms for the final synchronize. Not a recorded
    timeline: the H100 run profiled no GPU-bound case."""
    from fsdp_bench.worker.profiling import TraceEvent

    events = load_trace_events(TRACE)
    window = sorted((e.start_s, e.end_s) for e in events if e.name == STEP_MARKER and not e.on_device)[0]
    device = sorted((e for e in events if e.on_device and window[0] <= e.start_s < window[1]), key=lambda e: e.start_s)
    at, packed = device[0].start_s, []
    for e in device:
        packed.append(TraceEvent(e.name, at, at + (e.end_s - e.start_s), e.thread, True))
        at = packed[-1].end_s
    return [TraceEvent(STEP_MARKER, device[0].start_s - 1e-4, at + 2e-4), *packed], at + 2e-4 - device[0].start_s + 1e-4


def test_host_bound_on_the_recorded_step_and_gpu_bound_on_the_packed_one():
    recorded = busy_record(busy_from_events(load_trace_events(TRACE)), _meta()["step_times_s"])
    assert is_host_bound(recorded["pct"]) is True
    assert (
        host_bound_text(recorded["pct"], recorded["idle_ms_per_step"]) == "host-bound (GPU idle 105 ms/step, busy 16%)"
    )
    events, step_s = _packed_events()
    packed = busy_record(busy_from_events(events), [step_s])
    assert packed["pct"] > 98 and packed["idle_ms_per_step"] < 0.5
    assert is_host_bound(packed["pct"]) is False
    assert is_host_bound(None) is None and is_host_bound(float("nan")) is None
    assert is_host_bound(HOST_BOUND_BUSY_PCT) is False and is_host_bound(HOST_BOUND_BUSY_PCT - 0.1) is True


def test_device_busy_counts_overlapping_streams_once_and_says_why_it_has_no_figure():
    busy = device_busy([(0.0, 4.0), (2.0, 6.0), (9.0, 12.0), (20.0, 30.0)], [(0.0, 10.0), (10.0, 11.0)])
    assert busy["steps"] == 2  # back-to-back steps touch: still two steps, over their union
    assert busy["busy_s_per_step"] == pytest.approx((6 + 2) / 2) and busy["window_s_per_step"] == 5.5
    assert device_busy([(0.0, 1.0)], [])["null_reason"] == "no step window in the trace"
    assert "no device activity" in device_busy([], [(0.0, 1.0)])["null_reason"]
    assert busy_share(3.0, 2.0) == {"pct": 100.0, "idle_ms_per_step": 0.0}
    with pytest.raises(ValueError):
        busy_share(1.0, 0.0)
    assert busy_record({"null_reason": "why"}, [1.0]) == {"pct": None, "null_reason": "why"}
    assert busy_record({"steps": 1, "busy_s_per_step": 0.5, "window_s_per_step": 1.0}, [])["pct"] is None


def test_load_trace_events_reads_gzip_and_a_cpu_trace_has_no_device_timeline(tmp_path):
    path = tmp_path / "rank0.1.pt.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": STEP_MARKER, "ts": 0, "dur": 5}]}, fh)
    assert busy_from_events(load_trace_events(path))["null_reason"].startswith("the trace has no device activity")
    assert "cpu" in NO_DEVICE_TIMELINE and "no device timeline" in NO_DEVICE_TIMELINE


def test_a_cuda_rank_whose_profiler_saw_no_kernel_gets_no_parts_rather_than_the_cpu_method():
    """Where CUPTI is unavailable the profiler records host ops only; a CUDA rank's host ops are
    kernel launches, so the CPU method (aten ops as compute) would take its step apart wrongly."""
    events = load_trace_events(TRACE)
    parts = attribute_events(events, device_type="cuda")
    assert parts["null_reason"] is None and parts["compute_s"] > 0 and "busy" in parts
    host_only = [e for e in events if not e.on_device]
    assert attribute_events(host_only, device_type="cuda") == {"steps": 0, "null_reason": NO_CUDA_KERNELS}
    assert attribute_events(host_only, device_type="cpu")["null_reason"] is None  # a CPU rank: the CPU method stands
    # the same for --bench-profile's summary
    assert summarize_events(host_only, device_type="cuda") == {"steps_profiled": 0, "reason": NO_CUDA_KERNELS}
    assert summarize_events(events, device_type="cuda")["method"] == "cuda kernels"
