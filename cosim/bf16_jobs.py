"""bf16 GEMMs encoded for the Verilated :class:`~tilewright.rtl.systolic_bf16.Bf16GemmCore` (top
``bf16-core``).

:func:`bf16_gemm_words` packs bf16 codes into the core's buffer words (the WS rows of
:mod:`tilewright.compiler.layout`, 16-bit lanes, +0 padding) and :func:`c_from_acc_words` turns
accumulator words back into an (M, N) float32 array. :func:`prepare_bf16` encodes a list of
(A, B) pairs for the bench (:mod:`tilewright.cocotb_tests.bf16_bench`, every GEMM in one simulator
process); each record is a :class:`Bf16GemmRun` (C and the cycles ``busy`` was high). Compare with
``numerics.gemm(a, b, "bf16", acc="fp32", k_block=rows)`` (bit-exact) and
:func:`tilewright.rtl.systolic_bf16.bf16_gemm_cycles` (cycles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from tilewright.compiler.layout import GemmLayout, pack_lanes
from tilewright.cosim.job import JobFiles, PreparedJob
from tilewright.rtl.systolic_bf16 import bf16_buffer_depths

__all__ = ["Bf16Params", "Bf16GemmRun", "bf16_codes", "bf16_gemm_words", "c_from_acc_words",
           "prepare_bf16"]


@dataclass(frozen=True)
class Bf16Params:
    """What a bf16 core build is generated from (not an ArchSpec: the ArchSpec-driven core is
    int8 only)."""

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


@dataclass
class Bf16GemmRun:
    """One GEMM on the RTL bf16 core."""

    c: np.ndarray     #: (M, N) float32 result (bit patterns as the hardware wrote them)
    cycles: int       #: cycles ``busy`` was high


def bf16_codes(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` as uint16 bf16 codes: a bfloat16 array is viewed, a uint16 array taken as codes."""
    x = np.asarray(x)
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"bf16 GEMM: operand {name} must be a non-empty 2-D array, got shape "
                         f"{x.shape}")
    if x.dtype == ml_dtypes.bfloat16:
        return x.view(np.uint16)
    if x.dtype == np.uint16:
        return x
    raise ValueError(f"bf16 GEMM: operand {name} dtype {x.dtype}: accepted: ml_dtypes.bfloat16 "
                     f"or uint16 bf16 codes")


def bf16_gemm_words(rows: int, cols: int, a: np.ndarray, b: np.ndarray
                    ) -> tuple[GemmLayout, list[int], list[int]]:
    """(layout, A buffer words, B buffer words) of C = A·B for a rows x cols core."""
    a, b = bf16_codes(a, "A"), bf16_codes(b, "B")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"bf16 GEMM: inner dimensions differ: A {a.shape} @ B {b.shape}")
    (m, k), n = a.shape, b.shape[1]
    lay = GemmLayout(rows, cols, "ws", m, k, n)
    R, C = rows, cols
    ap = np.zeros((m, lay.kb * R), np.uint16)
    ap[:, :k] = a
    a_lanes = ap.reshape(m, lay.kb, R).transpose(1, 0, 2).reshape(-1, R)
    bp = np.zeros((lay.kb * R, lay.nb * C), np.uint16)
    bp[:k, :n] = b
    b_lanes = bp.reshape(lay.kb, R, lay.nb, C).transpose(2, 0, 1, 3).reshape(-1, C)
    return lay, pack_lanes(a_lanes, 16), pack_lanes(b_lanes, 16)


def c_from_acc_words(lay: GemmLayout, words: Sequence[int]) -> np.ndarray:
    """(M, N) float32 C from the accumulator words (address nb*M + m, lane i -> column nb*C+i)."""
    if len(words) != lay.acc_words:
        raise ValueError(f"bf16 GEMM: {len(words)} accumulator words, expected {lay.acc_words}")
    C = lay.cols
    raw = b"".join(int(w).to_bytes(4 * C, "little") for w in words)
    lanes = np.frombuffer(raw, "<u4").reshape(lay.nb, lay.m, C)
    full = lanes.transpose(1, 0, 2).reshape(lay.m, -1)[:, :lay.n]
    return np.ascontiguousarray(full).view(np.float32)


def prepare_bf16(gemms: Sequence[tuple[np.ndarray, np.ndarray]], params: Bf16Params
                 ) -> PreparedJob:
    """Each (A, B) pair (bf16 arrays or uint16 codes) as one GEMM of the bench; ValueError for
    no GEMM or a GEMM whose buffers exceed ``params.buffer_depths``."""
    if not gemms:
        raise ValueError("bf16 GEMM: no GEMMs given")
    jobs, lays = [], []
    for a, b in gemms:
        lay, a_words, b_words = bf16_gemm_words(params.rows, params.cols, a, b)
        for buf, need, have in zip(("A", "B", "accumulator"),
                                   (lay.a_words, lay.b_words, lay.acc_words),
                                   params.buffer_depths):
            if need > have:
                raise ValueError(f"bf16 GEMM {lay.m}x{lay.k}x{lay.n}: {buf} buffer needs {need} "
                                 f"words, the core has {have}")
        lays.append(lay)
        jobs.append({"m": lay.m, "k": lay.k, "n": lay.n, "a_words": a_words, "b_words": b_words,
                     "acc_words": lay.acc_words})

    def decode(res) -> dict:
        return {"records": [Bf16GemmRun(c_from_acc_words(lay, r["acc"]), int(r["cycles"]))
                            for lay, r in zip(lays, res.results["results"])]}
    return PreparedJob(JobFiles({"jobs": jobs}), decode)
