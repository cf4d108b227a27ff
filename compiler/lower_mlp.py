"""Lowering of the MLP (int8) flow: a quantized IR Graph -> :class:`~.program.Program` for one
ArchSpec (entry: :func:`tilewright.compiler.compile` with ``flow="mlp"``).

Each ``qlinear`` (x int8 [M,K], W int8 [N,K]) becomes

* ``GemmTask(a=x [M,K], b=W.T [K,N] constant "<layer>.weight", out="<layer>.acc" int32 [M,N])``
* ``VectorTask("requantize", (acc, "<layer>.bias", "<layer>.multiplier", "<layer>.shift"),
  out="<layer>.out" int8 [M,N], attrs={"relu": bool})``

If the GEMM does not fit the core's buffers (:meth:`GemmLayout.check_fits`), it is split into
tiles of ``m_tile x K x n_tile``: ``n_tile`` is the largest of N and the multiples of the array's
``cols`` below N for which some row block fits, ``m_tile`` the largest row count that then fits.
The split adds data movement as vector tasks: ``slice`` of the weight's columns (axis 1) and of
x's rows (axis 0), one GEMM per tile, ``concat`` of the int32 tiles back into the layer's
accumulator (axis 1 within a row block, then axis 0), then one ``requantize``. K is never split:
if a ``1 x K x min(N, cols)`` tile does not fit, :class:`DoesNotFit` names the layer.

Program naming: input ``"x"`` (int8, scale ``meta["input_scale"]``), output ``"<last layer>.out"``
(int8, scale ``meta["output_scale"]``); ``meta["layers"]`` lists each layer's facts.
"""

from __future__ import annotations

from math import ceil
from typing import Any

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.errors import UnsupportedOp
from tilewright.compiler.ir import Graph, Op
from tilewright.compiler.layout import DoesNotFit, GemmLayout
from tilewright.compiler.program import GemmTask, Program, TensorInfo, VectorTask

__all__ = ["map_graph", "plan_gemm"]


def _fits(arch: ArchSpec, m: int, k: int, n: int) -> bool:
    return GemmLayout.for_arch(arch, m, k, n).fits(arch)


def plan_gemm(arch: ArchSpec, m: int, k: int, n: int, *, layer: str = "?") -> tuple[int, int]:
    """``(m_tile, n_tile)`` (elements) for an M x K x N GEMM on ``arch``; ``(m, n)`` if it fits
    whole. Buffer needs grow monotonically with m and n, so ragged last tiles fit too."""
    if _fits(arch, m, k, n):
        return m, n
    cols = arch.tensor_engine.cols
    n_tiles = [n] + [c * cols for c in range(ceil(n / cols) - 1, 0, -1)]
    for nt in n_tiles:
        if not _fits(arch, 1, k, nt):
            continue
        lo, hi = 1, m  # largest m_tile in [lo, hi] that fits; lo fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if _fits(arch, mid, k, nt) else (lo, mid - 1)
        return lo, nt
    try:
        GemmLayout.for_arch(arch, 1, k, min(n, cols)).check_fits(arch)
    except DoesNotFit as exc:
        raise DoesNotFit(f"layer {layer}: K={k} does not fit even as a 1 x {k} x {min(n, cols)} "
                         f"tile (K is never split): {exc}") from None
    raise AssertionError("unreachable: the smallest tile fits")  # pragma: no cover


class _Builder:
    """Accumulates Program tensors, constants and tasks; tracks which task made each tensor."""

    def __init__(self) -> None:
        self.tensors: dict[str, TensorInfo] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.tasks: list[Any] = []
        self.made_by: dict[str, str] = {}

    def tensor(self, name: str, shape: tuple[int, ...], fmt: str) -> str:
        self.tensors[name] = TensorInfo(name=name, shape=tuple(shape), format=fmt)
        return name

    def const(self, name: str, arr: np.ndarray) -> str:
        self.constants[name] = np.ascontiguousarray(arr)
        return self.tensor(name, arr.shape, str(arr.dtype))

    def deps(self, *names: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.made_by[x] for x in names if x in self.made_by))

    def gemm(self, name: str, a: str, b: str, out: str, source: str) -> None:
        (m, k), (_, n) = self.tensors[a].shape, self.tensors[b].shape
        self.tensor(out, (m, n), "int32")
        self.tasks.append(GemmTask(name=name, a=a, b=b, out=out, m=m, k=k, n=n,
                                   deps=self.deps(a, b), source=source))
        self.made_by[out] = name

    def vector(self, name: str, op: str, inputs: tuple[str, ...], out: str, shape: tuple[int, ...],
               fmt: str, source: str, **attrs: Any) -> None:
        self.tensor(out, shape, fmt)
        self.tasks.append(VectorTask(name=name, op=op, inputs=inputs, out=out, attrs=attrs,
                                     deps=self.deps(*inputs), source=source))
        self.made_by[out] = name

    def slice(self, x: str, axis: int, start: int, stop: int, out: str, source: str) -> str:
        info = self.tensors[x]
        shape = list(info.shape)
        shape[axis] = stop - start
        self.vector(out, "slice", (x,), out, tuple(shape), info.format, source,
                    axis=axis, start=start, stop=stop)
        return out

    def concat(self, parts: list[str], axis: int, out: str, source: str) -> str:
        if len(parts) == 1:
            return parts[0]
        shape = list(self.tensors[parts[0]].shape)
        shape[axis] = sum(self.tensors[p].shape[axis] for p in parts)
        self.vector(out, "concat", tuple(parts), out, tuple(shape),
                    self.tensors[parts[0]].format, source, axis=axis)
        return out


def _map_qlinear(bld: _Builder, op: Op, graph: Graph, x: str, arch: ArchSpec) -> tuple[str, dict]:
    """Emit the tasks of one qlinear reading program tensor ``x``; return (output name, facts)."""
    layer, src = op.attrs["layer"], op.source
    w_q = graph.const(op.inputs[1])  # [N, K]
    n, k = w_q.shape
    m = bld.tensors[x].shape[0]
    w = bld.const(f"{layer}.weight", np.ascontiguousarray(w_q.T))  # B = W.T, [K, N]
    bias, mult, shift = (bld.const(f"{layer}.{kind}", graph.const(name)) for kind, name in
                         zip(("bias", "multiplier", "shift"), op.inputs[2:5]))
    acc = f"{layer}.acc"
    m_tile, n_tile = plan_gemm(arch, m, k, n, layer=f"{layer} ({src})")
    if (m_tile, n_tile) == (m, n):
        bld.gemm(f"{layer}.gemm", x, w, acc, src)
    else:
        col_blocks = [(n0, min(n0 + n_tile, n)) for n0 in range(0, n, n_tile)]
        row_blocks = [(m0, min(m0 + m_tile, m)) for m0 in range(0, m, m_tile)]
        w_parts = [w if len(col_blocks) == 1 else
                   bld.slice(w, 1, n0, n1, f"{layer}.weight.n{n0}", src) for n0, n1 in col_blocks]
        rows = []
        for m0, m1 in row_blocks:
            xa = x if len(row_blocks) == 1 else bld.slice(x, 0, m0, m1, f"{layer}.x.m{m0}", src)
            tiles = []
            for (n0, _), wp in zip(col_blocks, w_parts):
                out = f"{layer}.acc.m{m0}.n{n0}"
                bld.gemm(f"{layer}.gemm.m{m0}.n{n0}", xa, wp, out, src)
                tiles.append(out)
            rows.append(bld.concat(tiles, 1, f"{layer}.acc.m{m0}", src))
        acc = bld.concat(rows, 0, acc, src)
    out = f"{layer}.out"
    bld.vector(f"{layer}.requantize", "requantize", (acc, bias, mult, shift), out, (m, n), "int8",
               src, relu=bool(op.attrs["relu"]))
    facts = {"name": layer, "source": src, "m": m, "k": k, "n": n, "relu": bool(op.attrs["relu"]),
             "input": x, "output": out, "weight": w, "bias": bias, "multiplier": mult,
             "shift": shift, "input_scale": op.attrs["input_scale"],
             "output_scale": op.attrs["output_scale"], "weight_scales": op.attrs["weight_scales"],
             "m_tile": m_tile, "n_tile": n_tile}
    return out, facts


def map_graph(graph: Graph, arch: ArchSpec, *, name: str | None = None) -> Program:
    """Map a quantized graph (only ``qlinear`` ops, one int8 input) to a checked Program."""
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise ValueError(f"graph {graph.name}: one input and one output supported, got "
                         f"{graph.inputs} -> {graph.outputs}")
    bld = _Builder()
    x_ir = graph.tensors[graph.inputs[0]]
    if x_ir.format != "int8" or len(x_ir.shape) != 2:
        raise ValueError(f"graph input {x_ir} must be an int8 matrix [M, K]: run the int8 flow")
    names = {x_ir.name: bld.tensor("x", x_ir.shape, "int8")}
    layers = []
    for op in graph.ops:
        if op.kind != "qlinear":
            raise UnsupportedOp(f"op {op.kind} at {op.source or '<unknown source>'} has no "
                                f"mapping to {arch.name} (only quantized linear layers)")
        out, facts = _map_qlinear(bld, op, graph, names[op.inputs[0]], arch)
        names[op.outputs[0]] = out
        layers.append(facts)
    y_ir = graph.tensors[graph.outputs[0]]
    prog = Program(
        name=name or graph.name, arch_hash=arch.content_hash(), tensors=bld.tensors,
        inputs=["x"], outputs=[names[y_ir.name]], tasks=bld.tasks,
        meta={"input_scale": float(x_ir.meta["scale"]), "output_scale": float(y_ir.meta["scale"]),
              "arch": arch.name, "layers": layers},
        constants=bld.constants)
    prog.check()
    return prog

