"""IR Graph: what the compiler knows about a model (see docs/design.md, "The four contracts").

A :class:`Graph` holds typed :class:`Tensor` s (name, shape in elements, element format) and an
ordered list of :class:`Op` s (kind, input and output tensor names, attributes, source line).
Constant tensors (weights, biases, quantization parameters) carry their numpy ``data``.
Op order is a valid execution order. The IR is plain Python + numpy: no torch import.

Op kinds produced by the frontend and the passes (inputs in order):

=========  ==================================  ===============================================
kind       inputs                              meaning
=========  ==================================  ===============================================
linear     x [M,K], weight [N,K] (, bias [N])  x @ weight.T + bias; attrs.relu after fusion
relu       x                                   max(x, 0)
transpose  x [A,B]                             x.T  (aten.t, aten.permute(x, [1, 0]))
matmul     x [M,K], w [K,N]                    x @ w  (aten.mm)
addmm      bias [N], x [M,K], w [K,N]          bias + x @ w  (aten.addmm, alpha = beta = 1)
qlinear    x int8, weight int8 [N,K],          int8 linear; see passes.quantize
           bias int32, multiplier, shift
=========  ==================================  ===============================================

The LLM path adds (frontend and passes; semantics of the vector kinds are those of the Program's
:data:`~tilewright.compiler.program.VECTOR_OPS` of the same name, attrs included):

* every name in ``VECTOR_OPS`` except requantize/bias_add (``add``, ``exp``, ``reduce_sum``,
  ``softmax``, ``reshape``, ``permute``, ``slice``, ``concat``, ``pad`` ...);
* ``matmul`` (x [..., M, K], w [..., K, N], batch dims broadcast), ``einsum`` (attrs.equation);
* ``topk`` (x) -> (values, indices), attrs k, axis;
* after passes: ``attention`` (q, k, v; attrs scale, causal_offset), ``scan`` (a, b, c, h0) ->
  (y, h_last), ``grouped_gemm`` (x [R, K], w [E, ...], counts [E]; attrs transpose_b).

A constant whose values are not known (a parameter of a model built on the ``meta`` device, for
shape-only compiles) has ``data=None`` and ``meta["param"] = True``; it still counts as constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Tensor", "Op", "Graph", "FORMATS"]

#: element formats the IR knows
FORMATS = ("fp32", "int8", "int32", "int64", "bool")


@dataclass
class Tensor:
    """A named tensor: ``shape`` in elements per dim, ``format`` one of :data:`FORMATS`.

    ``data`` is set for constants. ``meta`` holds facts passes leave behind, e.g. ``absmax``
    (largest |value| seen on calibration data, in the tensor's float units) and ``scale``
    (float units per integer step of a quantized tensor).
    """

    name: str
    shape: tuple[int, ...]
    format: str
    data: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"tensor {self.name}: format {self.format!r} not in {FORMATS}")
        self.shape = tuple(int(d) for d in self.shape)

    @property
    def is_const(self) -> bool:
        return self.data is not None or bool(self.meta.get("param", False))

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape) or "scalar"
        return f"%{self.name}: {self.format}[{dims}]" + (" const" if self.is_const else "")


@dataclass
class Op:
    """One operation: ``kind``, input/output tensor names, attributes, and ``source`` — the model
    source line it came from, as ``"path/to/file.py:LINE"`` (empty if unknown)."""

    kind: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    name: str = ""

    def __str__(self) -> str:
        outs = ", ".join(f"%{o}" for o in self.outputs)
        ins = ", ".join(f"%{i}" for i in self.inputs)
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items() if not k.startswith("_"))
        where = f"  # {self.source}" if self.source else ""
        return f"{outs} = {self.kind}({ins}{attrs}){where}"


@dataclass
class Graph:
    """Tensors by name, inputs/outputs by name, and ops in execution order."""

    name: str = "graph"
    tensors: dict[str, Tensor] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    # ---- building ------------------------------------------------------------------------
    def add_tensor(self, tensor: Tensor) -> Tensor:
        if tensor.name in self.tensors:
            raise ValueError(f"graph {self.name}: tensor {tensor.name} defined twice")
        self.tensors[tensor.name] = tensor
        return tensor

    def add_op(self, op: Op) -> Op:
        for x in op.inputs + op.outputs:
            if x not in self.tensors:
                raise ValueError(f"op {op.kind} ({op.source}): tensor {x} is not in the graph")
        if not op.name:
            op.name = op.outputs[0] if op.outputs else op.kind
        self.ops.append(op)
        return op

    # ---- queries -------------------------------------------------------------------------
    def producer(self, tensor: str) -> Op | None:
        return next((op for op in self.ops if tensor in op.outputs), None)

    def consumers(self, tensor: str) -> list[Op]:
        return [op for op in self.ops if tensor in op.inputs]

    def const(self, name: str) -> np.ndarray:
        data = self.tensors[name].data
        if data is None:
            raise ValueError(f"tensor {name} is not a constant")
        return data

    # ---- editing -------------------------------------------------------------------------
    def remove_unused(self) -> None:
        """Drop tensors no op, input or output refers to."""
        used = set(self.inputs) | set(self.outputs)
        for op in self.ops:
            used.update(op.inputs)
            used.update(op.outputs)
        for name in [n for n in self.tensors if n not in used]:
            del self.tensors[name]

    def check(self) -> None:
        """Raise ValueError if an op reads a tensor before it is made or an output is never made."""
        defined = set(self.inputs) | {n for n, t in self.tensors.items() if t.is_const}
        for op in self.ops:
            for x in op.inputs:
                if x not in defined:
                    raise ValueError(f"op {op.name} ({op.source}): input {x} used before defined")
            defined.update(op.outputs)
        for x in self.outputs:
            if x not in defined:
                raise ValueError(f"graph output {x} is never computed")

    def __str__(self) -> str:
        lines = [f"graph {self.name}({', '.join(str(self.tensors[x]) for x in self.inputs)}):"]
        consts = [t for t in self.tensors.values() if t.is_const]
        lines += [f"  {t}" for t in consts]
        lines += [f"  {op}" for op in self.ops]
        lines.append(f"  return {', '.join('%' + x for x in self.outputs)}")
        return "\n".join(lines)
