"""The five source write-ups' experiments as named suites (`--bench-suite NAME`), pure Python.

Each suite lists the cases that answer its write-up's question at full size (a GPU node) and, on
CPU, a scaled-down version of the same comparison: tiny flavor of the same architecture, short
sequences, small batches, no torch.compile. A scaled-down case says what was scaled in its
`scaled_down` field, which lands in every result file and in the session's summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fsdp_bench.plan.case import Case, Grid, expand_grid


@dataclass(frozen=True)
class SuiteSettings:
    """What the user's options still decide inside a suite."""

    device: str
    nproc: int
    steps: int
    warmup: int
    pg_timeout_s: float
    data: str = ""

    @property
    def scaled(self) -> bool:
        return self.device == "cpu"


@dataclass(frozen=True)
class Suite:
    name: str
    question: str
    module: str  # the benchmarks/ file that collects it
    build: Callable[[SuiteSettings], list[Case]]


def _cases(s: SuiteSettings, suite: str, note: str, base: Mapping[str, Any], grids: list[dict[str, Any]]) -> list[Case]:
    common = {
        "device": s.device,
        "nproc": s.nproc,
        "steps": s.steps,
        "warmup": s.warmup,
        "pg_timeout_s": s.pg_timeout_s,
        "suite": suite,
        "scaled_down": note if s.scaled else "",
        **base,
    }
    cases: dict[str, Case] = {}
    for g in grids:
        grid = Grid(
            strategies=tuple(g["strategies"]),
            batch_sizes=tuple(g.get("batch_sizes", (base_bs(base),))),
            grad_accums=tuple(g.get("grad_accums", (1,))),
            optimizer_timings=tuple(g.get("optimizer_timings", ("after_shard",))),
            base={**common, **g.get("base", {})},
            knobs=g.get("knobs", {}),
        )
        for case in expand_grid(grid):
            cases.setdefault(case.id, case)
    return list(cases.values())


def base_bs(base: Mapping[str, Any]) -> int:
    return base.get("batch_size", 2)


def odsc_linear(s: SuiteSettings) -> list[Case]:
    bs, mnp = (64, 50_000) if s.scaled else (8192, 1_000_000)
    base = {"model": "linear_tiny" if s.scaled else "linear_odsc", "seq_len": 1, "batch_size": bs}
    note = "cpu: linear_odsc (2.4B) -> linear_tiny, batch 8192 -> 64, min_num_params 1e6 -> 5e4"
    fsdp = ["fsdp1_full_shard"]
    return _cases(
        s,
        "odsc-linear",
        note,
        base,
        [
            {"strategies": ["ddp", "fsdp1_full_shard", "fsdp2"]},
            {"strategies": ["fsdp1_offload", "fsdp2_offload"]},
            {"strategies": fsdp, "knobs": {"forward_prefetch": (1,), "backward_prefetch": ("pre", "post", "none")}},
            {"strategies": fsdp, "knobs": {"backward_prefetch": ("post", "none")}},
            {"strategies": fsdp, "knobs": {"wrap_policy": ("none",)}},
            {"strategies": fsdp, "knobs": {"wrap_policy": ("size_based",), "min_num_params": (100_000_000, mnp)}},
        ],
    )


def chess_finetune(s: SuiteSettings) -> list[Case]:
    if s.scaled:
        model, seq, sizes, total, precision = "codellama_tiny", 64, (1, 2, 4), 8 * s.nproc, "fp32"
    else:
        model, seq, sizes, total, precision = "codellama_7b", 512, (1, 2, 4, 8), 32 * s.nproc, "bf16"
    note = "cpu: codellama_7b -> codellama_tiny, seq_len 512 -> 64, per-device batch 1-8 -> 1-4, fp32"
    grids = []
    for bs in sizes:  # grad-accum follows from the total batch, as the write-up's slurm script
        ga = max(1, total // (bs * s.nproc))
        grids.append(
            {
                "strategies": ["fsdp1_full_shard"],
                "batch_sizes": (bs,),
                "grad_accums": (ga,),
                "knobs": {"act_ckpt": (False, True)},
            }
        )
    return _cases(
        s, "chess-finetune", note, {"model": model, "seq_len": seq, "precision": precision, "data": s.data}, grids
    )


def nanogpt_fsdp(s: SuiteSettings) -> list[Case]:
    if s.scaled:
        base = {"model": "gpt_tiny", "seq_len": 64, "batch_size": 4, "precision": "bf16"}
        mnp, compile_ = 10_000, False
    else:
        base = {"model": "gpt_124m", "seq_len": 1024, "batch_size": 12, "precision": "bf16"}
        mnp, compile_ = 1_000_000, True
    base["data"] = s.data
    note = "cpu: gpt_124m -> gpt_tiny, seq_len 1024 -> 64, batch 12 -> 4, min_num_params 1e6 -> 1e4, no compile"
    fsdp = {"wrap_policy": ("size_based",), "min_num_params": (mnp,), "compile": (compile_,)}
    return _cases(
        s,
        "nanogpt-fsdp",
        note,
        base,
        [
            {"strategies": ["ddp"], "knobs": {"compile": (compile_,)}},
            {"strategies": ["fsdp1_full_shard"], "knobs": {**fsdp, "act_ckpt": (False, True)}},
            {"strategies": ["fsdp2"], "knobs": {"compile": (compile_,)}},
            {"strategies": ["fsdp1_full_shard"], "knobs": {**fsdp, "checkpoint": ("full", "sharded")}},
            {"strategies": ["fsdp2"], "knobs": {"compile": (compile_,), "checkpoint": ("sharded",)}},
        ],
    )


def zero2_vs_zero3(s: SuiteSettings) -> list[Case]:
    if s.scaled:
        model, seq, sizes, accums, compile_ = "qwen2_tiny", 64, (1, 2), (1, 2), False
    else:
        model, seq, sizes, accums, compile_ = "qwen2_1_5b", 512, (2, 4, 8, 16), (1, 2, 4), True
    note = "cpu: qwen2_1_5b -> qwen2_tiny, seq_len 512 -> 64, batch 2-16 -> 1-2, grad-accum 1-4 -> 1-2, no compile"
    return _cases(
        s,
        "zero2-vs-zero3",
        note,
        {
            "model": model,
            "seq_len": seq,
            "precision": "bf16",
            "optimizer_impl": "fused",
            "compile": compile_,
            "data": s.data,
        },
        [
            {
                "strategies": ["fsdp1_shard_grad_op", "fsdp2_no_reshard", "fsdp1_full_shard", "fsdp2"],
                "batch_sizes": sizes,
                "grad_accums": accums,
            }
        ],
    )


def optimizer_timing(s: SuiteSettings) -> list[Case]:
    model, seq, bs = ("qwen2_tiny", 64, 2) if s.scaled else ("qwen2_1_5b", 512, 4)
    note = "cpu: qwen2_1_5b -> qwen2_tiny, seq_len 512 -> 64, batch 4 -> 2"
    return _cases(
        s,
        "optimizer-timing",
        note,
        {"model": model, "seq_len": seq, "batch_size": bs, "data": s.data},
        [
            {"strategies": ["fsdp2"], "optimizer_timings": ("after_shard", "before_shard", "before_shard_fixed")},
            {"strategies": ["accelerate_fsdp2"]},
        ],
    )


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            "odsc-linear",
            "How much memory do DDP, FSDP, CPU offload, prefetching and wrap policies cost "
            "on a stack of huge linear layers at batch 8192?",
            "benchmarks/test_suite_odsc_linear.py",
            odsc_linear,
        ),
        Suite(
            "chess-finetune",
            "Fine-tuning a CodeLlama-7B-shaped model with FSDP: how do per-device batch "
            "(with grad-accum keeping the total batch) and gradient checkpointing trade speed for memory?",
            "benchmarks/test_suite_chess_finetune.py",
            chess_finetune,
        ),
        Suite(
            "nanogpt-fsdp",
            "GPT-2 124M in nanoGPT: DDP vs FSDP (size-based wrap at 1M params), bf16, compile, "
            "activation checkpointing, and what saving/resuming a checkpoint costs.",
            "benchmarks/test_suite_nanogpt_fsdp.py",
            nanogpt_fsdp,
        ),
        Suite(
            "zero2-vs-zero3",
            "Qwen2-1.5B: ZeRO-2 (shard_grad_op / no reshard) vs ZeRO-3 (full shard) across "
            "batch sizes and grad-accum, with bf16, compile and fused AdamW.",
            "benchmarks/test_suite_zero2_vs_zero3.py",
            zero2_vs_zero3,
        ),
        Suite(
            "optimizer-timing",
            "FSDP2 with the optimizer built after sharding, before (broken), before with "
            "the re-pointing fix, and through accelerate: memory over time and convergence.",
            "benchmarks/test_suite_optimizer_timing.py",
            optimizer_timing,
        ),
    )
}


def suite_cases(name: str, settings: SuiteSettings) -> list[Case]:
    return SUITES[name].build(settings)
