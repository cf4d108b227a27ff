"""MX GEMMs encoded for the Verilated :class:`~tilewright.rtl.mx_core.MxGemmCore` (top
``mx-core``).

A GEMM is a pair of :class:`~tilewright.formats.QTensor` of the core's MX format: ``a`` (M x K,
quantized along K = axis 1, E8M0 codes (M, ceil(K/32))) and ``b`` (K x N, along axis 0, codes
(ceil(K/32), N)). :func:`mx_gemm_words` packs them into the core's buffer words (the WS rows of
:mod:`tilewright.compiler.layout` with 32 rows = one MX block per K tile; 8-bit lanes, +0
padding, scale codes above the lanes: see :mod:`tilewright.rtl.mx_core`). :func:`prepare_mx`
encodes a list for the floating-point cores' bench (same ports:
:mod:`tilewright.cocotb_tests.float_core_bench`); each record is a
:class:`~tilewright.cosim.float_core_jobs.FloatGemmRun` (C float32, cycles), compared with ``numerics.gemm(a, b, fmt, k_block=32)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tilewright.compiler.layout import GemmLayout
from tilewright.cosim.float_core_jobs import prepare_float_gemms
from tilewright.cosim.job import PreparedJob
from tilewright.formats import MX_BLOCK, QTensor

__all__ = ["MxParams", "mx_gemm_words", "prepare_mx"]

_MX = ("mxint8", "mxfp8", "mxfp8-e5m2")


@dataclass(frozen=True)
class MxParams:
    """What an MX core build is generated from: format, columns, buffer depths (words)."""

    fmt: str
    cols: int
    depths: tuple[int, int, int] = (256, 256, 256)

    def __post_init__(self) -> None:
        if self.fmt not in _MX:
            raise ValueError(f"MX core fmt {self.fmt!r}: accepted: {', '.join(_MX)}")

    def key(self) -> str:
        return f"{self.fmt}-32x{self.cols}-d{'-'.join(map(str, self.depths))}"


def _check(q: QTensor, fmt: str, axis: int, name: str) -> None:
    if not isinstance(q, QTensor) or q.format != fmt or q.granularity != "block":
        raise ValueError(f"MX GEMM: operand {name} must be a {fmt} QTensor (block scales)")
    if q.values.ndim != 2 or q.axis != axis or 0 in q.values.shape:
        raise ValueError(f"MX GEMM: operand {name} must be non-empty 2-D, quantized along axis "
                         f"{axis}")


def mx_gemm_words(cols: int, a: QTensor, b: QTensor) -> tuple[GemmLayout, list[int], list[int]]:
    """(layout, A buffer words, B buffer words) of C = A·B for a 32 x ``cols`` MX core."""
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"MX GEMM: inner dimensions differ: A {a.shape} @ B {b.shape}")
    (m, k), n = a.shape, b.shape[1]
    lay = GemmLayout(MX_BLOCK, cols, "ws", m, k, n, mx=True)
    return lay, lay.a_words_of(a.values, a.scales), lay.b_words_of(b.values, b.scales)


def prepare_mx(gemms: Sequence[tuple[QTensor, QTensor]], params: MxParams) -> PreparedJob:
    """Each (a, b) QTensor pair as one GEMM of the bench; ValueError for no GEMM, operands of
    another format or a GEMM whose buffers exceed ``params.depths``."""
    def encoded(pair: tuple[QTensor, QTensor]):
        a, b = pair
        _check(a, params.fmt, 1, "A")
        _check(b, params.fmt, 0, "B")
        return (*mx_gemm_words(params.cols, a, b), {})
    return prepare_float_gemms("MX", map(encoded, gemms), params.depths)
