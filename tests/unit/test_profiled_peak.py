"""worker.profiled_peak.profiled_step_peak, FSDP1's CPU peak reader, in one process on real steps: it
reads what MemTracker reads where both can, and refuses a loop whose two steps do not end alike
(a free it did not see would make its running sum wrong)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fsdp_bench.worker.memory import track_step_memory  # noqa: E402
from fsdp_bench.worker.probes import resident_state_bytes  # noqa: E402
from fsdp_bench.worker.profiled_peak import PROFILED_DRIFT_TOLERANCE_BYTES, profiled_step_peak  # noqa: E402


def _trainer(foreach: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
    optimizer = torch.optim.AdamW(model.parameters(), foreach=foreach)
    data = torch.randn(64, 256)

    def step(on_phase=None):
        model(data).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # AdamW's state exists from here on, as after a case's measured steps
    return model, optimizer, step


@pytest.mark.parametrize("foreach", [True, False])
def test_the_profiled_peak_is_memtrackers(foreach):
    model, optimizer, step = _trainer(foreach)
    tracked = track_step_memory(step, [model], optimizer, device=torch.device("cpu"))["peak_bytes"]
    profiled = profiled_step_peak(step, resident_bytes=resident_state_bytes(model, optimizer))
    assert profiled["drift_bytes"] == 0, profiled
    # parameters + AdamW's two moments, then the activations, gradients and foreach temporaries
    assert profiled["peak_bytes"] > profiled["resident_bytes"] > 0
    assert profiled["peak_bytes"] == pytest.approx(tracked, abs=64), (profiled, tracked)


def test_a_step_that_keeps_what_it_allocates_is_refused():
    model, optimizer, step = _trainer(True)
    kept = []

    def leaky(on_phase=None):
        step()
        kept.append(torch.ones(PROFILED_DRIFT_TOLERANCE_BYTES))  # 4 B each: 4x the tolerance a step

    profiled = profiled_step_peak(leaky, resident_bytes=resident_state_bytes(model, optimizer))
    assert "peak_bytes" not in profiled
    assert profiled["drift_bytes"] == 4 * PROFILED_DRIFT_TOLERANCE_BYTES
    assert profiled["null_reason"].startswith("the profiler missed a free: two equal steps ended +16,384 B apart")
