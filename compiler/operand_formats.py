"""GEMM operand formats in the LLM lowering: which tensor is quantized how, and where.

For a GEMM-like task in format ``fmt`` (a name of :data:`tilewright.formats.FORMATS`):

==============  =====================================  =========================================
format          activations (run time, ``quantize``)   weights (compile time, constants)
==============  =====================================  =========================================
fp32            unchanged                              unchanged
bf16            RNE to bf16 (no scale)                 RNE to bf16 (no scale)
int8/16, fp8-*  one fp32 scale per tensor              per output channel (``granularity=
                                                       "channel"``, default) or per tensor
mx*             E8M0 scale per 32-block along K        E8M0 scale per 32-block along K
==============  =====================================  =========================================

Rules: activations are quantized with a :class:`~.program.QuantizeTask` (``amax`` is known only at
run time); one tensor read by several GEMMs along the same axis (x feeding the q, k and v
projections) is quantized once. Weights are quantized here with
:func:`tilewright.formats.quantize` and travel as constants (codes + scales); stacked expert
weights [E, ...] are quantized expert by expert ("tensor" then means one scale per expert). A
shape-only compile (weights without values) lists the codes and scales as unknown constants.
The accumulator is the ArchSpec's: int32 for int8 and int16, fp32 otherwise.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.formats import FORMATS, get_format, quantize

__all__ = ["arch_for_format", "OperandQuantizer", "GRANULARITIES", "accumulator_of"]

#: weight scale granularities the lowering accepts for the fp32-scaled formats (int8, fp8-*)
GRANULARITIES = ("channel", "tensor")


def accumulator_of(fmt: str) -> str:
    """Accumulator format of a GEMM in ``fmt``: int32 for int8 and int16, fp32 for every other
    format."""
    return get_format(fmt).default_acc


def arch_for_format(arch: ArchSpec, fmt: str) -> ArchSpec:
    """``arch`` with its tensor engine's operand formats set to ``fmt`` (and the accumulator it
    implies) — the same array built for that format. Validated like any ArchSpec: e.g. MX formats
    need ``rows`` to be a multiple of 32 (raises :class:`tilewright.arch.ArchSpecError`)."""
    get_format(fmt)
    te = arch.tensor_engine
    if te.input_format == fmt and te.weight_format == fmt:
        return arch
    data = arch.model_dump(mode="json", exclude_none=True)
    data["tensor_engine"] = {**data["tensor_engine"], "input_format": fmt, "weight_format": fmt,
                             "accumulator_format": accumulator_of(fmt)}
    return ArchSpec.from_dict(data, source=f"{arch.name} built for {fmt}")


class OperandQuantizer:
    """Emits the quantization of GEMM operands for one lowering (see module doc).

    ``new(name, shape, fmt)`` registers a Program tensor; ``emit(task)`` appends a QuantizeTask
    (both supplied by the lowering's builder); ``constants``/``unknown`` collect compile-time
    quantized weights (values known / shape-only).
    """

    def __init__(self, fmt: str, granularity: str, new: Callable[..., str],
                 emit: Callable[..., None]) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"format {fmt!r}: known formats are {', '.join(FORMATS)}")
        if granularity not in GRANULARITIES:
            raise ValueError(f"weight granularity {granularity!r}: must be one of {GRANULARITIES}")
        self.fmt = get_format(fmt)
        self.granularity = granularity
        self._new, self._emit = new, emit
        self._done: dict[tuple[str, int], tuple[str, str | None]] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.unknown: list[str] = []

    @property
    def active(self) -> bool:
        return self.fmt.name != "fp32"

    def _act_granularity(self) -> str:
        return {"none": "none", "fp32": "tensor", "e8m0": "block"}[self.fmt.scaling]

    def _scale_shape(self, shape: tuple[int, ...], axis: int, gran: str) -> tuple[int, ...]:
        if gran == "tensor":
            return (1,) * len(shape)
        out = list(shape)
        out[axis] = 1 if gran == "channel" else -(-shape[axis] // 32)
        return tuple(out)

    def activation(self, x: str, shape: tuple[int, ...], axis: int, source: str = ""
                   ) -> tuple[str, str | None]:
        """(codes, scales or None) of run-time tensor ``x`` quantized along ``axis``."""
        if not self.active:
            return x, None
        axis %= len(shape)
        key = (x, axis if self.fmt.scaling == "e8m0" else -1)
        if key in self._done:
            return self._done[key]
        gran = self._act_granularity()
        suffix = f".q{axis}" if self.fmt.scaling == "e8m0" else ".q"
        codes = self._new(f"{x}{suffix}", shape, self.fmt.name)
        scale = None
        if gran != "none":
            scale = self._new(f"{x}{suffix}.scale", self._scale_shape(shape, axis, gran),
                              "e8m0" if gran == "block" else "fp32")
        self._emit(x, codes, scale, gran, axis, source)
        self._done[key] = (codes, scale)
        return codes, scale

    def weight(self, w: str, shape: tuple[int, ...], data: np.ndarray | None, axis: int,
               stacked: bool = False) -> tuple[str, str | None]:
        """(codes, scales or None) constants of weight ``w`` quantized along ``axis`` (of one
        expert's matrix when ``stacked``: the leading axis indexes experts)."""
        if not self.active:
            return w, None
        inner = shape[1:] if stacked else shape
        axis %= len(inner)
        gran = {"none": "none", "fp32": self.granularity, "e8m0": "block"}[self.fmt.scaling]
        sshape = self._scale_shape(inner, axis, gran)
        sshape = (shape[0], *sshape) if stacked else sshape
        codes = self._new(f"{w}.{self.fmt.name}", shape, self.fmt.name)
        scale = None if gran == "none" else self._new(
            f"{w}.{self.fmt.name}.scale", sshape, "e8m0" if gran == "block" else "fp32")
        if data is None:
            self.unknown += [x for x in (codes, scale) if x]
            return codes, scale
        kw: dict[str, Any] = {"granularity": gran} if self.fmt.scaling == "fp32" else {}
        parts = [quantize(m, self.fmt, axis=axis, **kw) for m in (data if stacked else [data])]
        self.constants[codes] = np.stack([q.values for q in parts]) if stacked else parts[0].values
        if scale:
            arr = np.stack([q.scales for q in parts]) if stacked else parts[0].scales
            self.constants[scale] = np.ascontiguousarray(arr.reshape(sshape))
        return codes, scale
