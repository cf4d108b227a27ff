"""Functional model: the target's exact arithmetic, task by task, in numpy.

It executes a :class:`~tilewright.compiler.program.Program` with the semantics documented there:
int8 x int8 GEMMs into an int32 accumulator that wraps modulo 2**32, the vector ops of
:data:`~tilewright.compiler.program.VECTOR_OPS`, ``quantize`` (:func:`tilewright.formats.quantize`),
the GEMM-like tasks ``bgemm``, ``grouped_gemm`` (real run-time counts) and ``attention`` (the
streaming FlashAttention cascade, block by block) in every number format — each 2-D GEMM by
:func:`tilewright.dataflow_sim.numerics.gemm` with the task's ``k_block`` and accumulator, so the
arithmetic is the ArchSpec's exactly — and ``scan`` (chunked selective scan, fp32). The int8 GEMM is pluggable so that the same
driver runs a program with GEMMs on another level: ``run_program(gemm=...)`` for ``gemm`` tasks,
and :func:`int8_matmul` (a context manager) for every int8 x int8 -> int32 matmul inside
``bgemm``, ``grouped_gemm`` and ``attention`` (``tilewright sim --rtl`` runs them on the
Verilated core this way); :func:`run_vector` executes every other task kind, offering each
``vector``, ``scan`` and ``quantize`` task first to the hook :func:`vector_unit_ops` installs (the vector unit's Q8.8
arithmetic, or results from the RTL's vector engine).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

import numpy as np

from tilewright.compiler.program import (BINARY_OPS, FORMAT_DTYPES, UNARY_OPS, AttentionTask,
                                         BgemmTask, GemmTask, GroupedGemmTask, Program,
                                         QuantizeTask, ScanTask, VectorTask)
from tilewright.dataflow_sim.matmul_hooks import (bf16_matmul, bf16_matmul_fn, gemm_int8,
                                                  int8_matmul, int8_matmul_fn, wrap_int32)
from tilewright.dataflow_sim.numerics import gemm
from tilewright.formats import FORMATS, QTensor, quantize, round_to_element

__all__ = ["gemm_int8", "int8_matmul", "int8_matmul_fn", "vector_unit_ops", "VectorHook",
           "bf16_matmul", "bf16_matmul_fn", "run_vector", "run_program", "wrap_int32",
           "bgemm_fp32", "attention_fp32",
           "scan_fp32", "grouped_gemm_fp32", "gemm_2d", "bgemm_formats", "grouped_gemm_formats",
           "attention_formats", "quantize_p"]

_F32 = np.float32
_ERF = np.vectorize(math.erf, otypes=[np.float64])


#: a vector-task hook: (task, its input arrays) -> the task's output, or None to leave the task to
#: the functional model's own fp32 arithmetic; for a ``scan`` task (inputs a, b, c, h0) the output
#: is the pair (y, state_out), for a ``quantize`` task (input x) the pair (codes, scales)
VectorHook = Callable[[Any, list], "np.ndarray | None"]
_VECTOR_HOOK: ContextVar[VectorHook | None] = ContextVar("tilewright_vector_hook", default=None)


@contextmanager
def vector_unit_ops(fn: VectorHook) -> Iterator[None]:
    """Offer every ``vector``, ``scan`` and ``quantize`` task of the functional model to
    ``fn(task, inputs)`` inside the ``with`` block: a returned array (scan: the pair y,
    state_out; quantize: the pair codes, scales) is the task's
    output, None runs the task as usual — how a
    run executes the ops a vector unit implements in that unit's arithmetic
    (:mod:`tilewright.dataflow_sim.vector_offload`), or answers them with results an RTL run
    computed."""
    token = _VECTOR_HOOK.set(fn)
    try:
        yield
    finally:
        _VECTOR_HOOK.reset(token)


# ---- fp32 engine tasks --------------------------------------------------------------------------
def bgemm_fp32(a: np.ndarray, b: np.ndarray, *, transpose_b: bool = False, tile_m: int = 1 << 30,
               tile_n: int = 1 << 30, tile_k: int = 1 << 30) -> np.ndarray:
    """fp32 batched ``a @ b`` (``b`` swapped on its last two axes if ``transpose_b``), computed
    tile by tile: for each (m, n) tile the K tiles are multiplied in fp32 and added into an fp32
    accumulator in increasing k. Batch dims broadcast like ``numpy.matmul``."""
    a = np.asarray(a, _F32)
    b = np.asarray(b, _F32)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = np.empty((*batch, m, n), _F32)
    for m0 in range(0, m, tile_m):
        for n0 in range(0, n, tile_n):
            acc = None
            for k0 in range(0, k, tile_k):
                part = np.matmul(a[..., m0:m0 + tile_m, k0:k0 + tile_k],
                                 b[..., k0:k0 + tile_k, n0:n0 + tile_n])
                acc = part if acc is None else acc + part
            out[..., m0:m0 + tile_m, n0:n0 + tile_n] = acc
    return out


def grouped_gemm_fp32(a: np.ndarray, b: np.ndarray, counts: np.ndarray, *,
                      transpose_b: bool = False) -> np.ndarray:
    """Rows of ``a`` [R, K] in expert segments of ``counts`` [E] rows; segment e times ``b[e]``."""
    counts = np.asarray(counts, np.int64)
    if counts.sum() != a.shape[0] or np.any(counts < 0):
        raise ValueError(f"grouped_gemm: counts {counts.tolist()} do not partition {a.shape[0]} rows")
    n = b.shape[-2] if transpose_b else b.shape[-1]
    out = np.zeros((a.shape[0], n), _F32)
    start = 0
    for e, c in enumerate(counts.tolist()):
        if c:
            w = b[e].T if transpose_b else b[e]
            out[start:start + c] = np.matmul(a[start:start + c].astype(_F32), w.astype(_F32))
        start += c
    return out


def _online_softmax_step(sb: np.ndarray, m: np.ndarray, l: np.ndarray, q0: int, q1: int,
                         k0: int, k1: int, causal_offset: int | None):
    """One key block of the online softmax (fp32): mask the score block ``sb`` (queries q0..q1,
    keys k0..k1) causally, update the running max ``m`` and sum ``l``; return
    ``(p, alpha, m_new, l_new)`` with ``alpha`` the rescale factor of the running output."""
    if causal_offset is not None:
        rows = np.arange(q0, q1)[:, None]
        cols = np.arange(k0, k1)[None, :]
        sb = np.where(cols > rows + causal_offset, _F32(-np.inf), sb)
    m_new = np.maximum(m, sb.max(axis=-1, keepdims=True))
    m_safe = np.where(np.isneginf(m_new), _F32(0), m_new)
    p = np.exp(sb - m_safe)
    alpha = np.exp(m - m_safe)
    return p, alpha, m_new, alpha * l + p.sum(axis=-1, keepdims=True)


def attention_fp32(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float,
                   causal_offset: int | None, block_q: int, block_kv: int) -> np.ndarray:
    """The streaming attention cascade of the ``attention`` task, in fp32, block by block."""
    q, k, v = (np.asarray(x, _F32) for x in (q, k, v))
    s, t = q.shape[-2], k.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q = np.broadcast_to(q, (*batch, *q.shape[-2:]))
    out = np.empty((*batch, s, v.shape[-1]), _F32)
    kt = np.swapaxes(k, -1, -2)
    sc = _F32(scale)
    for q0 in range(0, s, block_q):
        q1 = min(q0 + block_q, s)
        qb = q[..., q0:q1, :]
        m = np.full((*batch, q1 - q0, 1), -np.inf, _F32)
        l = np.zeros((*batch, q1 - q0, 1), _F32)
        o = np.zeros((*batch, q1 - q0, v.shape[-1]), _F32)
        for k0 in range(0, t, block_kv):
            if causal_offset is not None and k0 > q1 - 1 + causal_offset:
                break                                    # this and later key blocks fully masked
            k1 = min(k0 + block_kv, t)
            sb = np.matmul(qb, kt[..., k0:k1]) * sc
            p, alpha, m, l = _online_softmax_step(sb, m, l, q0, q1, k0, k1, causal_offset)
            o = alpha * o + np.matmul(p, v[..., k0:k1, :])
        out[..., q0:q1, :] = o / l
    return out


# ---- GEMM-like tasks in any number format ---------------------------------------------------
def _granularity(fmt: str, scales: np.ndarray | None) -> str:
    if scales is None:
        return "none"
    if FORMATS[fmt].scaling == "e8m0":
        return "block"
    return "tensor" if scales.size == 1 else "channel"


def _qt(fmt: str, codes: np.ndarray, scales: np.ndarray | None, axis: int) -> QTensor | np.ndarray:
    """2-D operand for numerics.gemm: a QTensor (scales reshaped to its rules) or, unscaled,
    the codes themselves (fp32: fp32 values; others: codes with scale 1)."""
    gran = _granularity(fmt, scales)
    if gran == "none":
        return np.ascontiguousarray(codes)
    sc = scales.reshape(1, 1) if gran == "tensor" else scales
    return QTensor(fmt, np.ascontiguousarray(codes), np.ascontiguousarray(sc), axis, gran)


def gemm_2d(a: np.ndarray, a_scale: np.ndarray | None, b: np.ndarray, b_scale: np.ndarray | None,
            fmt: str, acc: str, k_block: int | None) -> np.ndarray:
    """``a @ b`` for 2-D codes a [M, K] (scales along axis 1) and b [K, N] (scales along axis 0)
    by :func:`tilewright.dataflow_sim.numerics.gemm` (``k_block`` None: all of K in one run)."""

    kb = k_block or max(1, a.shape[1])
    if FORMATS[fmt].scaling == "e8m0":
        kb = -(-kb // 32) * 32
    return gemm(_qt(fmt, a, a_scale, 1), _qt(fmt, b, b_scale, 0), fmt, acc=acc, k_block=kb)


def _per_tensor(x: np.ndarray | None, fmt: str) -> bool:
    """True for a missing scale or one fp32 scale for the whole tensor (not an MX block scale)."""
    return x is None or (x.size == 1 and FORMATS[fmt].scaling != "e8m0")


def _batched(x: np.ndarray | None, batch: tuple[int, ...], fmt: str) -> np.ndarray | None:
    if _per_tensor(x, fmt):
        return x
    return np.broadcast_to(x, (*batch, *x.shape[-2:]))


def bgemm_formats(a, b, *, fmt: str = "fp32", a_scale=None, b_scale=None,
                  transpose_b: bool = False, acc: str = "fp32", k_block: int | None = None
                  ) -> np.ndarray:
    """The ``bgemm`` task: batch dims broadcast like numpy.matmul (a 2-D ``b`` folds a's leading
    dims into M); each batch element one :func:`gemm_2d`."""
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
        b_scale = None if b_scale is None else np.swapaxes(b_scale, -1, -2)
    if b.ndim == 2:
        lead = a.shape[:-1]
        a2 = a.reshape(-1, a.shape[-1])
        as2 = a_scale if _per_tensor(a_scale, fmt) else a_scale.reshape(-1, a_scale.shape[-1])
        return gemm_2d(a2, as2, b, b_scale, fmt, acc, k_block).reshape(*lead, b.shape[-1])
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    A, B = np.broadcast_to(a, (*batch, *a.shape[-2:])), np.broadcast_to(b, (*batch, *b.shape[-2:]))
    As, Bs = _batched(a_scale, batch, fmt), _batched(b_scale, batch, fmt)
    out = None
    for idx in np.ndindex(*batch):
        r = gemm_2d(A[idx], As if _per_tensor(As, fmt) else As[idx], B[idx],
                    Bs if _per_tensor(Bs, fmt) else Bs[idx], fmt, acc, k_block)
        if out is None:
            out = np.empty((*batch, *r.shape), r.dtype)
        out[idx] = r
    return out


def grouped_gemm_formats(a, b, counts, *, fmt: str = "fp32", a_scale=None, b_scale=None,
                         transpose_b: bool = False, acc: str = "fp32",
                         k_block: int | None = None) -> np.ndarray:
    """The ``grouped_gemm`` task: rows of ``a`` in expert segments of ``counts``; segment e
    times expert ``b[e]`` (with its own scales ``b_scale[e]``), each one :func:`gemm_2d`."""
    counts = np.asarray(counts, np.int64)
    if counts.sum() != a.shape[0] or np.any(counts < 0):
        raise ValueError(f"grouped_gemm: counts {counts.tolist()} do not partition {a.shape[0]} rows")
    n = b.shape[-2] if transpose_b else b.shape[-1]
    out = np.zeros((a.shape[0], n), np.float32)
    start = 0
    for e, c in enumerate(counts.tolist()):
        if c:
            w = b[e].T if transpose_b else b[e]
            ws = None if b_scale is None else (b_scale[e].T if transpose_b else b_scale[e])
            sa = a_scale if _per_tensor(a_scale, fmt) else a_scale[start:start + c]
            out[start:start + c] = gemm_2d(a[start:start + c], sa, w, ws, fmt, acc, k_block)
        start += c
    return out


def quantize_p(p: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Codes and scales of an attention probability block p [bq, bk] (fp32 in [0, 1]) for the
    cascade's second GEMM: fp32 unchanged, bf16 RNE, int8/fp8 one scale per block, MX per
    32-block along the key axis (the GEMM's K)."""
    f = FORMATS[fmt]
    if f.scaling == "none":
        return (p if fmt == "fp32" else round_to_element(p, f)), None
    q = quantize(p, f, axis=1, granularity="tensor" if f.scaling == "fp32" else None)
    return q.values, q.scales


def _rows(x: np.ndarray | None, r0: int, r1: int, fmt: str, blocked: bool = False
          ) -> np.ndarray | None:
    """Rows r0:r1 (axis -2) of a scale array: per tensor unchanged; ``blocked`` (MX scales of a
    tensor quantized along axis -2) one scale row per 32 rows, r0 a multiple of 32."""
    if _per_tensor(x, fmt):
        return x
    if blocked:
        return x[..., r0 // 32:-(-r1 // 32), :]
    return x[..., r0:r1, :]


def attention_formats(q, k, v, *, scale: float, causal_offset: int | None, block_q: int,
                      block_kv: int, fmt: str = "fp32", q_scale=None, k_scale=None,
                      v_scale=None, acc: str = "fp32", k_block: int | None = None) -> np.ndarray:
    """The ``attention`` task in ``fmt``: the cascade of :func:`attention_fp32` with its two GEMMs
    per batch element by :func:`gemm_2d` (``s = fl32(gemm(q_b, k_b^T) * scale)``, ``p``
    quantized by :func:`quantize_p`, ``o = alpha * o + gemm(p, v_b)``)."""
    s_len, t_len = q.shape[-2], k.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    Q, K, V = (np.broadcast_to(x, (*batch, *x.shape[-2:])) for x in (q, k, v))
    Qs, Ks, Vs = (_batched(x, batch, fmt) for x in (q_scale, k_scale, v_scale))
    d_v = v.shape[-1]
    out = np.empty((*batch, s_len, d_v), _F32)
    sc = _F32(scale)
    mx = FORMATS[fmt].scaling == "e8m0"
    pick = lambda x, idx: x if _per_tensor(x, fmt) else x[idx]  # noqa: E731
    for idx in np.ndindex(*batch):
        qi, ki, vi = Q[idx], K[idx], V[idx]
        qsi, ksi, vsi = pick(Qs, idx), pick(Ks, idx), pick(Vs, idx)
        for q0 in range(0, s_len, block_q):
            q1 = min(q0 + block_q, s_len)
            m = np.full((q1 - q0, 1), -np.inf, _F32)
            l = np.zeros((q1 - q0, 1), _F32)
            o = np.zeros((q1 - q0, d_v), _F32)
            for k0 in range(0, t_len, block_kv):
                if causal_offset is not None and k0 > q1 - 1 + causal_offset:
                    break
                k1 = min(k0 + block_kv, t_len)
                kt = ki[k0:k1].T
                kts = _rows(ksi, k0, k1, fmt)
                kts = None if kts is None else kts.T
                sb = gemm_2d(qi[q0:q1], _rows(qsi, q0, q1, fmt), kt, kts, fmt, acc,
                             k_block).astype(_F32) * sc
                p, alpha, m, l = _online_softmax_step(sb, m, l, q0, q1, k0, k1, causal_offset)
                pc, ps = quantize_p(p, fmt)
                pv = gemm_2d(pc, ps, vi[k0:k1], _rows(vsi, k0, k1, fmt, mx), fmt, acc, k_block)
                o = alpha * o + pv.astype(_F32)
            out[(*idx, slice(q0, q1))] = o / l
    return out


def scan_fp32(a: np.ndarray, b: np.ndarray, c: np.ndarray, h0: np.ndarray, *, chunk_l: int,
              chunk_d: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunked selective scan of the ``scan`` task in fp32: channel chunks outer, time chunks
    inner, the state chunk carried across time chunks. Returns ``(y, h_last)``."""
    a, b, c, h0 = (np.asarray(x, _F32) for x in (a, b, c, h0))
    bt, length, di, n = a.shape
    y = np.empty((bt, length, di), _F32)
    h_last = np.empty((bt, di, n), _F32)
    for d0 in range(0, di, chunk_d):
        d1 = min(d0 + chunk_d, di)
        h = h0[:, d0:d1].copy()
        for t0 in range(0, length, chunk_l):
            for t in range(t0, min(t0 + chunk_l, length)):
                h = a[:, t, d0:d1] * h + b[:, t, d0:d1]
                y[:, t, d0:d1] = (h * c[:, t, None, :]).sum(-1)
        h_last[:, d0:d1] = h
    return y, h_last


def _out_dtype(task: VectorTask, default: np.dtype) -> np.dtype:
    fmt = task.attrs.get("format")
    return np.dtype(FORMAT_DTYPES[fmt]) if fmt else np.dtype(default)


def _unary(op: str, x: np.ndarray) -> np.ndarray:
    if op == "logical_not":
        return np.logical_not(x)
    x = np.asarray(x, _F32)
    with np.errstate(over="ignore", divide="ignore"):
        if op == "exp":
            return np.exp(x)
        if op == "neg":
            return -x
        if op == "rsqrt":
            return _F32(1) / np.sqrt(x)
        if op == "sigmoid":
            return _F32(1) / (_F32(1) + np.exp(-x))
        if op == "silu":
            return x / (_F32(1) + np.exp(-x))
        if op == "softplus":
            return np.where(x > _F32(20), x, np.log1p(np.exp(np.minimum(x, _F32(20)))))
        if op == "relu":
            return np.maximum(x, _F32(0))
        if op == "tanh":
            return np.tanh(x)
        if op == "erf":     # numpy has no erf: math.erf in float64, rounded once to fp32
            return _ERF(x.astype(np.float64)).astype(_F32)
    raise AssertionError(op)  # pragma: no cover


def _binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":
        return a / b
    if op == "floordiv":
        return a // b
    if op == "eq":
        return a == b
    return a > b


def _scalar_like(value: float | int, x: np.ndarray) -> np.ndarray:
    """A Python scalar as a 0-d array typed like torch's promotion: fp32 for a float tensor or a
    float scalar (so fp32 arithmetic stays fp32), the tensor's integer type otherwise."""
    if x.dtype.kind == "f" or isinstance(value, float):
        return np.asarray(value, _F32)
    return np.asarray(value, x.dtype)


def _run_task(task, env: dict[str, np.ndarray]) -> np.ndarray:
    """Execute a non-vector task (bgemm, grouped_gemm, attention, quantize, scan)."""
    get = lambda name: None if name is None else env[name]  # noqa: E731
    if isinstance(task, BgemmTask):
        return bgemm_formats(env[task.a], env[task.b], fmt=task.format, a_scale=get(task.a_scale),
                             b_scale=get(task.b_scale), transpose_b=task.transpose_b,
                             acc=task.acc, k_block=task.k_block)
    if isinstance(task, GroupedGemmTask):
        return grouped_gemm_formats(env[task.a], env[task.b], env[task.counts], fmt=task.format,
                                    a_scale=get(task.a_scale), b_scale=get(task.b_scale),
                                    transpose_b=task.transpose_b, acc=task.acc,
                                    k_block=task.k_block)
    if isinstance(task, AttentionTask):
        return attention_formats(env[task.q], env[task.k], env[task.v], scale=task.scale,
                                 causal_offset=task.causal_offset, block_q=task.block_q,
                                 block_kv=task.block_kv, fmt=task.format,
                                 q_scale=get(task.q_scale), k_scale=get(task.k_scale),
                                 v_scale=get(task.v_scale), acc=task.acc, k_block=task.k_block)
    if isinstance(task, QuantizeTask):
        gran = None if task.granularity in ("none", "block") else task.granularity
        q = quantize(env[task.x], task.format, axis=task.axis, granularity=gran)
        if task.scale_out:
            env[task.scale_out] = q.scales
        return q.values
    if isinstance(task, ScanTask):
        y, h = scan_fp32(env[task.a], env[task.b], env[task.c], env[task.h0],
                         chunk_l=task.chunk_l, chunk_d=task.chunk_d)
        env[task.state_out] = h
        return y
    raise TypeError(f"task {getattr(task, 'name', task)}: no functional model for "
                    f"{type(task).__name__}")


def run_vector(task, env: dict[str, np.ndarray]) -> np.ndarray:
    """Execute one task other than ``gemm`` on tensors in ``env`` (name -> array) and return its
    primary output; ``scan`` and ``quantize`` tasks also write their second output (``state_out``,
    ``scale_out``) into ``env``."""
    hook = _VECTOR_HOOK.get()
    if hook is not None and isinstance(task, ScanTask):
        out = hook(task, [env[task.a], env[task.b], env[task.c], env[task.h0]])
        if out is not None:
            env[task.state_out] = out[1]
            return out[0]
    if hook is not None and isinstance(task, QuantizeTask):
        out = hook(task, [env[task.x]])
        if out is not None:                  # (codes, scales)
            if task.scale_out:
                env[task.scale_out] = out[1]
            return out[0]
    if not isinstance(task, VectorTask):
        return _run_task(task, env)
    ins = [env[x] for x in task.inputs]
    if hook is not None:
        out = hook(task, ins)
        if out is not None:
            return out
    a = task.attrs
    op = task.op
    if op in UNARY_OPS:
        return _unary(op, ins[0]).astype(_out_dtype(task, ins[0].dtype), copy=False)
    if op == "pow":
        return np.power(ins[0].astype(_F32), _F32(a["exponent"]))
    if op in BINARY_OPS:
        if len(ins) == 2:
            lhs, rhs = ins
        else:
            sc = _scalar_like(a["scalar"], ins[0])
            lhs, rhs = (sc, ins[0]) if a.get("scalar_first", False) else (ins[0], sc)
        res = _binary(op, lhs, rhs)
        return np.asarray(res).astype(_out_dtype(task, res.dtype), copy=False)
    if op == "masked_fill":
        x, mask = ins
        return np.where(mask, _scalar_like(a["value"], x), x).astype(x.dtype, copy=False)
    if op == "cast":
        return ins[0].astype(FORMAT_DTYPES[a["format"]])
    if op.startswith("reduce_"):
        fn = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max,
              "reduce_any": np.any}[op]
        x = ins[0]
        res = fn(x, axis=tuple(a["axes"]), keepdims=bool(a.get("keepdim", False)))
        return np.asarray(res).astype(x.dtype if op != "reduce_any" else np.bool_, copy=False)
    if op == "softmax":
        x = ins[0].astype(_F32)
        e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
        return e / e.sum(axis=a["axis"], keepdims=True)
    if op == "cumsum":
        return np.cumsum(ins[0], axis=a["axis"], dtype=ins[0].dtype)
    if op == "topk_indices":
        x, axis = ins[0], a["axis"]
        order = np.argsort(-x, axis=axis, kind="stable")
        return np.take(order, np.arange(a["k"]), axis=axis).astype(np.int64)
    if op == "gather":
        return np.take_along_axis(ins[0], ins[1].astype(np.int64), axis=a["axis"])
    if op == "argsort":
        return np.argsort(ins[0], axis=a.get("axis", -1), kind="stable").astype(np.int64)
    if op == "bincount":
        return np.bincount(ins[0].astype(np.int64).ravel(), minlength=a["length"]).astype(np.int64)
    if op == "take_rows":
        return ins[0][ins[1].astype(np.int64)]
    if op == "scatter_add_rows":
        src, index, weight = ins
        out = np.zeros((a["rows"], *src.shape[1:]), _F32)
        np.add.at(out, index.astype(np.int64), weight.astype(_F32)[:, None] * src.astype(_F32))
        return out
    if op == "reshape":
        return ins[0].reshape(a["shape"])
    if op == "permute":
        return np.ascontiguousarray(np.transpose(ins[0], a["axes"]))
    if op == "expand":
        return np.ascontiguousarray(np.broadcast_to(ins[0], a["shape"]))
    if op == "select":
        return np.ascontiguousarray(np.take(ins[0], a["index"], axis=a["axis"]))
    if op == "stack":
        return np.stack(ins, axis=a["axis"])
    if op == "pad":
        return np.pad(ins[0], [tuple(p) for p in a["pads"]], constant_values=a.get("value", 0))
    if op == "copy":
        return ins[0].copy()
    if task.op == "requantize":
        acc, bias, mult, shift = (x.astype(np.int64) for x in ins)
        if np.any(shift < 1) or np.any(shift > 63):
            raise ValueError(f"task {task.name}: requantize shift must be from 1 to 63")
        # floor((p + 2**(s-1)) / 2**s) without int64 overflow: |acc + bias| <= 2**32 and
        # -2**31 < mult keep p in int64, but p + 2**(s-1) may not be; halve p first (exact:
        # floor(floor(x)/d) == floor(x/d) for integer d).
        p = (acc + bias) * mult
        q, r = p >> 1, p & 1
        half = np.int64(1) << np.maximum(shift - 2, 0)
        y = np.where(shift == 1, q + r, (q + half) >> (shift - 1))
        lo = 0 if task.attrs.get("relu", False) else -128
        return np.clip(y, lo, 127).astype(np.int8)
    if task.op == "bias_add":
        acc, bias = ins
        return wrap_int32(acc.astype(np.int64) + bias.astype(np.int64))
    if task.op == "slice":
        (x,) = ins
        index = [slice(None)] * x.ndim
        index[task.attrs["axis"]] = slice(task.attrs["start"], task.attrs["stop"],
                                          task.attrs.get("step", 1))
        return np.ascontiguousarray(x[tuple(index)])
    if task.op == "concat":
        if len({x.dtype for x in ins}) != 1:
            raise ValueError(f"task {task.name}: concat of mixed formats {[x.dtype for x in ins]}")
        return np.concatenate(ins, axis=task.attrs["axis"])
    raise ValueError(f"task {task.name}: vector op {task.op!r} has no functional model")


def run_program(program: Program, inputs: dict[str, np.ndarray],
                gemm: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
                ) -> dict[str, np.ndarray]:
    """Run ``program`` on ``inputs``; return every tensor computed (name -> array). ``gemm``
    runs the ``gemm`` tasks (default: :func:`int8_matmul_fn`)."""
    gemm = gemm or int8_matmul_fn()
    missing = [x for x in program.inputs if x not in inputs]
    if missing:
        raise ValueError(f"program {program.name}: missing inputs {missing}")
    env: dict[str, np.ndarray] = {**program.constants, **inputs}
    for task in program.tasks:
        if isinstance(task, GemmTask):
            if task.a_scale or task.b_scale:
                raise ValueError(f"task {task.name}: an MX gemm task (block scales) runs on the "
                                 "accelerator top; the functional model runs MX GEMMs as bgemm")
            env[task.out] = gemm(env[task.a], env[task.b])
        else:
            env[task.out] = run_vector(task, env)
    return env
