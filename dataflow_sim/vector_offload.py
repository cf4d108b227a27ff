"""Run a Program's vector tasks in the vector unit's arithmetic: which tasks, how, and a record.

:class:`VectorUnitOps` is a hook for :func:`tilewright.dataflow_sim.functional.vector_unit_ops`.
For each ``vector`` task the accelerator's vector engine implements it builds a
:class:`~tilewright.compiler.vector_codegen.VectorKernel`, converts the fp32 inputs to raw Q8.8
(:func:`~tilewright.dataflow_sim.vector_numerics.to_fixed`: round half to even, saturating at
±128), computes the kernel bit-exactly on the instruction-level model
(:func:`~tilewright.dataflow_sim.vector_isa.kernel_reference`) and returns the result as fp32
(raw / 256). Every call is recorded (kernel, raw operands, raw result) so the same kernels can run
on the RTL and be replayed (:class:`ReplayVectorUnit`).

Tasks taken (all fp32 in and out; everything else stays on the functional model's fp32):

============  ==========================================================================
task op       kernel
============  ==========================================================================
exp, rsqrt,   elementwise, the unit's function of the same name
silu,
softplus
neg           elementwise ``neg``: the unit's ``mul`` by the -1.0 constant word (broadcast);
              exact, but -128.0 (raw -32768) gives 32767 raw (+128.0 saturates)
copy          ``copy``: an fp32 tensor's bits as int32 lanes, ``LOAD_V`` then ``STORE_V``
              through the vector buffer (no VECTOR): bit-exact, no Q8.8 rounding
add, sub,     elementwise on the broadcast operands (a scalar operand is broadcast too,
mul           on its side: ``1 - x`` is sub(1, x)); sub is the unit's opcode 13, sat(a - b)
pow           exponent 2 only (a norm's square): ``square``, the unit's ``mul`` of the
              operand by itself (its words loaded once); other exponents stay fp32
softmax       row softmax over the last axis (rows of at most
              :data:`~tilewright.compiler.vector_codegen.SOFTMAX_MAX_ROW` elements; longer
              rows stay fp32)
reduce_sum,   row ``sum`` / ``rmax`` over the last axis only (``sum`` returns Q24.8, exact
reduce_max    in fp32 up to 2**24)
reduce_mean   row ``mean`` over the last axis only (a norm's mean: ``sum`` then ``rescale`` by
              1/n, Q8.8 rounded half up; rows of at most
              :data:`~tilewright.compiler.vector_codegen.MEAN_MAX_ROW` elements)
take_rows     rows of an fp32 2-D table, the table's fp32 bits as int32 lanes, fetched by
              ``LOAD_VI``: bit-exact. One index (a decode step's embedding lookup):
              ``gather``, the index in the index register the host sets; several ids of an
              embedding lookup (the prefill's prompt): ``lookup``, the ids written to
              external memory and each loaded into the register by ``LOAD_IDX`` (more ids
              than one instruction memory of ``LOAD_IDX``/``LOAD_VI`` pairs holds stay on the
              host; so do other gathers of several rows, e.g. MoE's dispatch)
quantize      the ``quantize`` task (kind) of an fp32 tensor to int8 codes with one scale
(task kind)   per tensor (granularity ``tensor``): ``qshift`` over the whole tensor (Q8.8),
              then ``requant`` by 1 and that shift ``k`` — codes in -127..127, the scale
              ``2**(k - 8)`` (fp32, exact; not :func:`tilewright.formats.quantize`'s
              ``amax / 127``: its step is under twice that, see
              :mod:`~tilewright.dataflow_sim.vector_numerics`). Channel and block (MX)
              granularities, other formats and tensors larger than one vector-buffer chunk
              (:class:`~tilewright.compiler.layout.DoesNotFit`) stay on the host
scan          the ``scan`` task (chunked selective scan) on the scan unit: a quantised to
(task kind)   unsigned Q0.16, b, c, h0 to Q16.16
              (:func:`~tilewright.dataflow_sim.scan_numerics.to_a_code` /
              ``to_h_code``), one SCAN per channel (state size N at most the vector lanes;
              a larger N stays fp32); y and the final state dequantised to fp32 — the
              arithmetic of :func:`~tilewright.dataflow_sim.scan_numerics.scan_task_fixed`
============  ==========================================================================

:func:`argmax_record` runs the ``argmax`` of a fp32 vector that no Program task holds — the next
token of ``generate`` over the LM head's logits — on the unit: the values become int32 order keys
(:func:`~tilewright.dataflow_sim.vector_numerics.order_keys`, equal keys for equal values) and
one ``row`` ``argmax`` kernel gives the index, the lowest on ties (``torch.argmax``'s rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import CodegenError
from tilewright.compiler.program import QuantizeTask, ScanTask, VectorTask
from tilewright.compiler.layout import DoesNotFit
from tilewright.compiler.vector_codegen import SOFTMAX_MAX_ROW, VectorKernel
from tilewright.dataflow_sim import scan_numerics as sn
from tilewright.dataflow_sim.vector_isa import kernel_reference
from tilewright.dataflow_sim.vector_numerics import order_keys, to_fixed

__all__ = ["VectorUnitOps", "ReplayVectorUnit", "OffloadRecord", "OFFLOAD_OPS", "kernel_for",
           "argmax_record"]

_UNARY = ("exp", "rsqrt", "silu", "softplus", "neg")
_BINARY = ("add", "sub", "mul")
_ROW = {"softmax": "softmax", "reduce_sum": "sum", "reduce_mean": "mean", "reduce_max": "rmax"}
#: Program vector ops (and the scan task) the vector engine takes (see the module table)
OFFLOAD_OPS = _UNARY + _BINARY + ("pow",) + tuple(_ROW) + ("take_rows", "copy", "scan",
                                                              "quantize")
#: the task kinds besides ``vector`` that the hook is offered (their output is a pair)
_PAIR_TASKS = (ScanTask, QuantizeTask)


@dataclass(frozen=True)
class OffloadRecord:
    """One offloaded task: its kernel, raw operands (Q8.8; scan: codes) and the raw result
    (scan: the pair y, final state)."""

    task: str
    kernel: VectorKernel
    operands: tuple[np.ndarray, ...]
    result: object
    out_shape: tuple[int, ...]

    def same_result(self, other) -> bool:
        """``other`` equals this record's raw result, bit for bit."""
        mine = self.result if isinstance(self.result, tuple) else (self.result,)
        theirs = other if isinstance(other, tuple) else (other,)
        return len(mine) == len(theirs) and all(np.array_equal(np.asarray(x), np.asarray(y))
                                                for x, y in zip(mine, theirs))

    def as_output(self, raw):
        """A raw result (this record's or the RTL's) as the task's fp32 output."""
        if self.kernel.op == "argmax":
            return np.asarray(raw, np.int64).reshape(self.out_shape)
        if self.kernel.kind in ("gather", "lookup", "copy"):   # int32 lanes: fp32 bits
            return np.asarray(raw, np.int64).astype(np.int32).view(np.float32).reshape(
                self.out_shape)
        if self.kernel.kind == "scan":
            y, h = raw
            return (sn.from_h_code(y).astype(np.float32), sn.from_h_code(h).astype(np.float32))
        if self.kernel.kind == "quantize":   # (int8 codes, the fp32 scale 2**(k - 8))
            codes, k = raw
            scale = np.full((1,) * len(self.out_shape), np.ldexp(np.float32(1), int(k[0]) - 8),
                            np.float32)
            return np.asarray(codes, np.int64).astype(np.int8).reshape(self.out_shape), scale
        return (np.asarray(raw, np.int64) / 256.0).astype(np.float32).reshape(self.out_shape)


def _is_f32(x: np.ndarray) -> bool:
    return np.asarray(x).dtype == np.float32


def kernel_for(task: VectorTask, ins: list[np.ndarray], name: str,
               ops: tuple[str, ...] = OFFLOAD_OPS):
    """(kernel, raw operands, output shape) for ``task`` on inputs ``ins``, or None when the
    vector engine does not take it (module table)."""
    if isinstance(task, ScanTask):
        return _scan_kernel(ins, name, ops)
    if isinstance(task, QuantizeTask):
        return _quantize_kernel(task, ins, name, ops)
    op, at = task.op, task.attrs
    if op not in ops or at.get("format", "fp32") != "fp32":
        return None
    if op == "take_rows":
        x, idx = np.asarray(ins[0]), np.asarray(ins[1]).reshape(-1)
        if not _is_f32(x) or x.ndim != 2 or x.size == 0 or idx.size == 0:
            return None
        if idx.size > 1 and at.get("lookup") != "embedding":   # e.g. MoE dispatch: host
            return None
        kernel = (VectorKernel(name, "gather", "gather", x.shape) if idx.size == 1 else
                  VectorKernel(name, "lookup", "lookup", (idx.size, *x.shape)))
        return (kernel, (x.view(np.int32).astype(np.int64), idx.astype(np.int64)),
                (*np.asarray(ins[1]).shape, x.shape[1]))
    if op == "copy":
        x = np.asarray(ins[0])
        if not _is_f32(x) or x.size == 0:
            return None
        shape = x.shape or (1,)                  # a 0-d tensor as one element
        bits = np.ascontiguousarray(x).view(np.int32).astype(np.int64).reshape(shape)
        return VectorKernel(name, "copy", "copy", shape), (bits,), x.shape
    if op in _UNARY or op == "pow":
        x = np.asarray(ins[0])
        if not _is_f32(x) or x.size == 0:
            return None
        if op == "pow":
            e = at.get("exponent")
            if isinstance(e, bool) or not isinstance(e, (int, float)) or e != 2:
                return None
            op = "square"
        return VectorKernel(name, "elementwise", op, x.shape), (to_fixed(x),), x.shape
    if op in _BINARY:
        if len(ins) == 2:
            lhs, rhs = ins
        elif "scalar" in at:
            lhs, rhs = ins[0], np.float32(at["scalar"])
            if at.get("scalar_first"):
                lhs, rhs = rhs, lhs
        else:
            return None
        if not (_is_f32(lhs) and _is_f32(rhs)):
            return None
        shape = np.broadcast_shapes(np.shape(lhs), np.shape(rhs))
        if not shape or int(np.prod(shape)) == 0:
            return None
        a, b = (np.broadcast_to(v, shape) for v in (lhs, rhs))
        return VectorKernel(name, "elementwise", op, shape), (to_fixed(a), to_fixed(b)), shape
    if op in _ROW:
        x = np.asarray(ins[0])
        if not _is_f32(x) or x.ndim == 0 or x.size == 0:
            return None
        if op == "softmax":
            if at.get("axis") not in (-1, x.ndim - 1) or x.shape[-1] > SOFTMAX_MAX_ROW:
                return None
            out_shape = x.shape
        else:
            axes = [a % x.ndim for a in at.get("axes", ())]
            if axes != [x.ndim - 1]:
                return None
            out_shape = x.shape[:-1] + ((1,) if at.get("keepdim") else ())
        rows = x.reshape(-1, x.shape[-1])
        return (VectorKernel(name, "row", _ROW[op], rows.shape), (to_fixed(rows),),
                tuple(out_shape))
    return None


def argmax_record(x: np.ndarray, arch: ArchSpec, name: str) -> OffloadRecord:
    """The index of the largest element of fp32 ``x`` (flattened; the lowest on ties) on the
    vector unit of ``arch``: one ``row`` ``argmax`` kernel over ``x``'s order keys, computed on
    the instruction-level model; the record's ``result`` is ``[index]`` and ``task`` is
    ``name`` (a name no Program task has, so a replay never answers a task with it)."""
    keys = order_keys(np.asarray(x).reshape(1, -1))
    kernel = VectorKernel(name, "row", "argmax", keys.shape)
    raw = kernel_reference(kernel, arch, keys)
    return OffloadRecord(name, kernel, (keys,), raw, (1,))


def _quantize_kernel(task: QuantizeTask, ins: list[np.ndarray], name: str,
                     ops: tuple[str, ...]):
    if "quantize" not in ops or task.format != "int8" or task.granularity != "tensor":
        return None
    x = np.asarray(ins[0])
    if not _is_f32(x) or x.ndim == 0 or x.size == 0 or not np.isfinite(x).all():
        return None
    return VectorKernel(name, "quantize", "quantize", x.shape), (to_fixed(x),), x.shape


def _scan_kernel(ins: list[np.ndarray], name: str, ops: tuple[str, ...]):
    if "scan" not in ops:
        return None
    a, b, c, h0 = (np.asarray(x) for x in ins)
    if not all(_is_f32(x) for x in (a, b, c, h0)) or a.ndim != 4:
        return None
    ops_ = (sn.to_a_code(a), sn.to_h_code(b), sn.to_h_code(c), sn.to_h_code(h0))
    return VectorKernel(name, "scan", "scan", a.shape), ops_, a.shape[:3]


@dataclass
class VectorUnitOps:
    """Hook: the tasks of :data:`OFFLOAD_OPS` (or ``ops``) in the vector unit's arithmetic on
    ``arch`` (needs a ``vector_unit``); ``records`` lists what it computed, in order."""

    arch: ArchSpec
    ops: tuple[str, ...] = OFFLOAD_OPS
    records: list[OffloadRecord] = field(default_factory=list)

    def __post_init__(self):
        if self.arch.vector_unit is None:
            raise ValueError(f"{self.arch.name} has no vector_unit: nothing to run the vector "
                             "ops on (add a vector_unit section to the ArchSpec)")
        bad = sorted(set(self.ops) - set(OFFLOAD_OPS))
        if bad:
            raise ValueError(f"vector ops {bad}: the vector engine takes {', '.join(OFFLOAD_OPS)}")

    def __call__(self, task, ins):
        if not isinstance(task, (VectorTask, *_PAIR_TASKS)):
            return None
        made = kernel_for(task, ins, f"v{len(self.records)}_{task.name}", self.ops)
        if made is None:
            return None
        kernel, operands, out_shape = made
        try:
            raw = kernel_reference(kernel, self.arch, *operands)
        except (DoesNotFit, CodegenError):   # e.g. a scan state wider than the lanes, a lookup
            return None                      # longer than the instruction memory, a tensor
            # larger than the vector buffer to quantize: stays on the host
        rec = OffloadRecord(task.name, kernel, operands, raw, out_shape)
        self.records.append(rec)
        return rec.as_output(raw)


@dataclass
class ReplayVectorUnit:
    """Hook answering the tasks a :class:`VectorUnitOps` run took, in the same order, with
    ``results`` (raw, e.g. from the RTL); raises if the run takes a different path."""

    records: list[OffloadRecord]
    results: list[np.ndarray]
    _next: int = 0

    def __call__(self, task, ins):
        if not isinstance(task, (VectorTask, *_PAIR_TASKS)) or self._next >= len(self.records) \
                or self.records[self._next].task != task.name:
            return None
        rec, raw = self.records[self._next], self.results[self._next]
        self._next += 1
        return rec.as_output(raw)
