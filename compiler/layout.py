"""On-chip memory layouts of the systolic GEMM core (the compiler owns them; RTL and drivers use them).

The core has three SRAMs (sizes from ``ArchSpec.memory``):

* **A buffer**: words of ``rows`` int8 lanes, ``scratchpad_bytes / 2 / rows`` words deep.
* **B buffer**: words of ``cols`` int8 lanes, ``scratchpad_bytes / 2 / cols`` words deep.
* **accumulator**: words of ``cols`` int32 lanes, ``accumulator_bytes / 4 / cols`` words deep.

Lane ``i`` of a word occupies bits ``[i*w, (i+1)*w)`` (lane 0 in the LSBs), two's complement.
Elements outside the logical matrix are zero. With R = rows, C = cols, KB = ceil(K/R),
NB = ceil(N/C), MB = ceil(M/R):

=========  ==========================  ===================================================
dataflow   buffer                      word address -> lane i holds
=========  ==========================  ===================================================
ws         A  (KB*M words)             kb*M + m          -> A[m, kb*R + i]
ws         B  (NB*KB*R words)          (nb*KB + kb)*R + r -> B[kb*R + r, nb*C + i]
ws         acc (NB*M words)            nb*M + m          -> C[m, nb*C + i]
os         A  (MB*K words)             mb*K + k          -> A[mb*R + i, k]
os         B  (NB*K words)             nb*K + k          -> B[k, nb*C + i]
os         acc (NB*MB*R words)         nb*MB*R + mb*R + r -> C[mb*R + r, nb*C + i]
=========  ==========================  ===================================================

Fold order (the order the core visits tiles): WS ``nb`` outer, ``kb`` inner; OS ``nb`` outer,
``mb`` inner.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

import numpy as np

from tilewright.arch import ArchSpec

__all__ = ["GemmLayout", "DoesNotFit", "pack_lanes", "unpack_lanes", "MAX_DIM"]

#: largest M, K or N one GEMM command may carry (16-bit size registers in the core)
MAX_DIM = 65535


class DoesNotFit(ValueError):
    """A GEMM shape that does not fit the core's buffers; the message names buffer and sizes."""


@dataclass(frozen=True)
class GemmLayout:
    """Where one M x K x N GEMM lives in the core's buffers for a given ArchSpec."""

    rows: int
    cols: int
    dataflow: str
    m: int
    k: int
    n: int

    @classmethod
    def for_arch(cls, arch: ArchSpec, m: int, k: int, n: int) -> "GemmLayout":
        te = arch.tensor_engine
        return cls(te.rows, te.cols, te.dataflow, m, k, n)

    # ---- fold counts -------------------------------------------------------------------
    @property
    def kb(self) -> int:
        return ceil(self.k / self.rows)

    @property
    def nb(self) -> int:
        return ceil(self.n / self.cols)

    @property
    def mb(self) -> int:
        return ceil(self.m / self.rows)

    @property
    def folds(self) -> int:
        """Tiles the core visits: WS KB*NB, OS MB*NB."""
        return self.kb * self.nb if self.dataflow == "ws" else self.mb * self.nb

    # ---- buffer words ------------------------------------------------------------------
    @property
    def a_words(self) -> int:
        return self.kb * self.m if self.dataflow == "ws" else self.mb * self.k

    @property
    def b_words(self) -> int:
        return self.nb * self.kb * self.rows if self.dataflow == "ws" else self.nb * self.k

    @property
    def acc_words(self) -> int:
        return self.nb * self.m if self.dataflow == "ws" else self.nb * self.mb * self.rows

    @staticmethod
    def depths(arch: ArchSpec) -> tuple[int, int, int]:
        """(A, B, accumulator) buffer depths in words for ``arch``."""
        te, mem = arch.tensor_engine, arch.memory
        return (mem.scratchpad_bytes // 2 // te.rows, mem.scratchpad_bytes // 2 // te.cols,
                mem.accumulator_bytes // 4 // te.cols)

    def fits(self, arch: ArchSpec) -> bool:
        try:
            self.check_fits(arch)
        except DoesNotFit:
            return False
        return True

    def check_fits(self, arch: ArchSpec) -> None:
        for name, v in (("M", self.m), ("K", self.k), ("N", self.n)):
            if not 1 <= v <= MAX_DIM:
                raise DoesNotFit(f"GEMM {name}={v}: must be from 1 to {MAX_DIM}")
        da, db, dc = self.depths(arch)
        for buf, need, have in (("A buffer", self.a_words, da), ("B buffer", self.b_words, db),
                                ("accumulator", self.acc_words, dc)):
            if need > have:
                raise DoesNotFit(
                    f"GEMM {self.m}x{self.k}x{self.n} on {arch.name}: {buf} needs {need} words, "
                    f"has {have} (memory.scratchpad_kib={arch.memory.scratchpad_kib}, "
                    f"memory.accumulator_kib={arch.memory.accumulator_kib})")

    # ---- packing -----------------------------------------------------------------------
    def a_lanes(self, a: np.ndarray) -> np.ndarray:
        """A (M x K int8) -> (a_words, rows) int8 lanes in buffer order."""
        R = self.rows
        if self.dataflow == "ws":
            pad = np.zeros((self.m, self.kb * R), np.int8)
            pad[:, : self.k] = a
            return pad.reshape(self.m, self.kb, R).transpose(1, 0, 2).reshape(-1, R)
        pad = np.zeros((self.mb * R, self.k), np.int8)
        pad[: self.m] = a
        return pad.reshape(self.mb, R, self.k).transpose(0, 2, 1).reshape(-1, R)

    def b_lanes(self, b: np.ndarray) -> np.ndarray:
        """B (K x N int8) -> (b_words, cols) int8 lanes in buffer order."""
        R, C = self.rows, self.cols
        if self.dataflow == "ws":
            pad = np.zeros((self.kb * R, self.nb * C), np.int8)
            pad[: self.k, : self.n] = b
            # (kb, r, nb, c) -> (nb, kb, r, c)
            return pad.reshape(self.kb, R, self.nb, C).transpose(2, 0, 1, 3).reshape(-1, C)
        pad = np.zeros((self.k, self.nb * C), np.int8)
        pad[:, : self.n] = b
        return pad.reshape(self.k, self.nb, C).transpose(1, 0, 2).reshape(-1, C)

    def c_from_lanes(self, lanes: np.ndarray) -> np.ndarray:
        """(acc_words, cols) int32 lanes in buffer order -> C (M x N int32)."""
        C = self.cols
        if self.dataflow == "ws":
            full = lanes.reshape(self.nb, self.m, C).transpose(1, 0, 2).reshape(self.m, -1)
        else:
            full = lanes.reshape(self.nb, self.mb * self.rows, C).transpose(1, 0, 2)
            full = full.reshape(self.mb * self.rows, -1)
        return np.ascontiguousarray(full[: self.m, : self.n]).astype(np.int32)


def pack_lanes(lanes: np.ndarray, bits: int) -> list[int]:
    """Rows of signed lanes -> one unsigned integer per row, lane 0 in the LSBs."""
    mask = (1 << bits) - 1
    u = lanes.astype(np.int64) & mask
    out = []
    for row in u.tolist():
        word = 0
        for i, v in enumerate(row):
            word |= v << (i * bits)
        out.append(word)
    return out


def unpack_lanes(words: list[int], lanes: int, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_lanes`: integers -> (len(words), lanes) signed int64 array."""
    mask, sign = (1 << bits) - 1, 1 << (bits - 1)
    out = np.empty((len(words), lanes), np.int64)
    for r, word in enumerate(words):
        for i in range(lanes):
            v = (word >> (i * bits)) & mask
            out[r, i] = v - (1 << bits) if v & sign else v
    return out
