"""tilewright.compiler: torch model -> IR Graph -> passes -> Program (see docs/design.md).

Importing this package does not import torch (the RTL bench imports ``compiler.program`` and
``compiler.layout`` inside the simulator process); :func:`compile_model` imports it when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tilewright.arch import ArchSpec
    from tilewright.compiler.program import Program

__all__ = ["compile_model"]


def compile_model(model: Any, example_input: Any, arch: "ArchSpec", *, calibration: Any = None,
                  name: str | None = None) -> "Program":
    """Compile a torch ``model`` (``nn.Linear`` + ReLU layers) to an int8 Program for ``arch``.

    ``torch.export`` captures ``model`` with ``example_input`` (float [M, K]); activation scales
    come from running the float model on ``calibration`` (default: ``example_input``); weights are
    per-channel symmetric int8 (see :mod:`tilewright.compiler.passes.quantize`). The Program takes
    ``"x"`` int8 [M, K] = clamp(round(x / meta["input_scale"]), -128, 127) and its output times
    ``meta["output_scale"]`` approximates the float model's output. ``name`` defaults to the
    model's ``config_name`` (set by :func:`tilewright.models.configs.build`) or its class name.
    Raises ``UnsupportedOp`` naming an op the compiler cannot handle and its source line, and
    ``DoesNotFit`` naming a layer whose K cannot fit the core's buffers.
    """
    from tilewright.compiler.mapping import compile_model as _compile  # noqa: PLC0415

    return _compile(model, example_input, arch, calibration=calibration, name=name)
