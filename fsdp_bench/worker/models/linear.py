"""A stack of large square `nn.Linear` layers, the ODSC FSDP tutorial's kind of model.

Inputs are (batch, seq, dim) so that every position counts as one token, like the GPT model;
the ODSC shape is seq_len=1.
"""

from __future__ import annotations

import math

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
        """torch's own nn.Linear initialization, written out: kaiming-uniform weights, biases
        uniform in +-1/sqrt(fan_in). The build skips the modules' default (models.build), so this
        is the only one."""
        for block in self.blocks:
            weight, bias = block.linear.weight, block.linear.bias
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
            bound = 1 / math.sqrt(weight.shape[1])
            nn.init.uniform_(bias, -bound, bound)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return F.mse_loss(x.float(), targets.float())
