"""Build a model flavor and find the blocks each strategy wraps or shards one by one."""

from __future__ import annotations

import torch
from torch import nn

from fsdp_bench.models.flavors import MODEL_FLAVORS, ModelFlavor
from fsdp_bench.models.gpt import GPT
from fsdp_bench.models.linear import LinearStack

_BUILDERS = {"gpt": GPT, "linear": LinearStack}


def build_model(flavor: ModelFlavor, *, seed: int, device: torch.device | str = "cpu") -> nn.Module:
    """The flavor's model with deterministic weights: every rank and strategy starts identical."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _BUILDERS[flavor.family](**flavor.config)
    return model.to(device)


def get_flavor(name: str) -> ModelFlavor:
    return MODEL_FLAVORS[name]


def block_modules(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks (transformer layers, linear layers) in forward order."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise ValueError(f"{type(model).__name__} has no `blocks` ModuleList to wrap")
    return list(blocks)


def count_parameters(model: nn.Module) -> int:
    """Unique parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
