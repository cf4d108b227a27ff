"""Exact GEMM arithmetic of the target for every number format of :mod:`tilewright.formats`.

``gemm(a, b, fmt, acc=..., k_block=R)`` computes ``a @ b`` (a: M x K quantized along K = axis 1,
b: K x N quantized along K = axis 0) exactly as a weight-stationary systolic array with R rows
(``k_block``) and an accumulator SRAM does it. All float arithmetic is IEEE fp32 with
round-to-nearest-even (RNE), one rounding per operation, no fused multiply-add:

1. **Products** of element values: ``fl32(a_k * b_k)``. Exact for bf16 and fp8 elements (8- and
   4-bit significands fit fp32's 24 bits; bf16 products round only if they leave fp32's normal
   range) and for integers; rounded for fp32 elements.
2. **Tile sums** (the psum flowing down one PE column): K is cut into tiles of ``k_block``
   consecutive k (the last may be shorter); inside a tile
   ``p = 0; for k in tile, increasing: p = fl32(p + product_k)``.
3. **Accumulation** (accumulator SRAM read-modify-write): ``acc = 0``; for tiles in increasing k:
   ``acc = fl32(acc + p_tile)``.
4. **Scales** after accumulation: ``out = fl32(fl32(acc) * fl32(s_a * s_b))`` with ``s_a`` per
   tensor or per row m and ``s_b`` per tensor or per column n (missing scale = 1).

``int8`` with ``acc='int32'``: products and sums in int32 wrapping modulo 2**32; the order does not
matter (wrapping addition is associative), so :func:`~tilewright.dataflow_sim.functional.gemm_int8`
computes it. ``int16`` (16-bit fixed point) with ``acc='int32'`` likewise: each product
(``|p| <= 32767**2 < 2**30``) and the int64 dot of the codes are exact (for K < 2**33), then
wrapped modulo 2**32 as the int32 accumulator wraps — exact while ``|dot| < 2**31`` (for
worst-case codes K <= 2; a 32-bit accumulator is what the tables price, configs/tech/45nm.yaml).
With unscaled int8 or int16 operands the int32 accumulator is returned; otherwise step 4 turns
it into fp32 (``fl32(acc)`` is RNE; exact while ``|acc| <= 2**24``).

**MX formats** (``acc='fp32'`` only; ``k_block`` must be a multiple of 32 so a tile holds whole
blocks, and then the result does not depend on it): for each 32-element block j of K, the block
dot ``d_j`` is the step-2 sequential fp32 sum over its k (MXFP8), or the exact integer dot of the
codes (MXINT8, ``|d_j| <= 32 * 127**2 < 2**24``, exact in fp32); it is scaled by the power of two
``2**(Xa_j + Xb_j)`` (``2**(Xa_j + Xb_j - 12)`` for MXINT8's implicit 2**-6 per operand) with one
fp32 rounding (exact unless the result leaves fp32's normal range), and added into the fp32
accumulator in increasing j: ``acc = fl32(acc + scaled_j)``.

Vectorized over M, N and tiles with numpy; the only Python loops run over the k inside a tile and
over tiles, in chunks bounded to about 64 MiB of partial sums.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from tilewright.dataflow_sim.matmul_hooks import (bf16_matmul_fn, fp8_matmul_fn, int8_matmul_fn,
                                                 mx_matmul_fn)
from tilewright.formats import MX_BLOCK, NumberFormat, QTensor, element_values, get_format, quantize

__all__ = ["gemm", "apply_scales", "sequential_fp32_matmul"]

_CHUNK_BYTES = 64 << 20


def _operand(x: QTensor | np.ndarray, f: NumberFormat, axis: int, which: str) -> QTensor:
    """``x`` as a 2-D QTensor of ``f`` quantized along ``axis`` (1 for a, 0 for b).

    An ndarray already in the element dtype is taken as codes with scale 1 (not for MX, which
    needs block scales); any other ndarray is quantized with ``quantize(x, f, axis=axis)``.
    """
    if isinstance(x, QTensor):
        if x.format != f.name:
            raise ValueError(f"operand {which} is {x.format}, GEMM format is {f.name}")
        q = x
    elif not isinstance(x, np.ndarray):
        raise TypeError(f"operand {which} must be a QTensor or np.ndarray, got {type(x).__name__}")
    elif x.ndim != 2:
        raise ValueError(f"operand {which} must be 2-D, got shape {x.shape}")
    elif x.dtype == np.dtype(f.dtype) and f.scaling != "e8m0":
        q = QTensor(f.name, x, None, axis, "none")
    else:
        q = quantize(x, f, axis=axis)
    if q.values.ndim != 2:
        raise ValueError(f"operand {which} must be 2-D, got shape {q.shape}")
    if q.axis != axis:
        raise ValueError(f"operand {which} must be quantized along its reduction axis {axis}, "
                         f"not {q.axis}")
    return q


def _check_k_block(k_block: int, f: NumberFormat) -> None:
    if isinstance(k_block, bool) or not isinstance(k_block, (int, np.integer)) or k_block < 1:
        raise ValueError(f"k_block must be a positive int (array rows), got {k_block!r}")
    if f.scaling == "e8m0" and k_block % MX_BLOCK:
        raise ValueError(f"{f.name}: k_block {k_block} must be a multiple of the MX block "
                         f"{MX_BLOCK} so each tile holds whole blocks")


def _chunks(n_tiles: int, m: int, n: int) -> list[tuple[int, int]]:
    """[t0, t1) ranges of tiles whose (t1-t0) x M x N fp32 psums fit in about 64 MiB."""
    step = max(1, _CHUNK_BYTES // max(1, 4 * m * n))
    return [(t0, min(n_tiles, t0 + step)) for t0 in range(0, n_tiles, step)]


def _tile_sums(a: np.ndarray, b: np.ndarray, k_block: int, t0: int, t1: int) -> np.ndarray:
    """fp32 psums (t1-t0, M, N) of tiles t0..t1-1: sequential over k in a tile, from 0.

    ``a``: (T, k_block, M) and ``b``: (T, k_block, N), zero-padded to whole tiles; a padded k
    adds ``fl32(p + 0) = p`` exactly (p is never -0: it starts at +0), so padding is neutral.
    """
    at, bt = a[t0:t1], b[t0:t1]
    p = np.zeros((t1 - t0, a.shape[2], b.shape[2]), np.float32)
    for j in range(k_block):
        p += at[:, j, :, None] * bt[:, j, None, :]  # fl32 product, then fl32 add
    return p


def _pad_tiles(a: np.ndarray, b: np.ndarray, k_block: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(a as (T, k_block, M), b as (T, k_block, N), T): K zero-padded to T whole tiles."""
    (m, k), n = a.shape, b.shape[1]
    t = max(1, -(-k // k_block))
    pad = t * k_block - k
    ap = np.pad(a.T, [(0, pad), (0, 0)]).reshape(t, k_block, m)
    bp = np.pad(b, [(0, pad), (0, 0)]).reshape(t, k_block, n)
    return ap, bp, t


def sequential_fp32_matmul(a: np.ndarray, b: np.ndarray, k_block: int) -> np.ndarray:
    """Steps 1-3 of the module docstring on fp32 matrices a (M, K), b (K, N) -> fp32 (M, N)."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    ap, bp, t = _pad_tiles(a, b, k_block)
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for t0, t1 in _chunks(t, *acc.shape):
        for p in _tile_sums(ap, bp, k_block, t0, t1):
            acc += p
    return acc


def _gemm_mx(qa: QTensor, qb: QTensor, f: NumberFormat) -> np.ndarray:
    """MX rule of the module docstring: block dots, power-of-two scaled, summed in block order."""
    ap, bp, nb = _pad_tiles(qa.values, qb.values, MX_BLOCK)
    xa, xb = qa.scale_exponents, qb.scale_exponents  # (M, nb), (nb, N)
    acc = np.zeros((ap.shape[2], bp.shape[2]), np.float32)
    if f.kind == "int":  # integer codes in fp32: every product and partial sum is an integer
        # below 32 * 127**2 < 2**24, so the fp32 tile sum is the exact integer dot
        ap, bp, shift = ap.astype(np.float32), bp.astype(np.float32), 2 * f.element_exp
    else:
        ap, bp, shift = element_values(ap, f), element_values(bp, f), 0
    for j0, j1 in _chunks(nb, *acc.shape):
        d = _tile_sums(ap, bp, MX_BLOCK, j0, j1)  # (blocks, M, N) block dots
        e = xa[:, j0:j1].T[:, :, None] + xb[j0:j1, None, :] + shift
        for s in np.ldexp(d, e.astype(np.int32)):
            acc += s
    return acc


def _scale_of(q: QTensor, rows: bool) -> np.ndarray:
    if q.scales is None:
        return np.ones((1, 1), np.float32)
    return q.scales.reshape(-1, 1) if rows else q.scales.reshape(1, -1)


def gemm(a: QTensor | np.ndarray, b: QTensor | np.ndarray, fmt: str, *,
         acc: Literal["fp32", "int32"] | None = None, k_block: int) -> np.ndarray:
    """``a @ b`` with the target's exact arithmetic (rules in the module docstring).

    ``a``: M x K, ``b``: K x N, each a :class:`QTensor` of ``fmt`` quantized along K, an ndarray of
    element codes (``fmt``'s dtype, scale 1; not for MX), or a float ndarray (quantized here,
    per-tensor or per-block). ``acc``: accumulator format, default the format's (int32 for int8
    and int16, fp32 otherwise); int32 only for int8 and int16, fp32 for everything.
    ``k_block``: the systolic array's
    rows (k per tile). Returns int32 (M, N) for int8/int16 -> int32 with unscaled operands, else
    fp32.
    """
    f = get_format(fmt)
    qa, qb = _operand(a, f, 1, "a"), _operand(b, f, 0, "b")
    if qa.shape[1] != qb.shape[0]:
        raise ValueError(f"inner dimensions differ: a {qa.shape} @ b {qb.shape}")
    acc = acc or f.default_acc
    if acc not in ("fp32", "int32"):
        raise ValueError(f"accumulator must be 'fp32' or 'int32', got {acc!r}")
    if acc == "int32" and (f.kind != "int" or f.scaling == "e8m0"):
        raise ValueError(f"{f.name} cannot accumulate in int32 (only int8 and int16 can; MX "
                         f"sums in fp32)")
    _check_k_block(k_block, f)
    if f.scaling == "e8m0":
        hook = mx_matmul_fn()      # e.g. the RTL MX core on the accelerator top (sim --rtl)
        return _gemm_mx(qa, qb, f) if hook is None else hook(qa, qb)
    if acc == "int32":
        if f.name == "int16":   # no int16 hardware hook: the exact int64 dot, wrapped to int32
            out = (qa.values.astype(np.int64) @ qb.values.astype(np.int64)).astype(np.int32)
        else:
            out = int8_matmul_fn()(qa.values, qb.values)
        if qa.scales is None and qb.scales is None:
            return out
        out = out.astype(np.float32)
    else:
        fp8_hook = fp8_matmul_fn() if f.name in ("fp8-e4m3", "fp8-e5m2") else None
        if fp8_hook is not None:   # e.g. the accelerator top, which applies the scales itself
            return fp8_hook(qa, qb, k_block)
        hook = bf16_matmul_fn() if f.name == "bf16" else None
        if hook is not None:       # e.g. the RTL bf16 core (tilewright sim --rtl)
            out = hook(qa.values, qb.values, k_block)
        else:
            out = sequential_fp32_matmul(element_values(qa.values, f),
                                         element_values(qb.values, f), k_block)
    return apply_scales(out, qa, qb)


def apply_scales(acc: np.ndarray, qa: QTensor, qb: QTensor) -> np.ndarray:
    """Step 4: ``fl32(fl32(acc) * fl32(s_a * s_b))`` (fp32 [M, N]) for the accumulator ``acc``
    of ``qa @ qb`` (``s_a`` per tensor or row m, ``s_b`` per tensor or column n; missing = 1)."""
    return (acc.astype(np.float32) * (_scale_of(qa, True) * _scale_of(qb, False))
            ).astype(np.float32)
