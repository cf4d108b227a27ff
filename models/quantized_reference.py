"""Independent torch reference for int8 linear layers (the "torch-quantized reference").

Written from the documented integer semantics (``compiler/program.py``: gemm and the
``requantize`` vector op), with torch int64 ops only, so that the functional model and the
compiler are checked against code that shares none of their implementation. It takes the
quantized parameters as plain tensors; it does not compute them.

Per layer, with x int8 [M, K], weight int8 [N, K] (torch's ``nn.Linear`` orientation):

1. ``acc = x @ weight.T`` summed exactly in int64, then wrapped to int32 (mod 2**32, two's
   complement) as the int32 accumulator does;
2. ``y = ((acc + bias) * multiplier + 2**(shift-1)) >> shift`` in int64 (``>>`` is an arithmetic
   shift, i.e. floor division by 2**shift), per output channel;
3. ``y = clamp(y, 0 if relu else -128, 127)`` as int8.

Valid while every intermediate fits int64: ``|acc + bias| * multiplier + 2**(shift-1) < 2**63``
(true for any realistic layer: with multiplier < 2**31 it holds if
|acc + bias| < 2**32 - 2**(shift-32)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["QuantLinear", "int8_linear", "run_int8_layers"]


@dataclass(frozen=True)
class QuantLinear:
    """One quantized linear layer: weight int8 [N, K]; bias, multiplier, shift int [N]; relu."""

    weight: torch.Tensor
    bias: torch.Tensor
    multiplier: torch.Tensor
    shift: torch.Tensor
    relu: bool


def _wrap_int32(v: torch.Tensor) -> torch.Tensor:
    """int64 -> the int32 value congruent modulo 2**32 (kept in int64)."""
    return torch.remainder(v + 2**31, 2**32) - 2**31


def int8_linear(x: torch.Tensor, layer: QuantLinear) -> torch.Tensor:
    """x int8 [M, K] -> int8 [M, N] by steps 1-3 of the module docstring."""
    if x.dtype != torch.int8 or layer.weight.dtype != torch.int8:
        raise TypeError(f"int8_linear takes int8 x and weight, got {x.dtype}, {layer.weight.dtype}")
    acc = _wrap_int32(torch.matmul(x.to(torch.int64), layer.weight.to(torch.int64).T))
    shift = layer.shift.to(torch.int64)
    y = (acc + layer.bias.to(torch.int64)) * layer.multiplier.to(torch.int64)
    y = (y + (torch.ones_like(shift) << (shift - 1))) >> shift
    return torch.clamp(y, 0 if layer.relu else -128, 127).to(torch.int8)


def run_int8_layers(x: torch.Tensor, layers: Sequence[QuantLinear]) -> torch.Tensor:
    """Apply :func:`int8_linear` layer by layer; x int8 [M, K0] -> int8 [M, K_L]."""
    for layer in layers:
        x = int8_linear(x, layer)
    return x
