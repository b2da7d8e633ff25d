"""Deterministic synthetic batches per rank.

Each rank gets `grad_accum` micro-batches drawn once from a generator seeded by (seed, rank) and
reused every optimizer step, like a fixed-batch benchmark: a model that trains drives the loss
down steadily, and one that does not (FSDP2 with a stale optimizer) keeps it exactly flat.
"""

from __future__ import annotations

import torch

from fsdp_bench.plan.flavors import ModelFlavor

Batch = tuple[torch.Tensor, torch.Tensor]


def make_synthetic_batches(
    flavor: ModelFlavor,
    *,
    batch_size: int,
    seq_len: int,
    count: int,
    seed: int,
    rank: int,
    device: torch.device,
) -> list[Batch]:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    batches = []
    for _ in range(count):
        if flavor.takes_tokens:
            tokens = torch.randint(0, _vocab_size(flavor), (batch_size, seq_len + 1), generator=gen)
            x, y = tokens[:, :-1], tokens[:, 1:]
        else:
            dim = flavor.config["dim"]
            x = torch.randn(batch_size, seq_len, dim, generator=gen)
            y = torch.randn(batch_size, seq_len, dim, generator=gen)
        batches.append((x.contiguous().to(device), y.contiguous().to(device)))
    return batches


def _vocab_size(flavor: ModelFlavor) -> int:
    if flavor.from_hf_config:
        from fsdp_bench.worker.models.hf import vocab_size

        return vocab_size(flavor)
    return flavor.config["vocab_size"]


class BatchSource:
    """The micro-batches of each optimizer step for one rank, plus what the data was."""

    def __init__(
        self,
        fixed: list[Batch] | None = None,
        rows: torch.Tensor | None = None,
        *,
        batch_size: int = 1,
        grad_accum: int = 1,
        rank: int = 0,
        world_size: int = 1,
        device: torch.device | None = None,
        info: dict | None = None,
    ) -> None:
        self.fixed = fixed
        self.rows = rows
        self.batch_size, self.grad_accum = batch_size, grad_accum
        self.rank, self.world_size = rank, world_size
        self.device = device
        self.info = info or {"kind": "synthetic"}

    def batches(self, step: int) -> list[Batch]:
        """Step `step`'s micro-batches. Text rows are dealt to ranks in order and wrap around
        (another epoch) when the corpus is shorter than the run, so every step is deterministic."""
        if self.fixed is not None:
            return self.fixed
        assert self.rows is not None
        n = self.rows.shape[0]
        out = []
        for micro in range(self.grad_accum):
            first = ((step * self.grad_accum + micro) * self.world_size + self.rank) * self.batch_size
            index = torch.arange(first, first + self.batch_size) % n
            chunk = self.rows[index]
            out.append((chunk[:, :-1].contiguous().to(self.device), chunk[:, 1:].contiguous().to(self.device)))
        return out


def make_batch_source(
    flavor: ModelFlavor,
    *,
    data: str,
    batch_size: int,
    seq_len: int,
    grad_accum: int,
    seed: int,
    rank: int,
    world_size: int,
    device: torch.device,
) -> BatchSource:
    """Synthetic batches (data == "") or the packed text of a `--bench-data` folder."""
    if not data:
        fixed = make_synthetic_batches(
            flavor, batch_size=batch_size, seq_len=seq_len, count=grad_accum, seed=seed, rank=rank, device=device
        )
        return BatchSource(fixed)
    from fsdp_bench.plan.text_data import BYTE_EOS, TextDataError, byte_tokens, pack, read_text_folder

    corpus = read_text_folder(data)
    tokenizer = None
    if flavor.from_hf_config:
        from fsdp_bench.worker.models.hf import local_tokenizer

        tokenizer = local_tokenizer(flavor)
    vocab = _vocab_size(flavor)
    if tokenizer is not None:
        docs = [tokenizer(d, add_special_tokens=False)["input_ids"] for d in corpus.documents]
        eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        name = f"local:{type(tokenizer).__name__}"
    else:
        if vocab <= BYTE_EOS:
            raise TextDataError(f"byte-level tokens need a vocabulary over {BYTE_EOS}; {flavor.name} has {vocab}")
        docs = [byte_tokens(d) for d in corpus.documents]
        eos, name = BYTE_EOS, "byte-level (UTF-8 bytes, eos=256)"
    rows = pack(docs, eos, seq_len + 1)
    if not rows:
        total = sum(len(d) + 1 for d in docs)
        raise TextDataError(f"{data!r} holds {total} tokens, fewer than one sequence of {seq_len + 1}")
    info = {
        "kind": "text",
        "folder": str(data),
        "tokenizer": name,
        "files": len(corpus.files),
        "documents": len(corpus.documents),
        "sequences": len(rows),
        "tokens": len(rows) * (seq_len + 1),
        "malformed_lines": corpus.malformed,
        "problems": corpus.problems,
    }
    return BatchSource(
        rows=torch.tensor(rows, dtype=torch.long),
        batch_size=batch_size,
        grad_accum=grad_accum,
        rank=rank,
        world_size=world_size,
        device=device,
        info=info,
    )
