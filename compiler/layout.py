"""On-chip memory layouts of the GEMM cores (the compiler owns them; RTL and drivers use them).

A core has three SRAMs (sizes from ``ArchSpec.memory``; word sizes :meth:`GemmLayout.word_bytes`):

* **A buffer**: ``scratchpad_bytes / 2 / a`` words of ``a`` int8 lanes.
* **B buffer**: ``scratchpad_bytes / 2 / b`` words of ``b`` int8 lanes.
* **accumulator**: ``accumulator_bytes / (4 c)`` words of ``c`` int32 lanes.

The systolic core (:mod:`tilewright.rtl.gemm_core`) has ``a = rows``, ``b = c = cols``; the
tile-MAC core (:mod:`tilewright.rtl.tile_core`, kinds ``adder_tree``/``outer_product``/``cube``,
engine tile (Tm, Tk, Tn) = (rows, depth, cols)) has one engine operand tile per word:
``a = Tm*Tk``, ``b = Tk*Tn``, ``c = Tm*Tn``.

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

Tile-MAC kinds (``dataflow`` = the kind's name; MB = ceil(M/Tm), KB = ceil(K/Tk),
NB = ceil(N/Tn)); a word is a row-major tile, the engine's operand layout
(:func:`tilewright.rtl.cube.operand_layout`), lane ``i*Tk + k`` / ``k*Tn + j`` / ``i*Tn + j``:

==========  ==========================  ===================================================
buffer      words                       word address -> lane holds
==========  ==========================  ===================================================
A           MB*KB                       mb*KB + kb -> lane i*Tk + k: A[mb*Tm + i, kb*Tk + k]
B           NB*KB                       nb*KB + kb -> lane k*Tn + j: B[kb*Tk + k, nb*Tn + j]
acc         MB*NB                       mb*NB + nb -> lane i*Tn + j: C[mb*Tm + i, nb*Tn + j]
==========  ==========================  ===================================================

The tile-MAC core visits output tiles ``mb`` outer, ``nb`` inner (accumulator words in order),
each over ``kb`` = 0 .. KB-1 (one A and one B word per beat).

MX formats (``tensor_engine.input_format`` with E8M0 block scales, :mod:`tilewright.formats`;
WS only, R = 32 = the MX block, so K tile ``kb`` is block ``kb``): the block scales travel in the
words with their elements — one scale lane of 8 bits (the E8M0 code) appended above the element
lanes, so A words are ``R + 1`` bytes, B words ``2 C`` bytes, accumulator words ``C`` fp32
lanes (``4 C`` bytes), and the DMA, the ISA and the external image treat them like any other word
(:class:`~tilewright.rtl.mx_core.MxGemmCore` reads the scales from there):

=========  ==========================  ===================================================
buffer     word address                scale bits above the element lanes
=========  ==========================  ===================================================
A          kb*M + m                    ``[8R, 8R+8)``: Xa[m, kb]
B          (nb*KB + kb)*R + r          ``[8C + 8i, 8C + 8i + 8)``: Xb[kb, nb*C + i] (every r)
=========  ==========================  ===================================================

Padding: elements +0 (a padded k adds +0 to a block dot); the scales of padded B columns are
127 (2**0), their outputs are never read back.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.errors import UserError
from tilewright.formats import bits_of, get_format

__all__ = ["GemmLayout", "DoesNotFit", "pack_lanes", "unpack_lanes", "MAX_GEMM_DIM", "TILE_KINDS",
           "ab_buffer_bytes", "half_depth", "SCALE_BITS", "mx_format"]

#: bits of an operand lane (an int8 / fp8 / MX element code) in an A/B word
OPERAND_BITS = bits_of("int8")
#: bits of an MX block-scale lane (an E8M0 code) in an A/B word of an MX core
SCALE_BITS = 8


def mx_format(arch: ArchSpec) -> bool:
    """True when ``arch``'s tensor engine takes an MX format (E8M0 block scales in its words)."""
    return get_format(arch.tensor_engine.input_format).scaling == "e8m0"


#: the tile-MAC ``tensor_engine.kind`` values (the layout's ``dataflow`` is then the kind)
TILE_KINDS = ("adder_tree", "outer_product", "cube")

#: largest M, K or N one GEMM command may carry (elements; 16-bit size registers in the core);
#: not the largest array dimension (:data:`tilewright.arch.MAX_ARRAY_DIM`)
MAX_GEMM_DIM = 65535


def ab_buffer_bytes(arch: ArchSpec) -> int:
    """Bytes of the A buffer, and of the B buffer: the scratchpad (``memory.scratchpad_kib``)
    split equally between the two."""
    return arch.memory.scratchpad_bytes // 2


def half_depth(depth: int) -> int:
    """Words of one half of a double-buffered buffer of ``depth`` words (half 1 starts there)."""
    return depth // 2


class DoesNotFit(UserError, ValueError):
    """A GEMM shape that does not fit the core's buffers; the message names buffer and sizes."""


@dataclass(frozen=True)
class GemmLayout:
    """Where one M x K x N GEMM lives in the core's buffers for a given ArchSpec.

    ``rows``/``cols``: the systolic array's, or a tile-MAC engine's Tm/Tn; ``depth``: Tk (1 for
    systolic); ``dataflow``: ``ws``/``os`` or the tile-MAC kind (:data:`TILE_KINDS`)."""

    rows: int
    cols: int
    dataflow: str
    m: int
    k: int
    n: int
    depth: int = 1
    mx: bool = False     #: MX words: a scale lane above the element lanes (module docstring)

    @classmethod
    def for_arch(cls, arch: ArchSpec, m: int, k: int, n: int) -> "GemmLayout":
        te = arch.tensor_engine
        return cls(te.rows, te.cols, te.kind if te.kind in TILE_KINDS else te.dataflow, m, k, n,
                   te.depth, mx_format(arch))

    @property
    def tile(self) -> bool:
        """True for a tile-MAC engine's layout (one engine operand tile per word)."""
        return self.dataflow in TILE_KINDS

    @property
    def acc_lanes(self) -> int:
        """int32 lanes per accumulator word."""
        return self.rows * self.cols if self.tile else self.cols

    # ---- fold counts -------------------------------------------------------------------
    @property
    def kb(self) -> int:
        return ceil(self.k / (self.depth if self.tile else self.rows))

    @property
    def nb(self) -> int:
        return ceil(self.n / self.cols)

    @property
    def mb(self) -> int:
        return ceil(self.m / self.rows)

    @property
    def folds(self) -> int:
        """Tiles the core visits: WS KB*NB, OS and tile-MAC MB*NB."""
        return self.kb * self.nb if self.dataflow == "ws" else self.mb * self.nb

    # ---- buffer words ------------------------------------------------------------------
    @property
    def a_words(self) -> int:
        if self.tile:
            return self.mb * self.kb
        return self.kb * self.m if self.dataflow == "ws" else self.mb * self.k

    @property
    def b_words(self) -> int:
        if self.tile:
            return self.nb * self.kb
        return self.nb * self.kb * self.rows if self.dataflow == "ws" else self.nb * self.k

    @property
    def acc_words(self) -> int:
        if self.tile:
            return self.mb * self.nb
        return self.nb * self.m if self.dataflow == "ws" else self.nb * self.mb * self.rows

    @staticmethod
    def word_bytes(arch: ArchSpec) -> dict[str, int]:
        """Bytes per on-chip word ``{"a", "b", "c"}`` (int8 / int8 / int32 lanes): systolic
        ``rows``, ``cols``, ``4 cols``; tile-MAC ``Tm*Tk``, ``Tk*Tn``, ``4 Tm*Tn``; MX (8-bit
        element lanes plus the scale lanes of the module docstring) ``rows + 1``, ``2 cols``,
        ``4 cols``."""
        te = arch.tensor_engine
        if te.kind in TILE_KINDS:
            tm, tk, tn = te.tile_shape
            return {"a": tm * tk, "b": tk * tn, "c": 4 * tm * tn}
        sb = SCALE_BITS // 8 if mx_format(arch) else 0
        return {"a": te.rows + sb, "b": te.cols * (1 + sb), "c": 4 * te.cols}

    @staticmethod
    def depths(arch: ArchSpec) -> tuple[int, int, int]:
        """(A, B, accumulator) buffer depths in words for ``arch``."""
        mem, wb = arch.memory, GemmLayout.word_bytes(arch)
        ab = ab_buffer_bytes(arch)
        return (ab // wb["a"], ab // wb["b"], mem.accumulator_bytes // wb["c"])

    def fits(self, arch: ArchSpec) -> bool:
        try:
            self.check_fits(arch)
        except DoesNotFit:
            return False
        return True

    def check_fits(self, arch: ArchSpec) -> None:
        for name, v in (("M", self.m), ("K", self.k), ("N", self.n)):
            if not 1 <= v <= MAX_GEMM_DIM:
                raise DoesNotFit(f"GEMM {name}={v}: must be from 1 to {MAX_GEMM_DIM}")
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
        """A (M x K int8) -> (a_words, lanes) int8 lanes in buffer order."""
        R = self.rows
        if self.tile:
            return _tiles(a, R, self.depth, self.mb, self.kb)
        if self.dataflow == "ws":
            pad = np.zeros((self.m, self.kb * R), np.int8)
            pad[:, : self.k] = a
            return pad.reshape(self.m, self.kb, R).transpose(1, 0, 2).reshape(-1, R)
        pad = np.zeros((self.mb * R, self.k), np.int8)
        pad[: self.m] = a
        return pad.reshape(self.mb, R, self.k).transpose(0, 2, 1).reshape(-1, R)

    def b_lanes(self, b: np.ndarray) -> np.ndarray:
        """B (K x N int8) -> (b_words, lanes) int8 lanes in buffer order."""
        R, C = self.rows, self.cols
        if self.tile:     # words nb*KB + kb: tiles of B transposed, each read back row-major
            return _tiles(b.T, C, self.depth, self.nb, self.kb, transpose=True)
        if self.dataflow == "ws":
            pad = np.zeros((self.kb * R, self.nb * C), np.int8)
            pad[: self.k, : self.n] = b
            # (kb, r, nb, c) -> (nb, kb, r, c)
            return pad.reshape(self.kb, R, self.nb, C).transpose(2, 0, 1, 3).reshape(-1, C)
        pad = np.zeros((self.k, self.nb * C), np.int8)
        pad[:, : self.n] = b
        return pad.reshape(self.k, self.nb, C).transpose(1, 0, 2).reshape(-1, C)

    def a_words_of(self, a: np.ndarray, xa: np.ndarray | None = None) -> list[int]:
        """A (M x K codes, 8 bit) -> the A buffer's words (unsigned ints, :meth:`a_lanes` packed);
        MX layouts also take ``xa`` (M x KB E8M0 codes) into each word's scale lane."""
        words = pack_lanes(self.a_lanes(a.view(np.int8)), OPERAND_BITS)
        if not self.mx:
            return words
        xa = self._scales(xa, (self.m, self.kb), "xa")
        top = OPERAND_BITS * self.rows                                   # word (kb, m) -> Xa[m, kb]
        return [w | (int(x) << top) for w, x in zip(words, xa.T.reshape(-1))]

    def b_words_of(self, b: np.ndarray, xb: np.ndarray | None = None) -> list[int]:
        """B (K x N codes, 8 bit) -> the B buffer's words; MX layouts also take ``xb`` (KB x N
        E8M0 codes) into the scale lanes (the same in the R words of a fold)."""
        words = pack_lanes(self.b_lanes(b.view(np.int8)), OPERAND_BITS)
        if not self.mx:
            return words
        xb = self._scales(xb, (self.kb, self.n), "xb")
        R, C = self.rows, self.cols
        pad = np.full((self.kb, self.nb * C), 127, np.uint8)  # padded columns: 2**0
        pad[:, : self.n] = xb
        lanes = np.repeat(pad.reshape(self.kb, self.nb, C).transpose(1, 0, 2), R, axis=1)
        return [w | (x << (OPERAND_BITS * C))
                for w, x in zip(words, pack_lanes(lanes.reshape(-1, C), SCALE_BITS))]

    def _scales(self, x, shape: tuple[int, int], name: str) -> np.ndarray:
        if self.dataflow != "ws" or x is None or np.shape(x) != shape:
            raise ValueError(f"MX GEMM {self.m}x{self.k}x{self.n}: {name} must be the "
                             f"{shape[0]}x{shape[1]} E8M0 block-scale codes of a WS layout, "
                             f"not {None if x is None else np.shape(x)}")
        return np.asarray(x, np.uint8)

    def c_from_lanes(self, lanes: np.ndarray) -> np.ndarray:
        """(acc_words, acc_lanes) int32 lanes in buffer order -> C (M x N int32)."""
        C = self.cols
        if self.tile:
            R = self.rows
            full = lanes.reshape(self.mb, self.nb, R, C).transpose(0, 2, 1, 3)
            full = full.reshape(self.mb * R, self.nb * C)
        elif self.dataflow == "ws":
            full = lanes.reshape(self.nb, self.m, C).transpose(1, 0, 2).reshape(self.m, -1)
        else:
            full = lanes.reshape(self.nb, self.mb * self.rows, C).transpose(1, 0, 2)
            full = full.reshape(self.mb * self.rows, -1)
        return np.ascontiguousarray(full[: self.m, : self.n]).astype(np.int32)


def _tiles(x: np.ndarray, r: int, c: int, rb: int, cb: int, transpose: bool = False
           ) -> np.ndarray:
    """``x`` zero-padded to rb*r x cb*c, cut into r x c tiles in row-major tile order
    (rb outer), each flattened row-major (``transpose``: each tile flattened as its transpose,
    c x r row-major)."""
    pad = np.zeros((rb * r, cb * c), np.int8)
    pad[: x.shape[0], : x.shape[1]] = x
    t = pad.reshape(rb, r, cb, c).transpose(0, 2, 1, 3)      # (rb, cb, r, c)
    if transpose:
        t = t.transpose(0, 1, 3, 2)
    return t.reshape(rb * cb, r * c)


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
