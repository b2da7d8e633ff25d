"""Predicted GPU failures, each checked on CPU up to the CUDA call."""

import pytest

torch = pytest.importorskip("torch")

from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.worker import probes  # noqa: E402
from fsdp_bench.worker.loop import run  # noqa: E402


def _oom(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")


def test_oom_in_flop_probe_is_a_null_with_reason_not_an_oom_case(monkeypatch):
    monkeypatch.setattr(probes, "count_step_flops", _oom)
    record = run(Case(strategy="fsdp2", nproc=1, steps=2, warmup=0, seq_len=16))
    assert record["status"] == "ok"
    assert record["flops"]["counter_per_step"] is None
    assert "OOM" in record["flops"]["counter_null_reason"]
    assert record["measured_model_state_bytes"] is None
    assert "OOM" in record["measured_model_state_null_reason"]


def test_oom_in_memtracker_probe_is_a_null_with_reason(monkeypatch):
    import fsdp_bench.worker.memory as memory

    monkeypatch.setattr(memory, "track_step_memory", _oom)
    record = run(Case(strategy="fsdp2", nproc=1, steps=2, warmup=0, seq_len=16))
    assert record["status"] == "ok"
    assert record["memory_breakdown_bytes"] is None
    assert "OOM" in record["memory_breakdown_null_reason"]
    assert record["flops"]["counter_per_step"] > 0  # the other probe still ran


class _Wrapped:
    """accelerate's AcceleratedOptimizer shape: not a torch Optimizer, the real one in .optimizer."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def step(self):
        self.optimizer.step()


def test_model_state_probe_hooks_the_wrapped_optimizer():
    model = torch.nn.Linear(4, 4)
    inner = torch.optim.AdamW(model.parameters())
    wrapped = _Wrapped(inner)
    assert probes.inner_optimizer(wrapped) is inner and probes.inner_optimizer(inner) is inner

    def step():
        model(torch.randn(2, 4)).sum().backward()
        wrapped.step()

    seen = probes.measure_model_state_after_step(step, wrapped, model)
    assert seen["optimizer"] > 0 and seen["grads"] > 0


def test_cuda_ranks_get_their_share_of_cores_cpu_ranks_one_thread():
    from fsdp_bench.launch.processes import build_env, omp_threads

    assert omp_threads("cpu", 2, 16) == 1
    assert omp_threads("cuda", 8, 128) == 16
    assert omp_threads("cuda", 1, 16) == 16
    assert omp_threads("cuda", 8, 4) == 1 and omp_threads("cuda", 2, None) == 1
    assert build_env({}, device="cpu", ranks_per_node=2)["OMP_NUM_THREADS"] == "1"
    import os

    assert build_env({}, device="cuda", ranks_per_node=1)["OMP_NUM_THREADS"] == str(max(1, os.cpu_count() or 1))
    assert build_env({"OMP_NUM_THREADS": "3"}, device="cuda")["OMP_NUM_THREADS"] == "3"


def _meta_qwen():
    from fsdp_bench.plan.flavors import flavor_for
    from fsdp_bench.worker.models.build import build_model

    return build_model(flavor_for("qwen2_tiny"), seed=0, meta=True)


@pytest.mark.versions  # meta-device init of an HF model
def test_ddp_materialize_puts_buffers_where_the_params_go():
    from fsdp_bench.worker.models.build import materialize_module

    model = _meta_qwen()
    assert any(not b.is_meta for b in model.buffers())  # rotary inv_freq is built real, on the host
    materialize_module(model, torch.device("meta"), 0)  # "meta" stands in for the GPU
    devices = {t.device for t in [*model.parameters(), *model.buffers()]}
    assert devices == {torch.device("meta")}


@pytest.mark.versions
def test_offloaded_fsdp2_materializes_params_on_the_host_buffers_on_the_device():
    from fsdp_bench.worker.models.build import materialize_fsdp2

    model = _meta_qwen()
    before = {n: b.clone() for n, b in model.named_buffers()}
    materialize_fsdp2(model, torch.device("meta"), 0, param_device="cpu")
    assert {p.device for p in model.parameters()} == {torch.device("cpu")}
    assert {b.device for b in model.buffers()} == {torch.device("meta")}
    model2 = _meta_qwen()
    materialize_fsdp2(model2, torch.device("cpu"), 0)
    for n, b in model2.named_buffers():
        assert torch.equal(b, before[n])  # values survive to_empty


def _fake_accelerate(seen):
    """apply_accelerate_fsdp2 up to the CUDA call: record what accelerate would be handed."""

    def fake(model, optimizer, *, ctx):
        seen["meta"] = any(p.is_meta for p in model.parameters())
        ptrs = [p.data_ptr() for g in optimizer.param_groups for p in g["params"]] if optimizer else []
        seen["ptrs_unique"] = len(set(ptrs)) == len(ptrs) and 0 not in ptrs
        seen["optimizer"] = optimizer
        return model, optimizer

    return fake


@pytest.mark.versions
def test_accelerate_gets_a_materialized_model_before_the_optimizer(monkeypatch):
    from fsdp_bench.worker import strategies
    from fsdp_bench.worker.setup import build_rank

    seen = {}
    monkeypatch.setattr(strategies, "apply_accelerate_fsdp2", _fake_accelerate(seen))
    case = Case(
        strategy="accelerate_fsdp2",
        model="qwen2_tiny",
        nproc=1,
        steps=1,
        warmup=0,
        seq_len=16,
        optimizer_timing="before_shard",
    )
    rank = build_rank(case, device=torch.device("cpu"), rank=0, world_size=1)
    assert seen["meta"] is False and seen["ptrs_unique"] is True and seen["optimizer"] is not None
    assert {t.device for t in [*rank.model.parameters(), *rank.model.buffers()]} == {torch.device("cpu")}


class _FakeScaler:
    def __init__(self):
        self.calls = []

    def scale(self, loss):
        self.calls.append("scale")
        return loss * 4

    def unscale_(self, optimizer):
        self.calls.append(("unscale", type(optimizer).__name__))


class _FakeAcceleratedOptimizer:
    def __init__(self, optimizer, scaler):
        self.optimizer, self.scaler = optimizer, scaler
        self.param_groups = optimizer.param_groups

    def step(self):
        self.scaler.calls.append("step")
        self.optimizer.step()

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)


class _Bf16Loss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x, y):
        return (self.w * x).sum().to(torch.bfloat16) + torch.tensor(1e-3, dtype=torch.bfloat16)


def test_accelerate_fp16_uses_accelerates_scaler_only_and_losses_are_fp32():
    from fsdp_bench.worker.training import Trainer

    model = _Bf16Loss()
    scaler = _FakeScaler()
    opt = _FakeAcceleratedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), scaler)
    case = Case(strategy="accelerate_fsdp2", nproc=1, precision="fp16", grad_clip=1.0)
    trainer = Trainer(case, model, opt, device=torch.device("cpu"))
    assert trainer.scaler is None and trainer.accelerate_scaler is scaler
    loss = trainer.step([(torch.ones(3), None)])
    assert scaler.calls == ["scale", ("unscale", "SGD"), "step"]
    assert loss.dtype == torch.float32


def test_fsdp1_low_precision_keeps_buffers_fp32():
    from fsdp_bench.worker.strategies import fsdp1_mixed_precision

    assert fsdp1_mixed_precision(torch.float32) is None
    mp = fsdp1_mixed_precision(torch.bfloat16)
    assert mp.param_dtype == torch.bfloat16 and mp.reduce_dtype == torch.bfloat16 and mp.buffer_dtype is None


def test_offloading_strategies_on_cuda_get_a_host_backend_too():
    from fsdp_bench.plan.catalog import strategy
    from fsdp_bench.worker.setup import process_group_backend

    assert process_group_backend("cuda", offload=strategy("fsdp2_offload").offload) == "cuda:nccl,cpu:gloo"
    assert process_group_backend("cuda", offload=strategy("fsdp1_offload").offload) == "cuda:nccl,cpu:gloo"
    assert process_group_backend("cuda", offload=strategy("fsdp2").offload) == "nccl"
    assert process_group_backend("cpu", offload=True) == "gloo"


def test_bare_loop_reduces_a_device_tensor_and_ci_compares_after_failures():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert "torch.tensor(times, dtype=torch.float64, device=device)" in (root / "scripts/bare_loop.py").read_text()
    workflow = (root / ".github/workflows/gpu-benchmarks.yml").read_text()
    compare = workflow[workflow.index("name: Compare with the baseline") :]
    assert compare.split("run:")[0].count("if: always()") == 1


def test_fsdp1_at_one_rank_records_the_no_shard_it_really_ran():
    record = run(Case(strategy="fsdp1_full_shard", nproc=1, steps=1, warmup=0, seq_len=16))
    assert record["status"] == "ok" and record["effective_sharding"] == "replicated"
    assert run(Case(strategy="fsdp2", nproc=1, steps=1, warmup=0, seq_len=16))["effective_sharding"] == "full_shard"


def test_fsdp1_sharded_at_one_cuda_rank_is_skipped_with_the_reason():
    from fsdp_bench.plan.case import skip_reason

    assert "NO_SHARD" in skip_reason(Case(strategy="fsdp1_full_shard", nproc=1, device="cuda"))
    assert skip_reason(Case(strategy="fsdp1_full_shard", nproc=2, device="cuda")) is None
    assert skip_reason(Case(strategy="fsdp1_full_shard", nproc=1, device="cuda", simulate=True)) is None
    assert skip_reason(Case(strategy="fsdp1_no_shard", nproc=1, device="cuda")) is None
    assert skip_reason(Case(strategy="fsdp2", nproc=1, device="cuda")) is None


def test_oom_observer_names_c10s_arguments(monkeypatch, tmp_path):
    from fsdp_bench.worker import failure

    attached, history = [], []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: 123)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: history.append(kw))
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: None)
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", attached.append, raising=False)
    record = {}
    failure.install_cuda_oom_observer(Case(strategy="fsdp2", device="cuda", memory_snapshot=True), record, tmp_path, 0)
    assert history and history[0]["stacks"] == "python"
    attached[0](0, 2 << 30, 80 << 30, 1 << 20)  # (device, requested, device total/limit, device free)
    oom = record["oom"]
    assert oom["requested_bytes"] == 2 << 30 and oom["device_limit_bytes"] == 80 << 30
    assert oom["device_free_bytes"] == 1 << 20 and oom["allocated_bytes"] == 123


def test_step_start_sample_is_outside_the_timed_region(monkeypatch):
    import time as real_time
    import types

    from fsdp_bench.worker import loop
    from fsdp_bench.worker.memory import MemoryTimeline

    events = []

    def clock():
        events.append("clock")
        return real_time.perf_counter()

    monkeypatch.setattr(loop, "time", types.SimpleNamespace(perf_counter=clock, time=real_time.time))
    monkeypatch.setattr(MemoryTimeline, "sample", lambda self, phase: events.append(phase))
    run(Case(strategy="ddp", nproc=1, steps=2, warmup=0, seq_len=16))
    starts = [i for i, e in enumerate(events) if e == "step_start"]
    assert len(starts) == 2
    for i in starts:  # t0 is read after the sample, and the step's end clock follows it
        assert events[i + 1 : i + 3] == ["clock", "clock"], events


def test_suites_honour_simulated_world_sizes():
    from fsdp_bench.plan.sweep import Sweep

    plain = Sweep(device="cpu", nproc=1, suite="zero2-vs-zero3").cases()
    simulated = Sweep(device="cpu", nproc=1, suite="zero2-vs-zero3", simulate_world_sizes=(4, 8)).cases()
    assert plain and not any(c.simulate for c in plain) and {c.nproc for c in plain} == {1}
    assert all(c.simulate for c in simulated) and {c.nproc for c in simulated} == {4, 8}
    assert len({c.id for c in simulated}) == len(simulated)


def test_utilization_is_read_only_while_a_timed_step_runs():
    import time as real_time

    from fsdp_bench.worker.gpu_util import GpuUtilSampler

    reads = []
    sampler = GpuUtilSampler(torch.device("cpu"), interval_s=0.01, read=lambda: reads.append(1) or 50.0)
    with sampler:
        real_time.sleep(0.15)  # between steps: nothing read
        assert reads == [] and sampler.samples == []
        sampler.resume()
        real_time.sleep(0.15)
        sampler.pause()
        kept = len(sampler.samples)
        real_time.sleep(0.15)
    assert kept >= 3 and len(sampler.samples) == kept
    assert sampler.result()["pct_mean"] == 50.0


def test_nothing_but_the_step_inside_the_timed_region(monkeypatch):
    """Between a measured step's two clock reads: only the step, with no phase callback (no
    allocator reads), no update-norm bookkeeping, and utilization readings on only around it;
    between two measured steps no update norm either."""
    import time as real_time
    import types

    from fsdp_bench.worker import gpu_util, loop, update_norms
    from fsdp_bench.worker import setup as worker_setup
    from fsdp_bench.worker.memory import MemoryTimeline

    events = []
    monkeypatch.setattr(
        loop,
        "time",
        types.SimpleNamespace(
            perf_counter=lambda: events.append("clock") or real_time.perf_counter(), time=real_time.time
        ),
    )
    real_init = MemoryTimeline.__init__

    def enabled_timeline(self, device):  # as on CUDA: the timeline reads the allocator
        real_init(self, device)
        self.enabled = True

    monkeypatch.setattr(MemoryTimeline, "__init__", enabled_timeline)
    monkeypatch.setattr(MemoryTimeline, "sample", lambda self, phase: events.append(f"sample:{phase}"))
    real_before, real_after = update_norms.UpdateNorms.before_step, update_norms.UpdateNorms.after_step

    def before_step(self, step=0):  # the host copy of the parameters, when this step takes a norm
        if self.take(step):
            events.append(f"norms.copy:{step}")
        real_before(self, step)

    def after_step(self, step=0):
        if self._filled:
            events.append(f"norms.norm:{step}")
        real_after(self, step)

    monkeypatch.setattr(update_norms.UpdateNorms, "before_step", before_step)
    monkeypatch.setattr(update_norms.UpdateNorms, "after_step", after_step)
    for name in ("resume", "pause"):
        monkeypatch.setattr(gpu_util.GpuUtilSampler, name, lambda self, name=name: events.append(f"util.{name}"))
    real_step = worker_setup.Rank.train_step
    monkeypatch.setattr(
        worker_setup.Rank,
        "train_step",
        lambda self, i, on_phase=None: (
            events.append(f"step:{'phases' if on_phase else 'bare'}"),
            real_step(self, i, on_phase),
        )[1],
    )
    run(Case(strategy="ddp", nproc=1, steps=2, warmup=1, seq_len=16))
    clocks = [i for i, e in enumerate(events) if e == "clock"]
    windows = [events[a + 1 : b] for a, b in zip(clocks[::2], clocks[1::2])]
    assert len(windows) == 3  # one warmup, two measured
    assert all(w == ["step:bare"] for w in windows[1:]), windows
    assert windows[0][0] == "step:phases"  # phase samples come from the warmup step
    for a in clocks[2::2]:  # measured steps: utilization on right before t0, off right after the end
        assert events[a - 1] == "util.resume" and events[a + 3] == "util.pause", events[a - 3 : a + 5]
    # update norms (a host copy of every parameter) only around the warmup step: none between
    # or after the measured steps, where the GPU would idle while the host copies
    norm_events = [i for i, e in enumerate(events) if e.startswith("norms.")]
    assert [events[i] for i in norm_events] == ["norms.copy:0", "norms.norm:0"]
    assert max(norm_events) < clocks[2]


def test_busy_probe_reads_its_step_window_from_the_real_profiler():
    """The busy probe's profiler run, trace export and reduction on this torch: its marked steps
    found by their windows (the unmarked first one left out); on CPU there are no device events,
    and the result says so, not 0% busy."""
    from fsdp_bench.plan.case import PARTS_PROBE_WINDOWS
    from fsdp_bench.worker.profiling import busy_from_events, probe_step_events

    x = torch.randn(64, 64)
    busy = busy_from_events(probe_step_events(lambda: (x @ x).sum(), device_type="cpu"))
    assert busy["steps"] == PARTS_PROBE_WINDOWS == 2
    assert busy["null_reason"].startswith("the trace has no device activity")


def test_busy_probe_runs_after_the_peaks_are_read_and_not_without_probes(monkeypatch):
    """The busy probe runs after every timed step and after the peaks were read (its profiler
    buffers never reach a reported peak); --bench-no-probes and CPU give a null with the reason;
    a CUDA probe that fails is the probe's null, never the case's failure."""
    from fsdp_bench.analysis.busy import NO_DEVICE_TIMELINE
    from fsdp_bench.worker import loop
    from fsdp_bench.worker.probe_guard import ProbeGuard

    events = []
    real_peaks, real_busy = loop._record_memory_after_steps, probes._probe_step_parts

    def peaks(setup, record, out_dir):
        events.append("peaks read")
        return real_peaks(setup, record, out_dir)

    monkeypatch.setattr(loop, "_record_memory_after_steps", peaks)

    def busy(case, step, *, record, **kw):
        events.append(f"busy after {len(record['step_times_s'])} steps")
        return real_busy(case, step, record=record, **kw)

    monkeypatch.setattr(probes, "_probe_step_parts", busy)
    record = run(Case(strategy="ddp", nproc=1, steps=2, warmup=1, seq_len=16))
    assert events == ["peaks read", "busy after 2 steps"], events
    assert record["gpu_busy"] == {"pct": None, "null_reason": NO_DEVICE_TIMELINE}
    cuda = torch.device("cuda")
    off = {"step_times_s": [0.1]}
    real_busy(Case(strategy="ddp", nproc=1, probes=False), lambda: None, record=off, guard=None, device=cuda)
    assert off["gpu_busy"] == {"pct": None, "null_reason": probes.PROBES_OFF}
    failed = {"step_times_s": [0.1], "world_size": 1}
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters())
    guard = ProbeGuard(
        model=model, optimizer=optimizer, device=torch.device("cpu"), rank=0, world_size=1, record=failed
    )
    # this torch has no CUDA: the probe fails at its first CUDA call, and the failure is the probe's
    real_busy(Case(strategy="ddp", nproc=1), lambda: None, record=failed, guard=guard, device=cuda)
    assert failed["gpu_busy"]["pct"] is None and "in the step_parts probe step" in failed["gpu_busy"]["null_reason"]
