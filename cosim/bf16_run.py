"""Run bf16 GEMMs on the Verilated :class:`~tilewright.rtl.systolic_bf16.Bf16GemmCore`.

:func:`bf16_gemm_words` packs bf16 codes into the core's buffer words (the WS rows of
:mod:`tilewright.compiler.layout`, 16-bit lanes, +0 padding) and :func:`c_from_acc_words` turns
accumulator words back into an (M, N) float32 array. :func:`run_bf16_gemms` builds (or reuses) the
core, runs every GEMM in one simulator process (:mod:`tilewright.cocotb_tests.bf16_bench`) and returns C
and the cycles ``busy`` was high. Compare with
``numerics.gemm(a, b, "bf16", acc="fp32", k_block=rows)`` (bit-exact) and
:func:`tilewright.rtl.systolic_bf16.bf16_gemm_cycles` (cycles).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from tilewright.compiler.layout import GemmLayout, pack_lanes
from tilewright.cosim.bf16_build import build_bf16_core
from tilewright.cosim.verilator import run_cocotb_bench

__all__ = ["Bf16GemmRun", "bf16_codes", "bf16_gemm_words", "c_from_acc_words", "run_bf16_gemms",
           "BF16_BENCH_MODULE"]

BF16_BENCH_MODULE = "tilewright.cocotb_tests.bf16_bench"


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


def run_bf16_gemms(rows: int, cols: int, gemms: Sequence[tuple[np.ndarray, np.ndarray]], *,
                   depth: int = 256, log=None) -> list[Bf16GemmRun]:
    """Run each (A, B) pair (bf16 arrays or uint16 codes) through a rows x cols
    :class:`Bf16GemmCore` with buffers of ``depth`` words each, in one simulator process."""
    if not gemms:
        raise ValueError("bf16 GEMM: no GEMMs given")
    build = build_bf16_core(rows, cols, depth, log=log)
    jobs, lays = [], []
    for a, b in gemms:
        lay, a_words, b_words = bf16_gemm_words(rows, cols, a, b)
        for buf, need in (("A", lay.a_words), ("B", lay.b_words), ("accumulator", lay.acc_words)):
            if need > depth:
                raise ValueError(f"bf16 GEMM {lay.m}x{lay.k}x{lay.n}: {buf} buffer needs {need} "
                                 f"words, the core has depth={depth}")
        lays.append(lay)
        jobs.append({"m": lay.m, "k": lay.k, "n": lay.n, "a_words": a_words, "b_words": b_words,
                     "acc_words": lay.acc_words})
    folder = Path(tempfile.mkdtemp(prefix="tilewright-bf16-"))
    (folder / "job.json").write_text(json.dumps({"jobs": jobs}))
    run_cocotb_bench(build, BF16_BENCH_MODULE, folder, "RTL bf16 core")
    results = json.loads((folder / "results.json").read_text())["jobs"]
    shutil.rmtree(folder, ignore_errors=True)
    return [Bf16GemmRun(c_from_acc_words(lay, r["acc"]), int(r["cycles"]))
            for lay, r in zip(lays, results)]
