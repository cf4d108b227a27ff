"""bf16 GEMMs encoded for the Verilated :class:`~tilewright.rtl.systolic_bf16.Bf16GemmCore` (top
``bf16-core``).

:func:`bf16_gemm_words` packs bf16 codes into the core's buffer words (16-bit lanes; the WS
words every floating-point core shares, :mod:`tilewright.cosim.float_core_jobs`).
:func:`prepare_bf16` encodes a list of (A, B) pairs for the bench
(:mod:`tilewright.cocotb_tests.float_core_bench`, every GEMM in one simulator process); each
record is a :class:`~tilewright.cosim.float_core_jobs.FloatGemmRun` (C and the cycles ``busy``
was high). Compare with ``numerics.gemm(a, b, "bf16", acc="fp32", k_block=rows)`` (bit-exact)
and :func:`tilewright.rtl.systolic_bf16.bf16_gemm_cycles` (cycles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from tilewright.compiler.layout import GemmLayout
from tilewright.cosim.float_core_jobs import operand_codes, prepare_float_gemms, ws_buffer_words
from tilewright.cosim.job import PreparedJob
from tilewright.rtl.systolic_bf16 import bf16_buffer_depths

__all__ = ["Bf16Params", "bf16_codes", "bf16_gemm_words", "prepare_bf16"]


@dataclass(frozen=True)
class Bf16Params:
    """What a bf16 core build is generated from: rows, cols and buffer depths (from an ArchSpec:
    :meth:`for_arch`)."""

    rows: int
    cols: int
    depth: int = 256                 #: words in each of the A, B and accumulator buffers
    #: words in the A, B and accumulator buffers when they differ (None: ``depth`` each)
    depths: tuple[int, int, int] | None = None

    @property
    def buffer_depths(self) -> tuple[int, int, int]:
        """(A, B, accumulator) buffer depths in words."""
        return self.depths if self.depths is not None else (self.depth,) * 3

    def key(self) -> str:
        if self.depths is None:
            return f"{self.rows}x{self.cols}-d{self.depth}"
        return f"{self.rows}x{self.cols}-d{'-'.join(map(str, self.depths))}"

    @classmethod
    def for_arch(cls, arch) -> "Bf16Params":
        """The bf16 core an ArchSpec describes: ``tensor_engine`` rows x cols and the buffer
        depths of :func:`~tilewright.rtl.systolic_bf16.bf16_buffer_depths` (which refuses what
        the core does not build)."""
        te = arch.tensor_engine
        return cls(te.rows, te.cols, depths=bf16_buffer_depths(arch))


def bf16_codes(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` as uint16 bf16 codes: a bfloat16 array is viewed, a uint16 array taken as codes."""
    return operand_codes(x, "bf16", name, ml_dtypes.bfloat16, np.uint16,
                         "ml_dtypes.bfloat16 or uint16 bf16 codes")


def bf16_gemm_words(rows: int, cols: int, a: np.ndarray, b: np.ndarray
                    ) -> tuple[GemmLayout, list[int], list[int]]:
    """(layout, A buffer words, B buffer words) of C = A·B for a rows x cols core."""
    return ws_buffer_words("bf16", rows, cols, bf16_codes(a, "A"), bf16_codes(b, "B"))


def prepare_bf16(gemms: Sequence[tuple[np.ndarray, np.ndarray]], params: Bf16Params
                 ) -> PreparedJob:
    """Each (A, B) pair (bf16 arrays or uint16 codes) as one GEMM of the bench; ValueError for
    no GEMM or a GEMM whose buffers exceed ``params.buffer_depths``."""
    return prepare_float_gemms(
        "bf16", ((*bf16_gemm_words(params.rows, params.cols, a, b), {}) for a, b in gemms),
        params.buffer_depths)
