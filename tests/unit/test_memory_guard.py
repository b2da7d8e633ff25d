"""Before launch: a CUDA case predicted over its GPU's memory is named in one line (it will likely
end as oom, which is data: the sweep goes on), while a case over host memory is skipped unlaunched (see
tests/integration/test_robustness_round2.py)."""

from fsdp_bench.analysis.host_memory import predicted_step_bytes
from fsdp_bench.launch.memory_guard import device_memory_note
from fsdp_bench.plan.case import Case
from fsdp_bench.results.schema import GIB


def _cuda(batch_size: int) -> Case:
    return Case(strategy="ddp", model="gpt_124m", device="cuda", nproc=1, batch_size=batch_size, seq_len=1024)


def test_cases_predicted_over_the_gpu_are_named_with_their_peaks():
    small, huge = _cuda(4), _cuda(512)
    device = 80 * GIB
    assert predicted_step_bytes(small) < device < predicted_step_bytes(huge)
    note = device_memory_note([small, huge], device)
    assert note.startswith("fsdp-bench: 1 case(s) predicted over the GPU's 80.0 GiB")
    assert huge.id in note and small.id not in note and note.endswith("they will likely end as oom")


def test_nothing_is_said_without_a_gpu_or_when_everything_fits():
    assert device_memory_note([_cuda(512)], None) is None
    assert device_memory_note([_cuda(4)], 80 * GIB) is None
    cpu = Case(strategy="ddp", model="gpt_124m", device="cpu", nproc=1, batch_size=512, seq_len=1024)
    assert device_memory_note([cpu], 80 * GIB) is None  # host memory has its own check
