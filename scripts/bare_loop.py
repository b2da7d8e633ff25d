"""A hand-written training loop with no harness, the reference for harness-fidelity checks.

    torchrun --standalone --nproc-per-node 2 scripts/bare_loop.py --strategy fsdp2 --model gpt_small \
        --batch-size 4 --seq-len 128 --steps 30 --warmup 5 --out times.json

Same model class, same batch, same optimizer and precision as the suite; wrapping written out by
hand. `--precision bf16` does what the suite does: autocast for DDP (parameters and gradient
all-reduce stay fp32), a mixed-precision policy (bf16 parameters and reduction) for FSDP2.
Rank 0 writes the measured step times (s) to --out.
"""

import argparse
import contextlib
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from fsdp_bench.results.io import write_text_atomic
from fsdp_bench.worker.models.build import build_model, get_flavor

# What a fidelity report compared against (scripts/gpu_reference names its reports with it): 2 is
# the root resharded as the suite's, with the suite's OMP_NUM_THREADS (measure_fidelity.py); the
# reports named without it were measured against version 1.
BARE_LOOP_VERSION = 2


def wrap(model: torch.nn.Module, strategy: str, low: torch.dtype | None, device: torch.device) -> torch.nn.Module:
    """DDP, or FSDP2 on every block then the root (with a bf16 policy when `low` is set)."""
    if strategy == "ddp":
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    # reshard_after_forward=True on the root too, as the suite's fsdp2 row passes it: torch's default
    # (None) keeps the root's parameters gathered after forward, less work than the suite's case
    policy: dict = {"reshard_after_forward": True}
    if low:
        policy["mp_policy"] = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=low)
    for block in model.blocks:
        fully_shard(block, **policy)
    fully_shard(model, **policy)
    return model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", choices=["ddp", "fsdp2"], required=True)
    p.add_argument("--model", default="gpt_small")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    flavor = get_flavor(args.model)
    model = build_model(flavor, seed=0, device=device)
    low = torch.bfloat16 if args.precision == "bf16" else None
    model = wrap(model, args.strategy, low, device)

    def autocast():  # DDP's low precision; FSDP2's comes from its policy
        if low is None or args.strategy != "ddp":
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=low)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(rank)
    vocab = flavor.config["vocab_size"]
    batches = []
    for _ in range(args.grad_accum):
        t = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), generator=g)
        batches.append((t[:, :-1].contiguous().to(device), t[:, 1:].contiguous().to(device)))

    times = []
    for i in range(args.warmup + args.steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for x, y in batches:
            with autocast():
                loss = model(x, y) / args.grad_accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    # like the suite, a step lasts as long as its slowest rank
    t = torch.tensor(times, dtype=torch.float64, device=device)  # NCCL reduces device tensors only
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:  # whole or not at all: measure_fidelity.py reads it
        write_text_atomic(Path(args.out), json.dumps(t.tolist()))
    dist.barrier()  # as the worker does: without it gloo can abort in teardown ("terminate called ...")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
