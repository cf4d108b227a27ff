"""GEMM commands for the RTL GEMM core: operand words, sizes, and their binary stream encoding.

One :class:`GemmCommand` is everything a host sends the core for one ``C = A @ B``: the A and B
buffer words (layouts of :mod:`tilewright.compiler.layout`, lane 0 in the LSBs), the sizes
``m, k, n`` and how many accumulator words to read back. Both drivers use it — the cocotb bench
(:mod:`tilewright.cocotb_tests.gemm_core_bench`, words as Python ints) and the C++ fast driver
(:func:`tilewright.cosim.fast_runs.run_core_fast`, the binary stream below) — so they cannot
disagree on encoding.

Binary stream (every field a little-endian uint32; a buffer word of ``w`` bits is ``ceil(w/32)``
chunks, least significant first — for int8 lanes that is simply the lane bytes, zero-padded):

* stream header: ``MAGIC_STREAM``, rows R, cols C;
* per command: ``MAGIC_GEMM``, m, k, n, a_count, b_count, acc_count, then ``a_count`` A words
  (``ceil(8R/32)`` chunks each) and ``b_count`` B words (``ceil(8C/32)`` chunks each);
* end of stream: ``MAGIC_END``.

Result stream (driver -> host), per command: ``MAGIC_RESULT``, cycles by the core's counter,
cycles counted by the driver, busy-period wall time in ns (low, high uint32), acc_count, then
``acc_count`` accumulator words of C int32 lanes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.layout import GemmLayout, pack_lanes, unpack_lanes

__all__ = ["GemmCommand", "GemmResult", "MAGIC_STREAM", "MAGIC_GEMM", "MAGIC_END", "MAGIC_RESULT",
           "stream_header", "stream_end", "read_result", "read_exact", "chunks"]

MAGIC_STREAM = 0x31475754   #: "TWG1"
MAGIC_GEMM = 0x4D4D4547     #: "GEMM"
MAGIC_END = 0x454E4F44      #: "DONE"
MAGIC_RESULT = 0x544C5352   #: "RSLT"

ELEMENT_BITS, ACC_BITS = 8, 32


def chunks(bits: int) -> int:
    """32-bit chunks per buffer word of ``bits`` bits."""
    return (bits + 31) // 32


def _lane_bytes(lanes: np.ndarray) -> bytes:
    """(words, L) int8 lanes -> little-endian words of ceil(8L/32) uint32 chunks each."""
    words, n = lanes.shape
    padded = np.zeros((words, 4 * chunks(ELEMENT_BITS * n)), np.int8)
    padded[:, :n] = lanes
    return padded.tobytes()


@dataclass(frozen=True)
class GemmCommand:
    """One GEMM for the core: layout plus A/B buffer contents as (words, lanes) int8 arrays."""

    layout: GemmLayout
    a_lanes: np.ndarray     #: (a_words, rows) int8
    b_lanes: np.ndarray     #: (b_words, cols) int8

    @classmethod
    def from_operands(cls, arch: ArchSpec, a: np.ndarray, b: np.ndarray) -> "GemmCommand":
        """Encode ``a`` (M x K int8) @ ``b`` (K x N int8); raises DoesNotFit if too large."""
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise ValueError(f"GEMM operands must be M x K and K x N, got {a.shape} and {b.shape}")
        m, k = a.shape
        lay = GemmLayout.for_arch(arch, m, k, b.shape[1])
        lay.check_fits(arch)
        return cls(lay, lay.a_lanes(a), lay.b_lanes(b))

    @property
    def a_words(self) -> list[int]:
        """A buffer words as unsigned ints (what the cocotb bench writes)."""
        return pack_lanes(self.a_lanes, ELEMENT_BITS)

    @property
    def b_words(self) -> list[int]:
        return pack_lanes(self.b_lanes, ELEMENT_BITS)

    @property
    def acc_words(self) -> int:
        """Accumulator words to read back after the GEMM."""
        return self.layout.acc_words

    def c_from_words(self, words: list[int]) -> np.ndarray:
        """Accumulator words read back (unsigned ints) -> C (M x N int32)."""
        return self.layout.c_from_lanes(unpack_lanes(words, self.layout.cols, ACC_BITS))

    def c_from_lanes(self, lanes: np.ndarray) -> np.ndarray:
        """Accumulator words as (acc_words, cols) int32 lanes -> C (M x N int32)."""
        return self.layout.c_from_lanes(lanes)

    def to_bytes(self) -> bytes:
        """This command in the binary stream encoding (module docstring)."""
        lay = self.layout
        head = struct.pack("<7I", MAGIC_GEMM, lay.m, lay.k, lay.n, lay.a_words, lay.b_words,
                           lay.acc_words)
        return head + _lane_bytes(self.a_lanes) + _lane_bytes(self.b_lanes)


@dataclass(frozen=True)
class GemmResult:
    """What the fast driver returns for one command."""

    c_lanes: np.ndarray      #: (acc_words, cols) int32, buffer order
    cycles_counter: int      #: the core's ``cycles`` register after the GEMM
    cycles_driver: int       #: rising edges from the one sampling ``start`` to ``busy`` low
    busy_ns: int             #: wall time of the busy period in the driver (ns)


def stream_header(arch: ArchSpec) -> bytes:
    te = arch.tensor_engine
    return struct.pack("<3I", MAGIC_STREAM, te.rows, te.cols)


def stream_end() -> bytes:
    return struct.pack("<I", MAGIC_END)


def read_exact(f, n: int) -> bytes:
    """``n`` bytes from the binary file object ``f``; RuntimeError if the stream ends first."""
    data = f.read(n)
    if len(data) != n:
        raise RuntimeError(f"fast driver result stream ended early ({len(data)} of {n} bytes)")
    return data


def read_result(f, cols: int) -> GemmResult:
    """Read one result record from the binary file object ``f``."""
    magic, by_counter, by_driver, ns_lo, ns_hi, count = struct.unpack("<6I", read_exact(f, 24))
    if magic != MAGIC_RESULT:
        raise RuntimeError(f"fast driver result stream: bad magic {magic:#010x}")
    lanes = np.frombuffer(read_exact(f, 4 * cols * count), "<i4").reshape(count, cols)
    return GemmResult(lanes.astype(np.int32), by_counter, by_driver, ns_lo | (ns_hi << 32))
