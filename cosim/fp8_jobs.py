"""fp8 GEMMs encoded for the Verilated :class:`~tilewright.rtl.systolic_fp8.Fp8GemmCore` (top
``fp8-core``).

An :class:`Fp8Gemm` is one GEMM: A (M x K) and B (K x N) as fp8 codes of the core's format
(ml_dtypes ``float8_e4m3fn`` / ``float8_e5m2`` arrays, or uint8 codes) and the per-tensor fp32
scales ``scale_a``, ``scale_b`` (1.0: unscaled). :func:`fp8_gemm_words` packs the codes into the
core's buffer words (8-bit lanes; the WS words every floating-point core shares,
:mod:`tilewright.cosim.float_core_jobs`); :func:`prepare_fp8` encodes a list of them for the
bench (:mod:`tilewright.cocotb_tests.float_core_bench`, every GEMM in one simulator process, the
scales as fp32 bit patterns); each record is a
:class:`~tilewright.cosim.float_core_jobs.FloatGemmRun` (C as float32, cycles ``busy`` was high),
compared with ``numerics.gemm(QTensor(a, scale_a), QTensor(b, scale_b), fmt, k_block=rows)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilewright.compiler.layout import GemmLayout
from tilewright.cosim.float_core_jobs import operand_codes, prepare_float_gemms, ws_buffer_words
from tilewright.cosim.job import PreparedJob
from tilewright.formats import get_format

__all__ = ["Fp8Params", "Fp8Gemm", "fp8_codes", "fp8_gemm_words", "fp32_bits", "prepare_fp8"]

_FORMATS = ("fp8-e4m3", "fp8-e5m2")


@dataclass(frozen=True)
class Fp8Params:
    """What an fp8 core build is generated from: array shape, element format, buffer depths."""

    rows: int
    cols: int
    fmt: str                          #: "fp8-e4m3" or "fp8-e5m2"
    depths: tuple[int, int, int] = (256, 256, 256)   #: A, B, accumulator buffer words

    def __post_init__(self) -> None:
        if self.fmt not in _FORMATS:
            raise ValueError(f"fp8 core fmt {self.fmt!r}: accepted: {', '.join(_FORMATS)}")

    def key(self) -> str:
        return f"{self.fmt}-{self.rows}x{self.cols}-d{'-'.join(map(str, self.depths))}"

    @classmethod
    def for_arch(cls, arch) -> "Fp8Params":
        """The fp8 core an ArchSpec describes (``tensor_engine`` rows x cols and input format,
        the buffers of :meth:`GemmLayout.depths`: 8-bit A/B lanes, fp32 accumulator lanes)."""
        te = arch.tensor_engine
        return cls(te.rows, te.cols, te.input_format, tuple(GemmLayout.depths(arch)))


@dataclass(frozen=True)
class Fp8Gemm:
    """One GEMM: codes ``a`` (M x K), ``b`` (K x N) and per-tensor fp32 scales."""

    a: np.ndarray
    b: np.ndarray
    scale_a: float = 1.0
    scale_b: float = 1.0


def fp8_codes(x: np.ndarray, fmt: str, name: str) -> np.ndarray:
    """``x`` as uint8 codes of ``fmt``: an array of the format's ml_dtypes type is viewed, a
    uint8 array taken as codes; anything else is refused."""
    dt = np.dtype(get_format(fmt).dtype)
    return operand_codes(x, fmt, name, dt, np.uint8, f"{dt} or uint8 codes")


def fp32_bits(v: float) -> int:
    """The fp32 bit pattern of ``v`` (rounded to fp32 by RNE)."""
    return int(np.float32(v).view(np.uint32))


def fp8_gemm_words(rows: int, cols: int, a: np.ndarray, b: np.ndarray
                   ) -> tuple[GemmLayout, list[int], list[int]]:
    """(layout, A buffer words, B buffer words) of C = A·B (uint8 codes) for a rows x cols core."""
    return ws_buffer_words("fp8", rows, cols, a, b)


def prepare_fp8(gemms: Sequence[Fp8Gemm], params: Fp8Params) -> PreparedJob:
    """Each :class:`Fp8Gemm` as one GEMM of the bench; ValueError for no GEMM, codes of another
    format or a GEMM whose buffers exceed ``params.depths``."""
    def encoded(g: Fp8Gemm):
        a, b = fp8_codes(g.a, params.fmt, "A"), fp8_codes(g.b, params.fmt, "B")
        return (*fp8_gemm_words(params.rows, params.cols, a, b),
                {"scale_a": fp32_bits(g.scale_a), "scale_b": fp32_bits(g.scale_b)})
    return prepare_float_gemms("fp8", map(encoded, gemms), params.depths)
