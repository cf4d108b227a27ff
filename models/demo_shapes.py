"""The demo's model configs as plain data (no torch): layer widths, example-input shape and a
description, so listings (``tilewright models``) need not import torch.
:mod:`tilewright.models.configs` builds the modules from this table."""

from __future__ import annotations

__all__ = ["MLP_SHAPES"]

#: name -> (layer widths in..out (elements), example input shape (batch, features), description)
MLP_SHAPES: dict[str, tuple[tuple[int, ...], tuple[int, ...], str]] = {
    "mlp-tiny": ((32, 64, 64, 16), (4, 32), "3-layer MLP 32->64->64->16, batch 4"),
    "mlp-small": ((64, 128, 128, 10), (8, 64), "3-layer MLP 64->128->128->10, batch 8"),
}
