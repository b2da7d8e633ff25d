"""A stack of large square `nn.Linear` layers, the ODSC FSDP tutorial's kind of model.

Inputs are (batch, seq, dim) so that every position counts as one token, like the GPT model;
the ODSC shape is seq_len=1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LinearBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.linear(x))


class LinearStack(nn.Module):
    def __init__(self, *, dim: int, n_layers: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(LinearBlock(dim) for _ in range(n_layers))
        self.init_weights()

    def init_weights(self) -> None:
        for block in self.blocks:
            block.linear.reset_parameters()

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return F.mse_loss(x.float(), targets.float())
