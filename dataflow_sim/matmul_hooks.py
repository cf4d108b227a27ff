"""The matmuls the functional model runs, in one place: the exact int8 reference and the hooks
that replace it (or the bf16 one) inside a ``with`` block — e.g. with results computed by the RTL.

Kept apart from :mod:`~tilewright.dataflow_sim.functional` so that
:mod:`~tilewright.dataflow_sim.numerics` (which the functional model imports) can ask for the matmul
in force without importing the functional model back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

__all__ = ["wrap_int32", "gemm_int8", "Int8Matmul", "int8_matmul_fn", "int8_matmul",
           "Bf16Matmul", "bf16_matmul_fn", "bf16_matmul", "Fp8Matmul", "fp8_matmul_fn",
           "fp8_matmul",
           "MxMatmul", "mx_matmul_fn", "mx_matmul"]


def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Reduce int64 values modulo 2**32 into int32 (two's complement wrap)."""
    return x.astype(np.int64).astype(np.uint32).astype(np.int32) if x.dtype != np.int32 else x


def gemm_int8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for int8 operands with an int32 accumulator that wraps (exactly as the PEs do).

    Exact: int64 sums of int8 products cannot overflow for K < 2**48, and wrapping addition is
    associative modulo 2**32, so the wrapped int64 result equals any order of int32 accumulation.
    """
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError(f"gemm_int8 takes int8 operands, got {a.dtype} and {b.dtype}")
    return wrap_int32(a.astype(np.int64) @ b.astype(np.int64))


Int8Matmul = Callable[[np.ndarray, np.ndarray], np.ndarray]
_INT8_MATMUL: ContextVar[Int8Matmul | None] = ContextVar("tilewright_int8_matmul", default=None)


def int8_matmul_fn() -> Int8Matmul:
    """The int8 x int8 -> int32 (wrapping) matmul in force: :func:`gemm_int8` unless a caller
    installed another with :func:`int8_matmul`."""
    return _INT8_MATMUL.get() or gemm_int8


Bf16Matmul = Callable[[np.ndarray, np.ndarray, int], np.ndarray]
_BF16_MATMUL: ContextVar[Bf16Matmul | None] = ContextVar("tilewright_bf16_matmul", default=None)


def bf16_matmul_fn() -> Bf16Matmul | None:
    """The bf16 matmul installed by :func:`bf16_matmul`, or None (numerics' own)."""
    return _BF16_MATMUL.get()


@contextmanager
def bf16_matmul(fn: Bf16Matmul) -> Iterator[None]:
    """Run every bf16 GEMM of the functional model — ``fn(a, b, k_block)`` with ``a`` [M, K] and
    ``b`` [K, N] bf16 element codes (``ml_dtypes.bfloat16``), returning the fp32 accumulator
    [M, N] of steps 1-3 of :mod:`tilewright.dataflow_sim.numerics` — through ``fn`` inside the
    ``with`` block (like :func:`int8_matmul`)."""
    token = _BF16_MATMUL.set(fn)
    try:
        yield
    finally:
        _BF16_MATMUL.reset(token)


#: ``fn(qa, qb, k_block)``: an fp8 GEMM (``qa`` M x K, ``qb`` K x N QTensors of one fp8 format,
#: each with one fp32 scale or none) -> its fp32 result, all four steps of numerics
Fp8Matmul = Callable[[Any, Any, int], np.ndarray]
_FP8_MATMUL: ContextVar[Fp8Matmul | None] = ContextVar("tilewright_fp8_matmul", default=None)


def fp8_matmul_fn() -> Fp8Matmul | None:
    """The fp8 matmul installed by :func:`fp8_matmul`, or None (numerics' own)."""
    return _FP8_MATMUL.get()


@contextmanager
def fp8_matmul(fn: Fp8Matmul | None) -> Iterator[None]:
    """Run every GEMM in ``fp8-e4m3``/``fp8-e5m2`` through ``fn(qa, qb, k_block)`` inside the
    ``with`` block — e.g. the accelerator top, which applies per-tensor scales itself; ``fn``
    returns the fp32 result of steps 1-4 (the scales included); ``None``: numerics' own."""
    token = _FP8_MATMUL.set(fn)
    try:
        yield
    finally:
        _FP8_MATMUL.reset(token)


#: ``fn(qa, qb)``: an MX GEMM (``qa`` M x K along axis 1, ``qb`` K x N along axis 0, QTensors of
#: one MX format with their E8M0 block scales) -> its fp32 result (M x N)
MxMatmul = Callable[[Any, Any], np.ndarray]
_MX_MATMUL: ContextVar[MxMatmul | None] = ContextVar("tilewright_mx_matmul", default=None)


def mx_matmul_fn() -> MxMatmul | None:
    """The MX matmul installed by :func:`mx_matmul`, or None (numerics' own MX rule)."""
    return _MX_MATMUL.get()


@contextmanager
def mx_matmul(fn: MxMatmul | None) -> Iterator[None]:
    """Run every MX GEMM of the functional model (the formats with E8M0 block scales) through
    ``fn(qa, qb)`` — e.g. the RTL MX core on the accelerator top (tilewright sim --rtl) — which
    returns the fp32 result of numerics' MX rule; ``None``: numerics' own rule."""
    token = _MX_MATMUL.set(fn)
    try:
        yield
    finally:
        _MX_MATMUL.reset(token)


@contextmanager
def int8_matmul(fn: Int8Matmul) -> Iterator[None]:
    """Run every int8 matmul of the functional model (2-D ``a`` [M, K] @ ``b`` [K, N], int8 codes,
    result int32 [M, N]) through ``fn`` inside the ``with`` block — e.g. one that records the
    operands, or one that returns results computed by the RTL."""
    token = _INT8_MATMUL.set(fn)
    try:
        yield
    finally:
        _INT8_MATMUL.reset(token)
