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


def test_ddp_materialize_puts_buffers_where_the_params_go():
    from fsdp_bench.worker.models.build import materialize_module

    model = _meta_qwen()
    assert any(not b.is_meta for b in model.buffers())  # rotary inv_freq is built real, on the host
    materialize_module(model, torch.device("meta"), 0)  # "meta" stands in for the GPU
    devices = {t.device for t in [*model.parameters(), *model.buffers()]}
    assert devices == {torch.device("meta")}


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
