"""Lowering of the LLM flow: an IR Graph (after the ``llm`` passes) -> :class:`~.program.Program`,
one op -> engine tasks (entry: :func:`tilewright.compiler.compile` with ``flow="llm"``).

=================  =======================================================================
IR op              Program tasks
=================  =======================================================================
linear             ``bgemm`` (a = x, b = weight [N, K] with ``transpose_b``; x's leading dims
                   fold into M), then ``add`` of the bias, ``relu`` if fused
matmul             ``bgemm`` (batched, broadcast)
attention          ``attention`` (blocks from :func:`~.llm_tiling.plan_attention_blocks`)
scan               ``scan`` (chunks from :func:`~.llm_tiling.plan_scan_chunks`)
grouped_gemm       ``grouped_gemm`` (run-time counts; ``example_counts`` filled later)
topk               ``topk_indices`` + ``gather`` of the values (the indices ranked on a softmax's
                   input when the values are that softmax: :func:`_order_source`)
transpose          ``permute`` (1, 0)
VECTOR_OPS names   one ``vector`` task, attrs unchanged
=================  =======================================================================

Decode as hardware runs it (:func:`_is_view`, :func:`_kv_append`, :func:`_gqa_fold`):

* **Views are free.** ``reshape``/``expand``/``slice``/``select``, and a ``permute`` that only
  moves size-1 axes, re-describe memory the next task reads: they get ``attrs["view"] = True``
  and the Report charges them no bytes and no cycles (:data:`VIEW_KINDS`).
* **KV append.** A ``concat`` whose first input is a graph input (the K or V cache, living in
  DRAM) is the append of the new tokens: ``attrs["append"] = True``; it moves only the new
  tokens (read them, write them into the cache's slots). When the attention reads that cache
  through a quantized format, the cache is held in that format (quantized once, when each token
  was appended): the attention operand's ``quantize`` task carries ``cached_elements`` = the
  elements already stored, and is charged for the new tokens only. Cost convention: a static
  per-tensor KV scale, as vLLM's fp8 KV cache (``k_scale``/``v_scale`` per layer); the functional
  model re-quantizes the whole cache with one run-time scale, which equals it whenever the
  stored scale covers the new token's amax. MX formats keep this only for K (blocks along the
  head dim, one token per block row); V's blocks run along the tokens and are re-quantized.
* **GQA.** An attention with one query row per head (decode, S = 1) whose K/V broadcast over
  the query heads of a group (K batch axis of size 1 where q's is ``rep``) is run with the
  group's ``rep`` query heads as the rows of one query block (free reshapes before and after),
  so each KV head is read once per group, not once per query head.

Every ``bgemm`` gets its mapping (tile sizes, loop order, dataflow) from
:func:`~.gemm_mapper.map_gemm` (fewest cycles under the buffers, double buffered; K may be
split — the K tiles accumulate into one accumulator tile, see the Program's ``bgemm``), recorded
on the task.
Operand format ``fmt`` (``fp32`` by default) is recorded on every GEMM-like task with its
accumulator and ``k_block`` (the array's rows); for any other format the operands are quantized
first (:mod:`~.operand_formats`: run-time ``quantize`` tasks for activations, compile-time codes
and scales for weights) and the ArchSpec is the one built for ``fmt``
(:func:`~.operand_formats.arch_for_format`). Element bytes of ``fmt`` drive the mapping.
"""

from __future__ import annotations

from typing import Any, Hashable

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.gemm_mapper import (GemmOp, MapperResult, map_gemm, map_gemms,
                                             mapper_arch_key)
from tilewright.compiler.ir import Graph, Op
from tilewright.compiler.layout import DoesNotFit
from tilewright.compiler.llm_tiling import plan_attention_blocks, plan_scan_chunks
from tilewright.compiler.operand_formats import OperandQuantizer, accumulator_of, arch_for_format
from tilewright.compiler.program import (VECTOR_OPS, AttentionTask, BgemmTask, GroupedGemmTask,
                                         Program, QuantizeTask, ScanTask, TensorInfo, VectorTask)
from tilewright.errors import UserError
from tilewright.formats import FORMATS

__all__ = ["lower_graph", "ELEM_BYTES", "LoweringError", "map_gemm_cached", "map_gemms_cached"]

#: operand element bytes per format name, from the formats registry's bits (MX formats: 8-bit
#: elements; their 1-byte scale per 32 elements is not counted here)
ELEM_BYTES: dict[str, int] = {name: f.bits // 8 for name, f in FORMATS.items()}

_NOT_LOWERED = {"einsum", "addmm", "qlinear"}

#: IR op kinds that only re-describe memory (no data moves): lowered as vector tasks with
#: ``attrs["view"] = True``, which the Report costs at 0 bytes and 0 cycles
VIEW_KINDS = ("reshape", "expand", "slice", "select")


def _is_view(g: Graph, op: Op) -> bool:
    """True if ``op`` is a view: a :data:`VIEW_KINDS` op, or a ``permute`` that keeps the order
    of every axis longer than 1 (it only moves size-1 axes, so the bytes are in the same order)."""
    if op.kind in VIEW_KINDS:
        return True
    if op.kind == "permute":
        shape = g.tensors[op.inputs[0]].shape
        moved = [a % len(shape) for a in op.attrs["axes"] if shape[a] != 1]
        return moved == sorted(moved)
    return False


def _kv_append(g: Graph, op: Op) -> bool:
    """True if ``op`` appends new tokens to a cache that is a graph input (a ``concat`` of two
    tensors whose first is a graph input: the K or V cache in DRAM)."""
    return op.kind == "concat" and len(op.inputs) == 2 and op.inputs[0] in g.inputs


def _producers(g: Graph) -> dict[str, Op]:
    return {o: op for op in g.ops for o in op.outputs}


def _order_source(prod: dict[str, Op], x: str, axis: int, shape) -> str:
    """What a ``topk`` over ``x`` ranks: the softmax's input when ``x`` is a softmax over the
    same axis (softmax is strictly increasing along it, so the indices are the same in exact
    arithmetic), else ``x``. A MoE router's top-k then chooses its experts from its logits, not
    from probabilities a quantized softmax (the vector unit's Q8.8: steps of 2**-8) can tie."""
    op = prod.get(x)
    nd = len(shape[x])
    if op is not None and op.kind == "softmax" and op.attrs.get("axis") % nd == axis % nd:
        return op.inputs[0]
    return x


def _cached_elements(g: Graph, prod: dict[str, Op], x: str) -> int:
    """Elements of ``x`` that are already stored in the cache: ``x`` reached (through views)
    from a KV append whose cache holds ``c`` of the concat's ``n`` elements -> ``numel(x)·c/n``;
    0 if ``x`` is not a cache."""
    name = x
    op = prod.get(name)
    while op is not None and op.kind != "concat" and _is_view(g, op):
        name = op.inputs[0]
        op = prod.get(name)
    if op is None or not _kv_append(g, op):
        return 0
    cached = int(np.prod(g.tensors[op.inputs[0]].shape, dtype=np.int64))
    total = int(np.prod(g.tensors[op.outputs[0]].shape, dtype=np.int64))
    return int(np.prod(g.tensors[x].shape, dtype=np.int64)) * cached // total


def _gqa_fold(qshape: tuple[int, ...], kshape: tuple[int, ...], s_len: int, t_len: int,
              offset: int | None) -> int | None:
    """Group size ``rep`` if the attention can run a KV group's query heads as the rows of one
    query block: one query row (S = 1) that sees every key, q's last batch axis (``qshape``,
    ``kshape``: batch shapes) ``rep > 1`` where K's is 1 (K/V broadcast over the group).
    Else None."""
    if s_len != 1 or not qshape or len(kshape) != len(qshape):
        return None
    if offset is not None and offset < t_len - 1:
        return None
    rep = qshape[-1]
    return rep if rep > 1 and kshape[-1] == 1 else None


class LoweringError(UserError, ValueError):
    """An IR op the LLM lowering cannot turn into tasks (names the op and its source line)."""


_MAP_CACHE: dict[tuple, MapperResult] = {}


def map_gemm_cached(arch: ArchSpec, m: int, k: int, n: int, *, batch: int = 1,
                    elem_bytes: int = 4, arch_key: Hashable | None = None,
                    name: str = "gemm") -> MapperResult:
    """:func:`~.gemm_mapper.map_gemm` of ``batch`` x M x K x N with ``elem_bytes`` operands and fp32
    results on ``arch`` (its own dataflow, double buffered, K split allowed; ``prune=True``: the
    same best mapping and cost, its ``space`` holding only the tilings that could be best),
    memoized by shape and the ArchSpec facts the mapper reads (``arch_key``: default
    :func:`~.gemm_mapper.mapper_arch_key`; ``arch.content_hash()`` is a finer key; bounded cache).
    Raises :class:`DoesNotFit` if no tiling fits."""
    key = (arch_key or mapper_arch_key(arch), m, k, n, batch, elem_bytes)
    hit = _MAP_CACHE.get(key)
    if hit is None:
        try:
            hit = map_gemm(GemmOp(name, m, k, n, batch=batch, elem_bytes=elem_bytes, out_bytes=4),
                           arch, prune=True)
        except ValueError as exc:
            raise DoesNotFit(str(exc)) from None
        if len(_MAP_CACHE) > 4096:
            _MAP_CACHE.clear()
        _MAP_CACHE[key] = hit
    return hit


def map_gemms_cached(arch: ArchSpec, shapes: list[tuple[int, int, int, int]], *,
                     elem_bytes: int = 4, arch_key: Hashable | None = None) -> None:
    """Fill :func:`map_gemm_cached`'s memo for every ``(m, k, n, batch)`` of ``shapes`` at once
    (:func:`~.gemm_mapper.map_gemms`: one vectorized pass, the same results). Shapes where no tiling
    fits are left out (:func:`map_gemm_cached` raises for them)."""
    key = arch_key or mapper_arch_key(arch)
    todo = list(dict.fromkeys(s for s in shapes if (key, *s, elem_bytes) not in _MAP_CACHE))
    if not todo:
        return
    ops = [GemmOp("gemm", m, k, n, batch=b, elem_bytes=elem_bytes, out_bytes=4)
           for m, k, n, b in todo]
    if len(_MAP_CACHE) + len(todo) > 4096:
        _MAP_CACHE.clear()
    for s, res in zip(todo, map_gemms(ops, arch)):
        if res is not None:
            _MAP_CACHE[(key, *s, elem_bytes)] = res


def _gemm_shape(g: Graph, op: Op) -> tuple[int, int, int, int] | None:
    """``(m, k, n, batch)`` of the ``bgemm`` a linear or matmul op lowers to, else None."""
    if op.kind not in ("linear", "matmul"):
        return None
    shape = {x: g.tensors[x].shape for x in op.inputs + op.outputs}
    if op.kind == "linear":
        x, w = op.inputs[:2]
        n, k = shape[w]
        return int(np.prod(shape[x][:-1], dtype=np.int64)), int(k), int(n), 1
    if op.kind == "matmul":
        a, w = op.inputs
        (m, k), n = shape[a][-2:], shape[w][-1]
        if len(shape[w]) == 2:
            return int(np.prod(shape[a][:-1], dtype=np.int64)), int(k), int(n), 1
        batch = tuple(shape[op.outputs[0]][:-2])
        return int(m), int(k), int(n), int(np.prod(batch, dtype=np.int64)) if batch else 1
    return None


class _Builder:
    def __init__(self, graph: Graph, fmt: str, granularity: str, arch_key: Hashable) -> None:
        self.graph = graph
        self.arch_key = arch_key
        self.tensors: dict[str, TensorInfo] = {}
        self.tasks: list[Any] = []
        self.made_by: dict[str, str] = {}
        self._prod: dict[str, Op] | None = None
        self._cached = 0
        self.quant = OperandQuantizer(fmt, granularity, self.new, self._quantize_task)

    def _quantize_task(self, x: str, codes: str, scale: str | None, gran: str, axis: int,
                       source: str) -> None:
        outs = (codes, scale) if scale else (codes,)
        prod = self.producers.get(x)        # named after the module that made x (op names)
        name = f"{prod.name}{codes[len(x):]}" if prod is not None and codes.startswith(x) else codes
        self.add(QuantizeTask, outs, (x,), name=f"{name}.quantize", x=x, out=codes,
                 scale_out=scale, format=self.quant.fmt.name, granularity=gran, axis=axis,
                 source=source, cached_elements=self._cached)

    @property
    def producers(self) -> dict[str, Op]:
        """IR op producing each tensor (built once)."""
        if self._prod is None:
            self._prod = _producers(self.graph)
        return self._prod

    def act(self, x: str, axis: int, source: str, cached: int = 0) -> tuple[str, str | None]:
        """Operand ``x`` (run-time or constant tensor) quantized along ``axis``; ``cached``: its
        elements already held in the format (a KV cache, quantized when appended)."""
        t = self.graph.tensors.get(x)
        if t is not None and t.data is not None and len(t.shape) == 2 and self.quant.active:
            return self.quant.weight(x, t.shape, t.data, axis)
        shape = self.tensors[x].shape if x in self.tensors else self.graph.tensors[x].shape
        self.info(x)
        self._cached = cached
        try:
            return self.quant.activation(x, shape, axis, source)
        finally:
            self._cached = 0

    def weight(self, w: str, axis: int, stacked: bool = False) -> tuple[str, str | None]:
        t = self.graph.tensors[w]
        if not self.quant.active:
            return w, None
        return self.quant.weight(w, t.shape, t.data, axis, stacked=stacked)

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


def _gemm_fields(arch: ArchSpec, m: int, k: int, n: int, fmt: str, batch: int = 1,
                 name: str = "gemm", arch_key: Hashable | None = None) -> dict[str, Any]:
    """Mapping (:func:`map_gemm_cached`) and arithmetic fields of one GEMM-like task."""
    res = map_gemm_cached(arch, m, k, n, batch=batch, elem_bytes=ELEM_BYTES[fmt], name=name,
                          arch_key=arch_key)
    mp = res.mapping
    return {"tile_m": mp.m_t, "tile_n": mp.n_t, "tile_k": mp.k_t, "order": mp.order,
            "dataflow": mp.dataflow, **_arith(arch, fmt)}


def _arith(arch: ArchSpec, fmt: str) -> dict[str, Any]:
    te = arch.tensor_engine     # k per partial sum: the array's rows, or a tile engine's Tk
    return {"format": fmt, "acc": accumulator_of(fmt),
            "k_block": te.rows if te.kind == "systolic" else te.depth}


def _lower_op(b: _Builder, op: Op, arch: ArchSpec, fmt: str) -> None:
    g, src, name = b.graph, op.source, op.name
    shape = {x: g.tensors[x].shape for x in op.inputs + op.outputs}
    if op.kind == "linear":
        x, w = op.inputs[:2]
        out = op.outputs[0]
        m, k, n, _ = _gemm_shape(g, op)
        post = len(op.inputs) > 2 or op.attrs.get("relu", False)
        mm = b.new(f"{out}.mm", shape[out], "fp32") if post else out
        (xa, sa), (wb, sb) = b.act(x, -1, src), b.weight(w, 1)
        b.add(BgemmTask, (mm,), tuple(v for v in (xa, wb, sa, sb) if v), name=f"{name}.gemm",
              a=xa, b=wb, a_scale=sa, b_scale=sb, out=mm, m=m, k=k, n=n, transpose_b=True,
              source=src, **_gemm_fields(arch, m, k, n, fmt, name=name, arch_key=b.arch_key))
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
        m, k, n, nb = _gemm_shape(g, op)
        batch = () if len(shape[w]) == 2 else tuple(shape[out][:-2])
        (xa, sa), (wb, sb) = b.act(a, -1, src), b.act(w, -2, src)
        b.add(BgemmTask, (out,), tuple(v for v in (xa, wb, sa, sb) if v), name=name, a=xa, b=wb,
              a_scale=sa, b_scale=sb, out=out, batch=batch, m=m, k=k, n=n, source=src,
              **_gemm_fields(arch, m, k, n, fmt, batch=nb, name=name, arch_key=b.arch_key))
        return
    if op.kind == "attention":
        q, k, v = op.inputs
        out = op.outputs[0]
        s_len, d = shape[q][-2:]
        t_len = shape[k][-2]
        offset = op.attrs.get("causal_offset")
        rep = _gqa_fold(shape[q][:-2], shape[k][:-2], s_len, t_len, offset)
        att_out = out
        if rep is not None:         # the group's query heads as the rows of one query block
            fq = (*shape[q][:-3], 1, rep, d)
            q = b.new(f"{q}.gqa", fq, b.info(q).format)
            b.add(VectorTask, (q,), (op.inputs[0],), name=f"{name}.gqa_q", op="reshape",
                  inputs=(op.inputs[0],), out=q, attrs={"shape": list(fq), "view": True},
                  source=src)
            s_len, offset = rep, (None if offset is None else t_len - 1)
            att_out = b.new(f"{out}.gqa", (*shape[out][:-3], 1, rep, shape[out][-1]), "fp32")
        bq, bk = plan_attention_blocks(arch, s_len, t_len, d, ELEM_BYTES[fmt],
                                       causal_offset=offset,
                                       batch=int(np.prod(b.info(att_out).shape[:-2],
                                                         dtype=np.int64)))
        if fmt.startswith("mx") and bk < t_len and bk % 32:
            bk = min(t_len, 32)                 # whole 32-blocks of v along the key axis
        prod = b.producers
        (qc, qs) = b.act(q, -1, src)
        (kc, ks) = b.act(k, -1, src, cached=_cached_elements(g, prod, k))
        (vc, vs) = b.act(v, -2, src, cached=(0 if fmt.startswith("mx")
                                             else _cached_elements(g, prod, v)))
        b.add(AttentionTask, (att_out,), tuple(x for x in (qc, kc, vc, qs, ks, vs) if x),
              name=name, q=qc, k=kc, v=vc, q_scale=qs, k_scale=ks, v_scale=vs, out=att_out,
              batch=tuple(b.info(att_out).shape[:-2]), s=s_len, t=t_len, d=d,
              scale=op.attrs["scale"], causal_offset=offset, block_q=bq, block_kv=bk,
              source=src, **_arith(arch, fmt))
        if rep is not None:
            b.add(VectorTask, (out,), (att_out,), name=f"{name}.gqa_out", op="reshape",
                  inputs=(att_out,), out=out, attrs={"shape": list(shape[out]), "view": True},
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
        (xa, sa), (wb, sb) = b.act(x, -1, src), b.weight(w, 1 if tb else 0, stacked=True)
        b.add(GroupedGemmTask, (out,), tuple(v for v in (xa, wb, counts, sa, sb) if v),
              name=name, a=xa, b=wb, a_scale=sa, b_scale=sb, counts=counts, out=out,
              rows=shape[x][0], experts=e, k=k, n=n, transpose_b=tb, source=src,
              **_arith(arch, fmt))
        return
    if op.kind == "topk":
        vals, idx = op.outputs
        choice = _order_source(b.producers, op.inputs[0], op.attrs["axis"], shape)
        b.add(VectorTask, (idx,), (choice,), name=f"{name}.indices", op="topk_indices",
              inputs=(choice,), out=idx, attrs={k: op.attrs[k] for k in ("k", "axis")},
              source=src)
        b.add(VectorTask, (vals,), (op.inputs[0], idx), name=f"{name}.values", op="gather",
              inputs=(op.inputs[0], idx), out=vals, attrs={"axis": op.attrs["axis"]}, source=src)
        return
    if op.kind == "transpose":
        b.add(VectorTask, tuple(op.outputs), tuple(op.inputs), name=name, op="permute",
              inputs=tuple(op.inputs), out=op.outputs[0], attrs={"axes": [1, 0]}, source=src)
        return
    if op.kind in VECTOR_OPS and op.kind not in ("requantize", "bias_add"):
        attrs = dict(op.attrs)
        if _is_view(g, op):
            attrs["view"] = True
        elif _kv_append(g, op):
            attrs["append"] = True
        b.add(VectorTask, tuple(op.outputs), tuple(op.inputs), name=name, op=op.kind,
              inputs=tuple(op.inputs), out=op.outputs[0], attrs=attrs, source=src)
        return
    raise LoweringError(f"op {op.kind} ({op.name}) at {src or '<unknown source>'} has no lowering "
                        f"to engine tasks" + (" (an einsum the MoE pass did not match)"
                                              if op.kind == "einsum" else ""))


def lower_graph(graph: Graph, arch: ArchSpec, *, fmt: str = "fp32", granularity: str = "channel",
                name: str | None = None) -> Program:
    """Lower ``graph`` (after the ``llm`` flow) to a checked Program for ``arch`` built for
    ``fmt`` (:func:`~.operand_formats.arch_for_format`); GEMM operands in ``fmt``, weights of
    int8/fp8 scaled per output ``channel`` or per ``tensor`` (``granularity``). Constants with
    values travel with the Program; value-less ones (meta device) are listed in
    ``meta["unknown_constants"]``."""
    if fmt not in ELEM_BYTES:
        raise ValueError(f"format {fmt!r}: known formats are {', '.join(ELEM_BYTES)}")
    arch = arch_for_format(arch, fmt)
    b = _Builder(graph, fmt, granularity, mapper_arch_key(arch))
    shapes = [sh for sh in (_gemm_shape(graph, op) for op in graph.ops) if sh is not None]
    map_gemms_cached(arch, shapes, elem_bytes=ELEM_BYTES[fmt], arch_key=b.arch_key)
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
    constants.update(b.quant.constants)
    unknown += b.quant.unknown
    meta = {"format": fmt, "accumulator": accumulator_of(fmt), "unknown_constants": unknown}
    if b.quant.fmt.scaling == "fp32":
        meta["weight_granularity"] = granularity
    prog = Program(name=name or graph.name, arch_hash=arch.content_hash(), tensors=b.tensors,
                   inputs=list(graph.inputs), outputs=list(graph.outputs), tasks=b.tasks,
                   meta=meta, constants=constants)
    prog.check()
    return prog
