"""Named model configurations with real shapes: ``build(name, seed) -> (module, example_input)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from tilewright.models.demo_shapes import MLP_SHAPES
from tilewright.models.llm_shapes import ModelInputError

from tilewright.models.mlp import MLP

__all__ = ["ModelConfig", "CONFIGS", "build"]


@dataclass(frozen=True)
class ModelConfig:
    """How to build one named model: a constructor, its arguments and the example input's shape."""

    constructor: Callable[..., nn.Module]
    kwargs: dict
    input_shape: tuple[int, ...]
    """shape of the example input (elements per dim), batch first"""
    description: str = ""


CONFIGS: dict[str, ModelConfig] = {
    name: ModelConfig(MLP, {"sizes": list(sizes)}, shape, text)
    for name, (sizes, shape, text) in MLP_SHAPES.items()}


def build(name: str, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """The module for config ``name`` (parameters from ``seed``) in eval mode, and a float32
    example input drawn from N(0, 1) with a generator seeded by ``seed + 1``.

    The module gets ``config_name = name`` so the compiler can name its Program after it.
    Raises ValueError listing the known names when ``name`` is unknown.
    """
    if name not in CONFIGS:
        raise ModelInputError(f"unknown model config {name!r}; known: "
                              f"{', '.join(sorted(CONFIGS))}")
    cfg = CONFIGS[name]
    module = cfg.constructor(**cfg.kwargs, seed=seed).eval()
    module.config_name = name
    gen = torch.Generator().manual_seed(seed + 1)
    example = torch.randn(cfg.input_shape, generator=gen)
    return module, example
