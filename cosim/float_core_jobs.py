"""The job the floating-point GEMM cores share (tops ``bf16-core``, ``fp8-core``, ``mx-core``).

The three cores have the same ports and the same WS buffers (the WS rows of
:mod:`tilewright.compiler.layout`, code lanes padded with +0, an accumulator of fp32 lanes); they
differ in their operands' codes (16-bit bf16, 8-bit fp8 or MX elements) and in what rides along
(fp8's per-tensor scales, MX's E8M0 scale codes above the lanes). Each core's module
(:mod:`~tilewright.cosim.bf16_jobs`, :mod:`~tilewright.cosim.fp8_jobs`,
:mod:`~tilewright.cosim.mx_jobs`) turns its operands into codes and words with
:func:`operand_codes` and :func:`ws_buffer_words`; :func:`prepare_float_gemms` checks the buffers,
encodes the bench's job list (:mod:`tilewright.cocotb_tests.float_core_bench`) and decodes each
result into a :class:`FloatGemmRun` with :func:`c_from_acc_words`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tilewright.compiler.layout import GemmLayout, pack_lanes
from tilewright.cosim.job import JobFiles, PreparedJob

__all__ = ["FloatGemmRun", "operand_codes", "ws_buffer_words", "c_from_acc_words",
           "EncodedGemm", "prepare_float_gemms"]


@dataclass
class FloatGemmRun:
    """One GEMM on a floating-point core."""

    c: np.ndarray     #: (M, N) float32 result (bit patterns as the hardware wrote them)
    cycles: int       #: cycles ``busy`` was high


def operand_codes(x: np.ndarray, what: str, name: str, typed, codes, accepted: str
                  ) -> np.ndarray:
    """``x`` (operand ``name`` of a ``what`` GEMM) as a 2-D array of ``codes`` (np.uint8 or
    np.uint16): an array of dtype ``typed`` (the format's ml_dtypes type) is viewed, one of dtype
    ``codes`` taken as codes; anything else is refused, the message listing ``accepted``."""
    x = np.asarray(x)
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"{what} GEMM: operand {name} must be a non-empty 2-D array, got shape "
                         f"{x.shape}")
    if x.dtype == np.dtype(typed):
        return x.view(codes)
    if x.dtype == np.dtype(codes):
        return x
    raise ValueError(f"{what} GEMM: operand {name} dtype {x.dtype}: accepted: {accepted}")


def ws_buffer_words(what: str, rows: int, cols: int, a: np.ndarray, b: np.ndarray
                    ) -> tuple[GemmLayout, list[int], list[int]]:
    """(layout, A buffer words, B buffer words) of C = A·B for a rows x cols WS core: ``a``
    (M x K) and ``b`` (K x N) are unsigned codes (uint8 or uint16, lanes of that width), padded
    with code 0 (+0) to whole K and N tiles; word ``kb*M + m`` of A holds A[m, kb*rows + i] in
    lane i, word ``(nb*KB + kb)*rows + r`` of B holds B[kb*rows + r, nb*cols + i]."""
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{what} GEMM: inner dimensions differ: A {a.shape} @ B {b.shape}")
    (m, k), n = a.shape, b.shape[1]
    lay = GemmLayout(rows, cols, "ws", m, k, n)
    ap = np.zeros((m, lay.kb * rows), a.dtype)
    ap[:, :k] = a
    a_lanes = ap.reshape(m, lay.kb, rows).transpose(1, 0, 2).reshape(-1, rows)
    bp = np.zeros((lay.kb * rows, lay.nb * cols), b.dtype)
    bp[:k, :n] = b
    b_lanes = bp.reshape(lay.kb, rows, lay.nb, cols).transpose(2, 0, 1, 3).reshape(-1, cols)
    return lay, pack_lanes(a_lanes, 8 * a.itemsize), pack_lanes(b_lanes, 8 * b.itemsize)


def c_from_acc_words(lay: GemmLayout, words: Sequence[int]) -> np.ndarray:
    """(M, N) float32 C from the accumulator words (address nb*M + m, lane i -> column nb*C+i)."""
    if len(words) != lay.acc_words:
        raise ValueError(f"bf16 GEMM: {len(words)} accumulator words, expected {lay.acc_words}")
    C = lay.cols
    raw = b"".join(int(w).to_bytes(4 * C, "little") for w in words)
    lanes = np.frombuffer(raw, "<u4").reshape(lay.nb, lay.m, C)
    full = lanes.transpose(1, 0, 2).reshape(lay.m, -1)[:, :lay.n]
    return np.ascontiguousarray(full).view(np.float32)


#: one GEMM for the bench: (layout, A buffer words, B buffer words, extra ``job.json`` fields)
EncodedGemm = tuple[GemmLayout, list[int], list[int], dict]


def prepare_float_gemms(what: str, encoded: Iterable[EncodedGemm],
                        depths: tuple[int, int, int]) -> PreparedJob:
    """The bench's job for the GEMMs ``encoded`` yields (encoded one at a time, each checked
    before the next is encoded): ``job.json`` ``jobs``, a list of ``{"m", "k", "n", "a_words",
    "b_words", "acc_words", **extra}``; each result decodes to a :class:`FloatGemmRun`.
    ValueError for no GEMM or one whose buffers exceed ``depths`` (A, B, accumulator words)."""
    jobs, lays = [], []
    for lay, a_words, b_words, extra in encoded:
        for buf, need, have in zip(("A", "B", "accumulator"),
                                   (lay.a_words, lay.b_words, lay.acc_words), depths):
            if need > have:
                raise ValueError(f"{what} GEMM {lay.m}x{lay.k}x{lay.n}: {buf} buffer needs "
                                 f"{need} words, the core has {have}")
        lays.append(lay)
        jobs.append({"m": lay.m, "k": lay.k, "n": lay.n, "a_words": a_words, "b_words": b_words,
                     "acc_words": lay.acc_words, **extra})
    if not jobs:
        raise ValueError(f"{what} GEMM: no GEMMs given")

    def decode(res) -> dict:
        return {"records": [FloatGemmRun(c_from_acc_words(lay, r["acc"]), int(r["cycles"]))
                            for lay, r in zip(lays, res.results["results"])]}
    return PreparedJob(JobFiles({"jobs": jobs}), decode)
