"""A small multilayer perceptron: ``Linear (+ReLU) ... Linear``, deterministically initialized."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["MLP"]


class MLP(nn.Module):
    """``sizes = [d0, d1, ..., dL]`` (features per layer) gives L ``nn.Linear`` layers with a ReLU
    between consecutive layers and none after the last.

    Weights and biases are drawn uniformly from ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` (the
    ``nn.Linear`` default distribution) from a ``torch.Generator`` seeded with ``seed``, so the
    same ``(sizes, seed)`` always gives the same parameters, independent of the global RNG.
    """

    def __init__(self, sizes: Sequence[int], *, seed: int = 0) -> None:
        super().__init__()
        sizes = list(sizes)
        if len(sizes) < 2:
            raise ValueError(f"MLP sizes must list at least 2 feature counts, got {sizes}")
        if any(not isinstance(d, int) or d < 1 for d in sizes):
            raise ValueError(f"MLP sizes must be positive integers, got {sizes}")
        self._sizes = tuple(sizes)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in self.layers:
                bound = 1.0 / math.sqrt(layer.in_features)
                layer.weight.uniform_(-bound, bound, generator=gen)
                layer.bias.uniform_(-bound, bound, generator=gen)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Feature counts ``(d0, ..., dL)``."""
        return self._sizes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: float [batch, d0] -> float [batch, dL]."""
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < last:
                x = torch.relu(x)
        return x
