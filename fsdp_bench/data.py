"""Deterministic synthetic batches per rank.

Each rank gets `grad_accum` micro-batches drawn once from a generator seeded by (seed, rank) and
reused every optimizer step, like a fixed-batch benchmark: a model that trains drives the loss
down steadily, and one that does not (FSDP2 with a stale optimizer) keeps it exactly flat.
"""

from __future__ import annotations

import torch

from fsdp_bench.models.flavors import ModelFlavor

Batch = tuple[torch.Tensor, torch.Tensor]


def make_synthetic_batches(
    flavor: ModelFlavor, *, batch_size: int, seq_len: int, count: int, seed: int, rank: int,
    device: torch.device,
) -> list[Batch]:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    batches = []
    for _ in range(count):
        if flavor.family == "gpt":
            tokens = torch.randint(0, flavor.config["vocab_size"], (batch_size, seq_len + 1), generator=gen)
            x, y = tokens[:, :-1], tokens[:, 1:]
        else:
            dim = flavor.config["dim"]
            x = torch.randn(batch_size, seq_len, dim, generator=gen)
            y = torch.randn(batch_size, seq_len, dim, generator=gen)
        batches.append((x.contiguous().to(device), y.contiguous().to(device)))
    return batches
