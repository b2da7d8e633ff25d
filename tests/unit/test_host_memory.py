"""The host-memory estimate the launch guard shares (analysis/host_memory.py): each part that grows
is counted, and the guard's line says why a case is not launched. The measured side is
tests/integration/test_host_memory_guard.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_bench.analysis.activations import estimate_activations, sliding_mask_layers
from fsdp_bench.analysis.comm_model import model_units
from fsdp_bench.analysis.host_memory import (
    LAUNCHER_BYTES,
    RANK_BASE_BYTES,
    REFERENCE_IMPORT_BYTES,
    SIMULATED_WHOLE_MODEL_FACTOR,
    TEXT_LOAD_BYTES_PER_BYTE,
    attention_transient_bytes,
    host_peak,
    whole_model_bytes,
)
from fsdp_bench.launch.memory_guard import memory_plan_line, memory_skip_reason
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.flavors import flavor_for
from fsdp_bench.results.schema import GIB

LLAMA = Path(__file__).resolve().parent.parent / "data" / "hf_configs" / "llama_odd_vocab" / "config.json"


def _llama(tmp_path: Path, **extra) -> str:
    folder = tmp_path / "llama"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**json.loads(LLAMA.read_text()), **extra}))
    return f"hf:{folder}"


def _cpu(**fields) -> Case:
    return Case(**{"strategy": "ddp", "model": "gpt_tiny", "nproc": 1, "batch_size": 1, "seq_len": 32, **fields})


def test_a_data_folders_text_is_counted_per_rank_while_it_is_read():
    plain, with_text = host_peak(_cpu()), host_peak(_cpu(), text_bytes=100 * 2**20)
    assert with_text.data_load == 100 * 2**20 * TEXT_LOAD_BYTES_PER_BYTE
    assert with_text.rank_bytes - plain.rank_bytes >= 0.9 * with_text.data_load - plain.step
    two = host_peak(_cpu(nproc=2), text_bytes=100 * 2**20)
    assert two.total_bytes - two.launcher == 2 * with_text.rank_bytes  # every rank reads the folder


def test_the_whole_model_is_counted_before_sharding_unless_built_on_meta(tmp_path):
    fsdp = host_peak(_cpu(strategy="fsdp2", model="linear_small", nproc=8, seq_len=1))
    whole = 4 * sum(u.numel for u in model_units(flavor_for("linear_small")))
    assert fsdp.build == whole == whole_model_bytes(flavor_for("linear_small"))
    assert fsdp.step < whole  # the shards' step is smaller: the build sets the peak
    assert fsdp.rank_bytes == RANK_BASE_BYTES + whole
    meta = host_peak(_cpu(strategy="fsdp2", model=_llama(tmp_path), nproc=8))
    assert meta.build == 0  # Hugging Face models are built on the meta device


def test_a_simulated_rank_counts_its_step_and_no_torchrun():
    sim = host_peak(_cpu(strategy="fsdp2", model="linear_odsc", nproc=64, simulate=True, seq_len=1))
    assert sim.processes == 1 and sim.launcher == 0
    assert sim.simulated == SIMULATED_WHOLE_MODEL_FACTOR * whole_model_bytes(flavor_for("linear_odsc"))
    assert sim.total_bytes > 30 * GIB  # the 7.5 GiB "and climbing" case, against 5.03 before


def test_attention_grows_with_the_square_of_the_sequence_only_on_the_math_path(tmp_path):
    flash = flavor_for(_llama(tmp_path))
    assert attention_transient_bytes(flash, 1, 4096, 4) == 0  # no dropout: the flash kernel
    dropout = flavor_for(_llama(tmp_path, attention_dropout=0.1))
    heads = 4
    assert attention_transient_bytes(dropout, 2, 4096, 4) == heads * 4096**2 * 2 * 4
    short, long = (host_peak(_cpu(model=dropout.name, seq_len=s)) for s in (4096, 8192))
    assert (long.step + long.attention) > 3.5 * (short.step + short.attention)


def test_a_cuda_build_of_torch_costs_every_process_its_larger_import():
    """A CUDA build's `import torch` (0.579 GiB for 2.14.1+cu130 against the CPU wheel's 0.214)
    is paid by each rank and by torchrun; a simulated case is one process."""
    cuda_import = int(0.579 * GIB)
    extra = cuda_import - REFERENCE_IMPORT_BYTES
    plain, cuda = host_peak(_cpu(nproc=2)), host_peak(_cpu(nproc=2), import_bytes=cuda_import)
    assert cuda.base == pytest.approx(RANK_BASE_BYTES + extra) and cuda.launcher == pytest.approx(
        LAUNCHER_BYTES + extra
    )
    assert cuda.total_bytes - plain.total_bytes == pytest.approx(3 * extra)
    sim = _cpu(strategy="fsdp2", model="linear_small", nproc=64, simulate=True, seq_len=1)
    assert host_peak(sim, import_bytes=cuda_import).total_bytes - host_peak(sim).total_bytes == pytest.approx(extra)
    # an import no larger than the CPU wheel's, or none measured: the constants as they are
    assert host_peak(_cpu(), import_bytes=int(0.2 * GIB)) == host_peak(_cpu()) == host_peak(_cpu(), import_bytes=None)
    between = (plain.total_bytes + cuda.total_bytes) / 2  # fits with the CPU wheel, not with CUDA's
    assert memory_skip_reason(_cpu(nproc=2), between) is None
    assert memory_skip_reason(_cpu(nproc=2), between, import_bytes=cuda_import).startswith("needs about")


def test_the_guard_skips_in_one_line_naming_the_part_and_the_numbers():
    huge = _cpu(strategy="fsdp2", model="linear_odsc", nproc=64, simulate=True, seq_len=1)
    reason = memory_skip_reason(huge, 20 * GIB)
    assert "\n" not in reason and reason.startswith("needs about")
    assert "the simulated rank's step" in reason and "20.0 GiB is available; not launched" in reason
    assert "--bench-allow-memory-overcommit" in reason
    assert memory_skip_reason(huge, None) is None  # a machine that does not say: nothing refused
    assert memory_skip_reason(_cpu(), 20 * GIB) is None
    line = memory_plan_line([_cpu(), huge], 20 * GIB)
    assert line.startswith("fsdp-bench: 1 case(s) need more host memory") and huge.id in line
    assert memory_plan_line([_cpu()], 20 * GIB) is None


def test_a_sliding_window_mask_grows_with_the_square_of_the_sequence_once_it_reaches_the_window(tmp_path):
    """Mistral with `sliding_window` (and Qwen2 with `use_sliding_window`): SDPA gets a boolean
    seq x seq mask, and each sliding layer keeps a copy in the compute dtype (analysis.activations)."""
    mistral = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "num_hidden_layers": 3}
    sliding, plain = (_llama(tmp_path / name, **mistral, sliding_window=w) for name, w in (("s", 128), ("p", None)))
    seq, layers = 4096, 3
    extra = (
        estimate_activations(flavor_for(sliding), 2, seq).total - estimate_activations(flavor_for(plain), 2, seq).total
    )
    assert extra == 2 * seq * seq * (1 + 4 * layers)
    assert sliding_mask_layers(flavor_for(sliding), 127) == 0  # shorter than the window: causal, no mask
    big, small = (host_peak(_cpu(model=sliding, seq_len=s)) for s in (8192, 4096))
    assert big.step - small.step > 3 * (2**26 - 2**24) * (1 + 4 * layers) / 4  # quadratic, counted in the step
    qwen = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 3}
    off = flavor_for(_llama(tmp_path / "q0", **qwen, sliding_window=128))  # use_sliding_window defaults to False
    on = flavor_for(_llama(tmp_path / "q1", **qwen, sliding_window=128, use_sliding_window=True, max_window_layers=1))
    assert sliding_mask_layers(off, seq) == 0 and sliding_mask_layers(on, seq) == 2  # layers 1 and 2 slide
