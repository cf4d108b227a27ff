"""Convolution and pooling as IR primitives: im2col + one GEMM, window slices + one reduction.

Used by the frontend for ``aten.conv1d/conv2d/convolution`` and ``aten.max_pool*/avg_pool*/
adaptive_avg_pool*`` (N spatial axes, N = 1 or 2 in practice; the code is N-d). Plain IR building,
no torch.

**Convolution** ``x [B, C, *S]``, weight ``[O, C/g, *K]`` (constant), stride/padding/dilation per
spatial axis, ``g`` groups -> ``out [B, O, *So]``:

1. ``pad`` (zeros) when any padding;
2. per kernel offset ``(k_1 .. k_N)``: strided ``slice`` along each spatial axis (start
   ``k_i * dilation_i``, step ``stride_i``, ``So_i`` elements) -> ``[B, C, *So]`` (views: free);
3. ``stack`` of the ``prod(K)`` windows on axis 2 -> ``[B, C, KK, *So]`` (im2col: the one copy
   that moves ``prod(K)`` times the input's bytes), ``reshape`` ``[B, C*KK, P]`` (``P = prod(So)``),
   ``permute`` -> ``[B, P, C*KK]``, ``reshape`` ``[B*P, C*KK]``;
4. ``linear`` with the weight reshaped at compile time to ``[O, C*KK]`` (C outer, kernel inner:
   torch's weight layout) and the bias: a GEMM of ``M = B*P``, ``K = C*KK``, ``N = O`` that the
   mapper tiles like any other (its own cost and mapping);
5. ``reshape`` ``[B, P, O]``, ``permute`` ``[B, O, P]``, ``reshape`` ``[B, O, *So]``.

With ``g > 1`` steps 2-4 run per group on a channel ``slice``, and the group outputs are
``concat`` ed on the channel axis.

**Pooling** (max / average): ``pad`` (-inf for max, 0 for average), the same window slices,
``stack`` on axis 2, ``reduce_max`` / ``reduce_mean`` over that axis (average pooling counts the
padding, torch's ``count_include_pad=True``).
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np

from tilewright.compiler.ir import Graph, Op, Tensor

__all__ = ["conv_ops", "pool_ops", "out_size"]


def out_size(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    """Output length (elements) of one spatial axis, torch's floor rule."""
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


class _Emit:
    """Adds tensors named ``{base}.{tag}`` to ``graph`` and collects the ops that make them."""

    def __init__(self, graph: Graph, base: str, fmt: str) -> None:
        self.graph, self.base, self.fmt = graph, base, fmt
        self.ops: list[Op] = []
        self._n = 0

    def tensor(self, tag: str, shape: Sequence[int], fmt: str | None = None) -> str:
        self._n += 1
        name = f"{self.base}.{tag}{self._n}"
        self.graph.add_tensor(Tensor(name, tuple(shape), fmt or self.fmt))
        return name

    def op(self, kind: str, ins: list[str], shape: Sequence[int], attrs: dict, *,
           out: str | None = None, tag: str | None = None) -> str:
        out = out or self.tensor(tag or kind, shape)
        self.ops.append(Op(kind, ins, [out], attrs))
        return out


def _windows(e: _Emit, x: str, shape: tuple[int, ...], kernel: Sequence[int],
             stride: Sequence[int], dilation: Sequence[int], out_sp: Sequence[int]) -> list[str]:
    """One strided slice chain per kernel offset: ``[B, C, *So]`` each (row-major offsets)."""
    wins = []
    for offs in itertools.product(*(range(k) for k in kernel)):
        cur, cur_shape = x, list(shape)
        for i, k in enumerate(offs):
            ax = 2 + i
            start = k * dilation[i]
            stop = start + (out_sp[i] - 1) * stride[i] + 1
            if start == 0 and stop == cur_shape[ax] and stride[i] == 1:
                continue
            cur_shape[ax] = out_sp[i]
            cur = e.op("slice", [cur], cur_shape, {"axis": ax, "start": start, "stop": stop,
                                                  "step": stride[i]}, tag="win")
        wins.append(cur)
    return wins


def _padded(e: _Emit, x: str, shape: tuple[int, ...], padding: Sequence[int],
            value: float) -> tuple[str, tuple[int, ...]]:
    if not any(padding):
        return x, shape
    pshape = (*shape[:2], *(s + 2 * p for s, p in zip(shape[2:], padding)))
    pads = [[0, 0], [0, 0]] + [[int(p), int(p)] for p in padding]
    return e.op("pad", [x], pshape, {"pads": pads, "value": float(value)}), pshape


def _stacked(e: _Emit, wins: list[str], shape: tuple[int, ...], out_sp: Sequence[int]) -> str:
    """``[B, C, KK, *So]`` from the windows (a reshape when there is one window)."""
    st = (*shape[:2], len(wins), *out_sp)
    if len(wins) == 1:
        return e.op("reshape", wins, st, {"shape": list(st)}, tag="im2col")
    return e.op("stack", wins, st, {"axis": 2}, tag="im2col")


def conv_ops(graph: Graph, base: str, x: str, w: str, bias: str | None, out: str, *,
             stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
             groups: int, new_const: Callable[[str, tuple[int, ...], np.ndarray | None], str]
             ) -> list[Op]:
    """IR ops computing ``out = conv(x, w, bias)`` by im2col + ``linear`` (module doc).
    ``new_const(name, shape, data)`` adds a constant tensor (data None: a shape-only weight)."""
    xs, ws, os_ = (graph.tensors[n].shape for n in (x, w, out))
    e = _Emit(graph, base, graph.tensors[out].format)
    bsz, c = xs[:2]
    o, cg, kernel = ws[0], ws[1], ws[2:]
    out_sp = os_[2:]
    og, kk, p = o // groups, int(np.prod(kernel)), int(np.prod(out_sp))
    xp, pshape = _padded(e, x, xs, padding, 0.0)
    wdata = graph.tensors[w].data
    bdata = None if bias is None else graph.tensors[bias].data
    parts = []
    for gi in range(groups):
        src, sshape = xp, pshape
        if groups > 1:
            sshape = (pshape[0], cg, *pshape[2:])
            src = e.op("slice", [xp], sshape, {"axis": 1, "start": gi * cg,
                                               "stop": (gi + 1) * cg, "step": 1}, tag="group")
        col = _stacked(e, _windows(e, src, sshape, kernel, stride, dilation, out_sp), sshape,
                       out_sp)
        col = e.op("reshape", [col], (bsz, cg * kk, p), {"shape": [bsz, cg * kk, p]})
        col = e.op("permute", [col], (bsz, p, cg * kk), {"axes": [0, 2, 1]})
        col = e.op("reshape", [col], (bsz * p, cg * kk), {"shape": [bsz * p, cg * kk]})
        wsl = None if wdata is None else wdata[gi * og:(gi + 1) * og].reshape(og, cg * kk)
        w2 = new_const(f"{w}.im2col{gi if groups > 1 else ''}", (og, cg * kk), wsl)
        ins = [col, w2]
        if bias is not None:
            ins.append(bias if groups == 1 else new_const(
                f"{bias}.group{gi}", (og,), None if bdata is None else bdata[gi * og:(gi + 1) * og]))
        y = e.op("linear", ins, (bsz * p, og), {}, tag="gemm")
        y = e.op("reshape", [y], (bsz, p, og), {"shape": [bsz, p, og]})
        y = e.op("permute", [y], (bsz, og, p), {"axes": [0, 2, 1]})
        parts.append(y)
    if groups > 1:
        y = e.op("concat", parts, (bsz, o, p), {"axis": 1})
    e.op("reshape", [y], os_, {"shape": list(os_)}, out=out)
    return e.ops


def pool_ops(graph: Graph, base: str, x: str, out: str, *, kind: str, kernel: Sequence[int],
             stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int]) -> list[Op]:
    """IR ops of a max (``kind="max"``) or average (``"avg"``) pooling (module doc)."""
    xs, os_ = graph.tensors[x].shape, graph.tensors[out].shape
    e = _Emit(graph, base, graph.tensors[out].format)
    xp, pshape = _padded(e, x, xs, padding, -np.inf if kind == "max" else 0.0)
    col = _stacked(e, _windows(e, xp, pshape, kernel, stride, dilation, os_[2:]), pshape, os_[2:])
    e.op("reduce_max" if kind == "max" else "reduce_mean", [col], os_,
         {"axes": [2], "keepdim": False}, out=out)
    return e.ops
