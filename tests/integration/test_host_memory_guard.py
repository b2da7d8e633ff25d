"""Issue 37, item 4: one host-memory estimate (analysis/host_memory.py) for the launch guard that
counts what really grows: the text a --bench-data folder loads, attention materialised with the
square of the sequence, the whole model a rank builds before sharding (and a simulated rank's
step). Each of the issue's three cases runs for real at a size this machine holds, its measured
peak within 25% of the guard's figure; their large versions are skipped before launch.

Every sweep here runs under tests/rss_watchdog.py, which SIGKILLs the case's whole process tree
when it passes WATCHDOG_BYTES (more with a CUDA build of torch): a guard that let a large case
through (today's main did, for all three) fails the test instead of filling a machine without swap.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from fsdp_bench.analysis.host_memory import TEXT_LOAD_BYTES_PER_BYTE
from fsdp_bench.launch.memory_guard import case_host_peak
from fsdp_bench.plan.case import Case
from fsdp_bench.plan.devices import available_host_bytes
from fsdp_bench.results.schema import GIB
from tests.rss_watchdog import run_watched
from tests.sweep_helpers import child_env, pytest_cmd, write_sweep_project

WATCHDOG_BYTES = int(2.5 * GIB)  # the case's tree plus its pytest; the machine has 24 GiB, no swap


@functools.cache
def watchdog_bytes() -> int:
    """WATCHDOG_BYTES, plus what a CUDA build of torch costs each of the tree's three
    interpreters (pytest, torchrun, a rank) beyond the CPU wheel's import: measured here once, by
    the sweep's own env.json reader."""
    from fsdp_bench.analysis.host_memory import import_extra_bytes
    from fsdp_bench.launch.environment import torch_import_bytes

    import_bytes = torch_import_bytes()
    assert import_bytes, "the env.json reader could not measure torch's import"
    return WATCHDOG_BYTES + int(3 * import_extra_bytes(import_bytes))


TOLERANCE = 0.25
BASE = [
    "--bench-device=cpu",
    "--bench-batch-sizes=1",
    "--bench-grad-accum=1",
    "--bench-steps=2",
    "--bench-warmup=1",
    "--bench-target-ci-pct=0",
    "--bench-no-report",
    "--bench-allow-slow-cpu",
    "--bench-timeout=240",
    "-rs",
]
# A 1-layer, 4-head Llama with attention dropout: SDPA takes torch's math path on CPU (no flash
# kernel with dropout), so the scores, their softmax, the dropout noise and, in backward, the
# scores' gradient are heads x seq^2 each.
LLAMA_DROPOUT = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 1009,
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "attention_dropout": 0.1,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


# A 2-layer Mistral with a 128-token sliding window (the eager/SDPA path, no dropout): at seq 8192
# transformers hands SDPA a boolean seq x seq mask and each layer keeps an fp32 copy of it, 9 bytes
# per (query, key) in all: 0.56 GiB of a case the guard figured at 0.82 GiB without it.
MISTRAL_SLIDING = {
    **{k: v for k, v in LLAMA_DROPOUT.items() if k != "attention_dropout"},
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "num_hidden_layers": 2,
    "sliding_window": 128,
}


def _llama(tmp_path: Path, config: dict = LLAMA_DROPOUT) -> str:
    folder = tmp_path / config["model_type"]
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return f"hf:{folder}"


def _text_folder(tmp_path: Path, size: int, *, sparse: bool) -> Path:
    """A data folder: one short document first (the sweep's check reads only until a usable one),
    then `size` bytes of text; `sparse`: a file of that size that holds no disk blocks (NULs)."""
    folder = tmp_path / "text"
    folder.mkdir()
    (folder / "a.txt").write_text("a first short document\n")
    if sparse:
        with open(folder / "b.txt", "wb") as fh:
            fh.truncate(size)
    else:
        line = b"sharded tensors gather and scatter their gradients in buckets\n"
        (folder / "b.txt").write_bytes(line * (size // len(line)))
    return folder


def _sweep(tmp_path: Path, *args: str):
    project = tmp_path / "project"
    project.mkdir()
    write_sweep_project(project)
    results = tmp_path / "results"
    cmd = pytest_cmd("test_sweep.py", "-q", *BASE, "--bench-results-dir", str(results), *args)
    watched = run_watched(cmd, limit_bytes=watchdog_bytes(), timeout_s=400, cwd=project, env=child_env())
    assert not watched.killed, f"the watchdog stopped the case at its limit\n{watched.output[-3000:]}"
    assert watched.returncode == 0, watched.output[-3000:]
    run = next(results.iterdir())
    (result,) = [json.loads(p.read_text()) for p in (run / "cases").glob("*.json")]
    return watched, result, run


# (model, strategy, extra options, the --bench-data size): each of the three at a size
# this machine holds.
HELD = {
    "data-text": ("gpt_tiny", "ddp", ["--bench-nproc=1", "--bench-seq-len=32"], 20 * 2**20),
    "attention-seq2": ("LLAMA", "ddp", ["--bench-nproc=1", "--bench-seq-len=2048"], 0),
    "build-simulated": ("linear_small", "fsdp2", ["--bench-simulate-world-size=64", "--bench-seq-len=1"], 0),
    # Without probes: at seq 8192 their 8+ untimed steps took 64 s of this 100 s case, and the mask
    # term is the step's (2026-11-29: guard 1.396 GiB against 1.467 measured with probes, -4.8%,
    # and 1.352 without, +3.3%; the two other real cases keep their probes).
    "sliding-window-mask": ("MISTRAL", "ddp", ["--bench-nproc=1", "--bench-seq-len=8192", "--bench-no-probes"], 0),
}


@pytest.mark.parametrize("name", list(HELD))
def test_the_guard_figure_is_within_25_percent_of_the_measured_peak(tmp_path, name):
    model, strategy, extra, text_size = HELD[name]
    model = {"LLAMA": _llama(tmp_path), "MISTRAL": _llama(tmp_path, MISTRAL_SLIDING)}.get(model, model)
    data = ["--bench-data", str(_text_folder(tmp_path, text_size, sparse=False))] if text_size else []
    watched, result, run = _sweep(tmp_path, "--bench-model", model, "--bench-strategies", strategy, *extra, *data)
    assert result["status"] == "ok", result["reason"]
    case = Case.from_dict(result["case"])
    # what `import torch` cost the workers' interpreter (a CUDA build's is 2-3x the CPU wheel's)
    import_bytes = json.loads((run / "env.json").read_text())["torch_import_rss_bytes"]
    figure = case_host_peak(case, import_bytes=import_bytes).total_bytes
    measured = watched.peak_below_rss_bytes  # torchrun and its ranks (or the simulated rank), not pytest
    error = figure / measured - 1
    print(f"{name}: guard {figure / GIB:.3f} GiB, measured {measured / GIB:.3f} GiB ({error:+.1%})")
    assert abs(error) <= TOLERANCE, (
        f"{name}: guard {figure / GIB:.3f} GiB vs measured {measured / GIB:.3f} GiB ({error:+.0%})"
    )


def _large(tmp_path: Path, name: str) -> tuple[list[str], Case]:
    """The issue's large version of each, sized from this machine's available memory."""
    available = available_host_bytes() or 0
    if name == "data-text":
        folder = _text_folder(tmp_path, int(2 * available / TEXT_LOAD_BYTES_PER_BYTE), sparse=True)
        args = ["--bench-model=gpt_tiny", "--bench-strategies=ddp", "--bench-nproc=1", "--bench-seq-len=32"]
        return [*args, "--bench-data", str(folder)], Case(
            strategy="ddp", model="gpt_tiny", nproc=1, batch_size=1, seq_len=32, data=str(folder)
        )
    if name == "attention-seq2":
        model = _llama(tmp_path)
        seq = int((2 * available / (4 * 4 * 4)) ** 0.5)  # four heads x seq^2 matrices of 4 heads, fp32
        args = ["--bench-model", model, "--bench-strategies=ddp", "--bench-nproc=1", f"--bench-seq-len={seq}"]
        return args, Case(strategy="ddp", model=model, nproc=1, batch_size=1, seq_len=seq)
    args = ["--bench-model=linear_odsc", "--bench-strategies=fsdp2", "--bench-simulate-world-size=64"]
    case = Case(strategy="fsdp2", model="linear_odsc", nproc=64, simulate=True, batch_size=1, seq_len=1)
    return [*args, "--bench-seq-len=1"], case


@pytest.mark.parametrize("name", list(HELD))
def test_the_large_version_is_skipped_before_launch(tmp_path, name):
    args, case = _large(tmp_path, name)
    available = available_host_bytes()
    if available is None or case_host_peak(case).total_bytes <= available:
        pytest.skip(f"this machine has {available} bytes available: {name}'s large version fits here")
    watched, result, run = _sweep(tmp_path, *args)
    assert result["status"] == "skipped" and result["ranks"] == [], result
    assert "not launched" in result["reason"] and "GiB is available" in result["reason"]
    assert not (run / "cases" / result["case_id"]).exists()  # no case folder: no process ever started
    lines = [ln for ln in watched.output.splitlines() if ln.startswith("SKIPPED") and "needs about" in ln]
    assert len(lines) == 1, watched.output[-3000:]
    # beside pytest only the env.json reader ran: one interpreter importing torch (0.24 GiB with
    # the CPU wheel, 0.9 with 2.14.1+cu130), where a launched case adds torchrun and a rank
    import_bytes = json.loads((run / "env.json").read_text())["torch_import_rss_bytes"]
    assert watched.peak_below_rss_bytes < import_bytes + 0.5 * GIB
