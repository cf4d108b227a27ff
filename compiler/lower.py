"""Lowering of an (LLM-flow) IR Graph to a :class:`~.program.Program`: one op -> engine tasks.

=================  =======================================================================
IR op              Program tasks
=================  =======================================================================
linear             ``bgemm`` (a = x, b = weight [N, K] with ``transpose_b``; x's leading dims
                   fold into M), then ``add`` of the bias, ``relu`` if fused
matmul             ``bgemm`` (batched, broadcast)
attention          ``attention`` (blocks from :func:`~.tiling.plan_attention_blocks`)
scan               ``scan`` (chunks from :func:`~.tiling.plan_scan_chunks`)
grouped_gemm       ``grouped_gemm`` (run-time counts; ``example_counts`` filled later)
topk               ``topk_indices`` + ``gather`` of the values
transpose          ``permute`` (1, 0)
VECTOR_OPS names   one ``vector`` task, attrs unchanged
=================  =======================================================================

Every GEMM gets its tiling from :func:`~.tiling.plan_gemm_tiles`. Operand ``fmt`` (``fp32`` by
default) is recorded on every GEMM-like task; the element bytes it implies drive tiling.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.ir import Graph, Op
from tilewright.compiler.program import (VECTOR_OPS, AttentionTask, BgemmTask, GroupedGemmTask,
                                         Program, ScanTask, TensorInfo, VectorTask)
from tilewright.compiler.tiling import plan_attention_blocks, plan_gemm_tiles, plan_scan_chunks

__all__ = ["lower_graph", "ELEM_BYTES", "LoweringError"]

#: operand element bytes per format name (MX formats: 8-bit elements; their 1-byte scale per
#: 32 elements is not counted here)
ELEM_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "int8": 1, "fp8-e4m3": 1, "fp8-e5m2": 1,
                              "mxint8": 1, "mxfp8": 1, "mxfp8-e5m2": 1}

_NOT_LOWERED = {"einsum", "addmm", "qlinear"}


class LoweringError(ValueError):
    """An IR op the LLM lowering cannot turn into tasks (names the op and its source line)."""


class _Builder:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.tensors: dict[str, TensorInfo] = {}
        self.tasks: list[Any] = []
        self.made_by: dict[str, str] = {}

    def info(self, name: str) -> TensorInfo:
        if name not in self.tensors:
            t = self.graph.tensors[name]
            self.tensors[name] = TensorInfo(name=name, shape=t.shape, format=t.format)
        return self.tensors[name]

    def new(self, name: str, shape: tuple[int, ...], fmt: str) -> str:
        self.tensors[name] = TensorInfo(name=name, shape=tuple(int(d) for d in shape), format=fmt)
        return name

    def add(self, cls: type, outs: tuple[str, ...], reads: tuple[str, ...], **fields: Any) -> None:
        for x in reads + outs:
            self.info(x)
        deps = tuple(dict.fromkeys(self.made_by[x] for x in reads if x in self.made_by))
        task = cls(deps=deps, **fields)
        self.tasks.append(task)
        for o in outs:
            self.made_by[o] = task.name


def _gemm_fields(arch: ArchSpec, m: int, k: int, n: int, fmt: str) -> dict[str, int]:
    tm, tn, tk = plan_gemm_tiles(arch, m, k, n, ELEM_BYTES[fmt])
    return {"tile_m": tm, "tile_n": tn, "tile_k": tk}


def _lower_op(b: _Builder, op: Op, arch: ArchSpec, fmt: str) -> None:
    g, src, name = b.graph, op.source, op.name
    shape = {x: g.tensors[x].shape for x in op.inputs + op.outputs}
    if op.kind == "linear":
        x, w = op.inputs[:2]
        out = op.outputs[0]
        n, k = shape[w]
        m = int(np.prod(shape[x][:-1], dtype=np.int64))
        post = len(op.inputs) > 2 or op.attrs.get("relu", False)
        mm = b.new(f"{out}.mm", shape[out], "fp32") if post else out
        b.add(BgemmTask, (mm,), (x, w), name=f"{name}.gemm", a=x, b=w, out=mm, m=m, k=k, n=n,
              transpose_b=True, format=fmt, source=src, **_gemm_fields(arch, m, k, n, fmt))
        if len(op.inputs) > 2:
            biased = b.new(f"{out}.bias", shape[out], "fp32") if op.attrs.get("relu") else out
            b.add(VectorTask, (biased,), (mm, op.inputs[2]), name=f"{name}.bias", op="add",
                  inputs=(mm, op.inputs[2]), out=biased, attrs={"format": "fp32"}, source=src)
            mm = biased
        if op.attrs.get("relu", False):
            b.add(VectorTask, (out,), (mm,), name=f"{name}.relu", op="relu", inputs=(mm,), out=out,
                  attrs={"format": "fp32"}, source=src)
        return
    if op.kind == "matmul":
        a, w = op.inputs
        out = op.outputs[0]
        (m, k), n = shape[a][-2:], shape[w][-1]
        if len(shape[w]) == 2:
            batch, m = (), int(np.prod(shape[a][:-1], dtype=np.int64))
        else:
            batch = tuple(shape[out][:-2])
        b.add(BgemmTask, (out,), (a, w), name=name, a=a, b=w, out=out, batch=batch, m=m, k=k, n=n,
              format=fmt, source=src, **_gemm_fields(arch, m, k, n, fmt))
        return
    if op.kind == "attention":
        q, k, v = op.inputs
        out = op.outputs[0]
        s_len, d = shape[q][-2:]
        t_len = shape[k][-2]
        bq, bk = plan_attention_blocks(arch, s_len, t_len, d, ELEM_BYTES[fmt])
        b.add(AttentionTask, (out,), (q, k, v), name=name, q=q, k=k, v=v, out=out,
              batch=tuple(shape[out][:-2]), s=s_len, t=t_len, d=d, scale=op.attrs["scale"],
              causal_offset=op.attrs.get("causal_offset"), block_q=bq, block_kv=bk, format=fmt,
              source=src)
        return
    if op.kind == "scan":
        a, bb, c, h0 = op.inputs
        y, h = op.outputs
        bt, length, di, n = shape[a]
        cl, cd = plan_scan_chunks(arch, length, di, n)
        b.add(ScanTask, (y, h), (a, bb, c, h0), name=name, a=a, b=bb, c=c, h0=h0, out=y,
              state_out=h, batch=bt, length=length, channels=di, state=n, chunk_l=cl, chunk_d=cd,
              source=src)
        return
    if op.kind == "grouped_gemm":
        x, w, counts = op.inputs
        out = op.outputs[0]
        tb = bool(op.attrs.get("transpose_b", False))
        e = shape[w][0]
        k, n = (shape[w][2], shape[w][1]) if tb else shape[w][1:]
        b.add(GroupedGemmTask, (out,), (x, w, counts), name=name, a=x, b=w, counts=counts, out=out,
              rows=shape[x][0], experts=e, k=k, n=n, transpose_b=tb, format=fmt, source=src)
        return
    if op.kind == "topk":
        vals, idx = op.outputs
        b.add(VectorTask, (idx,), (op.inputs[0],), name=f"{name}.indices", op="topk_indices",
              inputs=(op.inputs[0],), out=idx, attrs={k: op.attrs[k] for k in ("k", "axis")},
              source=src)
        b.add(VectorTask, (vals,), (op.inputs[0], idx), name=f"{name}.values", op="gather",
              inputs=(op.inputs[0], idx), out=vals, attrs={"axis": op.attrs["axis"]}, source=src)
        return
    if op.kind == "transpose":
        b.add(VectorTask, tuple(op.outputs), tuple(op.inputs), name=name, op="permute",
              inputs=tuple(op.inputs), out=op.outputs[0], attrs={"axes": [1, 0]}, source=src)
        return
    if op.kind in VECTOR_OPS and op.kind not in ("requantize", "bias_add"):
        b.add(VectorTask, tuple(op.outputs), tuple(op.inputs), name=name, op=op.kind,
              inputs=tuple(op.inputs), out=op.outputs[0], attrs=dict(op.attrs), source=src)
        return
    raise LoweringError(f"op {op.kind} ({op.name}) at {src or '<unknown source>'} has no lowering "
                        f"to engine tasks" + (" (an einsum the MoE pass did not match)"
                                              if op.kind == "einsum" else ""))


def lower_graph(graph: Graph, arch: ArchSpec, *, fmt: str = "fp32", name: str | None = None
                ) -> Program:
    """Lower ``graph`` (after the ``llm`` flow) to a checked Program for ``arch``; GEMM operands in
    ``fmt``. Constants with values travel with the Program; value-less ones (meta device) are
    listed in ``meta["unknown_constants"]``."""
    if fmt not in ELEM_BYTES:
        raise ValueError(f"format {fmt!r}: known formats are {', '.join(ELEM_BYTES)}")
    b = _Builder(graph)
    for x in graph.inputs:
        b.info(x)
    for op in graph.ops:
        _lower_op(b, op, arch, fmt)
    constants, unknown = {}, []
    for n in b.tensors:
        t = graph.tensors.get(n)
        if t is not None and t.is_const:
            if t.data is None:
                unknown.append(n)
            else:
                constants[n] = np.ascontiguousarray(t.data)
    prog = Program(name=name or graph.name, arch_hash=arch.content_hash(), tensors=b.tensors,
                   inputs=list(graph.inputs), outputs=list(graph.outputs), tasks=b.tasks,
                   meta={"format": fmt, "unknown_constants": unknown}, constants=constants)
    prog.check()
    return prog
