"""Codegen for the accelerator top's vector engine: vector kernels -> LOAD_V / VECTOR / STORE_V code.

A *vector kernel* is one vector-unit computation on raw signed Q8.8 operands
(:mod:`tilewright.dataflow_sim.vector_numerics` defines the arithmetic):

``elementwise``  ``op`` in add, sub, mul, max (two operands of one shape) or exp, recip, rsqrt,
                 silu, softplus, square, neg (one operand): the tensor is flattened into vector
                 words of ``lanes`` elements (the last word zero-padded). ``square`` (``x ** 2``,
                 e.g. a norm's ``pow``) is the unit's ``mul`` whose ``b`` reads the same words as
                 ``a`` (one operand loaded once; the two buffer read ports read one address).
                 ``neg`` (``-x``) is the unit's ``mul`` by the -1.0 constant word (``b_inc`` 0:
                 every beat reads that one word), as softmax negates its row maxima: exact for
                 every raw code but -32768, whose negation (+128.0) saturates to 32767.
``copy``         ``op`` copy, any ``shape``: the operand's int32 lanes (e.g. an fp32 tensor's
                 bits) moved through the vector buffer unchanged — per chunk of at most
                 ``VBUF_WORDS`` words one ``LOAD_V`` and one ``STORE_V`` to new external words,
                 no VECTOR instruction (bit-exact by construction, whatever the lanes hold).
``row``          ``op`` in sum, mean, rmax, softmax, argmax over the last axis of a 2-D operand
                 ``[rows, L]``: each row occupies ``ceil(L / lanes)`` words, padded with 0 (sum, mean),
                 -128.0 (rmax, softmax) or -2**31 (argmax, whose operand is int32 — e.g. the
                 LM head's logits — and whose result is each row's index of its largest element,
                 the lowest on ties), so padding never changes a result.
``requant``      ``op`` requant, ``shape`` ``(M, N)``: int32 accumulators ``[M, N]`` -> int8
                 with per-channel int32 multipliers ``[N]`` and shifts ``[N]`` (0..63); the
                 parameter words of each column word of ``lanes`` channels (multipliers, then
                 shifts) and the accumulator words column word by column word, one VECTOR
                 ``requant`` per column word (its b word the column word's multipliers).
``gather``       ``op`` gather, ``shape`` ``(rows, L)``: row ``idx`` of a table of int32 lanes
                 ``[rows, L]`` (e.g. an embedding table) fetched by ``LOAD_VI`` — the table
                 stays in external memory (``ceil(L / lanes)`` words per row, padded with 0), the
                 index is the run's index register (:meth:`VectorSegment.index`, the second
                 operand ``[idx]``), not an address the code holds; ``STORE_V`` writes the row.
``lookup``       ``op`` lookup, ``shape`` ``(n, rows, L)``: rows ``ids[0..n-1]`` of a table of
                 int32 lanes ``[rows, L]`` (operands: the table and ``ids [n]``), e.g. the
                 embedding rows of a prompt. Each id is an index word in external memory
                 (:data:`~tilewright.compiler.codegen.IDX_WORD_BYTES` bytes, written by the
                 host like any operand); per id ``LOAD_IDX`` of its word, then ``LOAD_VI`` of
                 the row into the next words of the vector buffer; ``STORE_V`` writes the
                 chunk's rows. The index register's start value is not used (the AXI/UART tops
                 need no ``idx`` input).
``scan``         ``op`` scan, ``shape`` ``(B, L, D, N)``: the SSM recurrence of a ``scan`` task on
                 the scan unit (:mod:`tilewright.dataflow_sim.scan_numerics` codes): operands a
                 codes ``[B, L, D, N]`` (unsigned Q0.16), b codes ``[B, L, D, N]``, c codes
                 ``[B, L, N]`` and h0 codes ``[B, D, N]`` (Q16.16); result ``(y [B, L, D],
                 h_last [B, D, N])``. Each of the ``B x D`` channels is one SCAN of ``L`` steps
                 with its ``N <= lanes`` state elements in the lanes (unused lanes zero); the
                 channels of a chunk share the chunk's c words.
``quantize``     ``op`` quantize, any ``shape``: the per-tensor int8 quantize of a raw Q8.8
                 tensor (flattened, the last word zero-padded: padding never changes the
                 largest magnitude) in one chunk of at most ``VBUF_WORDS - 2`` words —
                 ``qshift`` over all of it (the shift ``k``), then ``requant`` by 1 and ``k``
                 (:func:`_quantize_code`); result ``(codes [shape] in -127..127, [k])``, the
                 codes' scale ``2**(k - 8)``. Larger tensors raise :class:`DoesNotFit`.

Row ops run a whole chunk of rows per VECTOR instruction, one segment (``seg``) per row:
``sum``/``rmax`` are one instruction; ``mean`` is two — ``sum`` -> S per row (Q24.8), then
``rescale`` S x m / 2**s (:func:`mean_params`: the two parameter words, which follow each
chunk's rows in external memory and arrive with them in one ``LOAD_V``) -> the row's mean in Q8.8, rounded half up (exact as
:mod:`~tilewright.dataflow_sim.vector_numerics` states); ``softmax`` is seven — ``rmax`` -> m per row; ``mul``
m x (-1) -> -m; ``add`` rows + (-m) (b stepping once per row); ``exp``; ``sum`` -> s per row
(Q24.8); ``recip`` s; ``mul`` rows x 1/s — so each step is the unit's exact arithmetic. ``recip`` reads the low 16 bits of s as Q8.8, so the
row length is limited to 127 (a sum of exps <= 127.0): longer rows raise :class:`DoesNotFit`.

Code shape (one segment per kernel, run from its entry to END): the operand is cut into chunks that
fit the vector buffer (:data:`~tilewright.compiler.codegen.VBUF_WORDS` words, and at most 4095
beats per VECTOR); each chunk is ``LOAD_V`` (operands), the VECTOR instructions in place, then
``STORE_V`` of the result words. With one shared buffer nothing overlaps; the cycles follow from
:mod:`tilewright.dataflow_sim.accel_timing`.

Double-buffered vector buffer (ArchSpec ``vector_unit.double_buffer``; the bank rule in
:mod:`tilewright.compiler.codegen`): the elementwise, row, requant and scan kernels ping-pong —
chunk ``i`` lives in bank ``i % 2`` (from the bank's first word; softmax's -1.0 word in each
bank's last word — neg's too — and requant's parameter words at each bank's start, loaded once
per bank), and
:func:`_pingpong` orders the instructions so that chunk ``i + 1`` loads and chunk ``i - 1``
stores while chunk ``i`` computes. The operand is cut into at least 1, 2, 4 or 8 chunks
(:data:`DB_MIN_CHUNKS`; more when it does not fit a bank) and the order estimated fastest is
kept, so a small kernel keeps its single chunk when splitting it would cost more memory latency
than it hides. A row (or one channel's scan, one requant row) longer than a bank falls back to
the single-buffer code over the whole buffer (the bank rule then serialises it). gather and
lookup kernels are DMA only and unchanged, and so are copy kernels (chunks of the whole buffer,
one after the other: the loads and stores share the one DMA engine, so ping-pong would hide
nothing); a quantize kernel is one chunk and runs serially. The memory map is the same either
way, so results are bit-identical.

External memory holds, per kernel, the constant word (-1.0 in every lane, softmax and neg), each
chunk's operand words and each chunk's result words, at addresses this module assigns
(:class:`VectorSegment`); :meth:`VectorSegment.image` / :meth:`VectorSegment.result` convert
between arrays and external words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import (IDX_BITS, IDX_WORD_BYTES, IMEM_WORDS,
                                         REQUANT_SHIFT_BITS, VBUF_BANK_WORDS, VBUF_BANKS,
                                         VBUF_WORDS, VECTOR_OPCODES, VECTOR_OVERHEAD_CYCLES,
                                         SCAN_OVERHEAD_CYCLES,
                                         AssemblerError, CodegenError, Instr, assemble, beat_bytes,
                                         beats_to_words, field_slices, find_segment, index_beats,
                                         memory_latency_cycles, vbuf_bank_mask,
                                         vector_word_bytes, words_to_beats)
from tilewright.compiler.layout import DoesNotFit

__all__ = ["VectorKernel", "VectorSegment", "VectorIsa", "codegen_vector", "batch_kernels",
           "ELEMENTWISE_OPS", "SAME_OPERAND", "BY_NEG_ONE",
           "ROW_OPS", "Q_MIN", "Q_MAX", "SOFTMAX_MAX_ROW", "MEAN_MAX_ROW", "mean_params",
           "pack_vector_words", "unpack_vector_words", "PAIR_KINDS"]

BINARY = ("add", "sub", "mul", "max")
UNARY = ("exp", "recip", "rsqrt", "silu", "softplus")
#: kernel ops that are a unit op with both operands the same words: kernel op -> unit op
SAME_OPERAND = {"square": "mul"}
#: kernel ops that are a unit op with ``b`` the -1.0 constant word, broadcast to every beat
#: (``b_inc`` 0): kernel op -> unit op
BY_NEG_ONE = {"neg": "mul"}
ELEMENTWISE_OPS = BINARY + UNARY + tuple(SAME_OPERAND) + tuple(BY_NEG_ONE)
ROW_OPS = ("sum", "mean", "rmax", "softmax", "argmax")
KINDS = {"elementwise": ELEMENTWISE_OPS, "row": ROW_OPS, "scan": ("scan",),
         "requant": ("requant",), "gather": ("gather",), "lookup": ("lookup",),
         "quantize": ("quantize",), "copy": ("copy",)}
#: kinds whose result is a pair (scan: y and the final state; quantize: codes and the shift)
PAIR_KINDS = ("scan", "quantize")
Q_MIN, Q_MAX = -32768, 32767        #: raw Q8.8 range
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1     #: int32 lanes (argmax, requant)
SOFTMAX_MAX_ROW = 127               #: longest softmax row (sum of exps must stay a Q8.8 value)
SCAN_A_BITS = 16                    #: scan unit: a is unsigned Q0.16
SCAN_H_MIN, SCAN_H_MAX = -(1 << 31), (1 << 31) - 1   #: scan unit: b, c, h codes (Q16.16 int32)
_MAX_BEATS = (1 << field_slices("VECTOR")["count"][1]) - 1
_MAX_SEG = (1 << field_slices("VECTOR")["seg"][1]) - 1     #: longest VECTOR segment (beats)
_NEG_ONE = -256                     #: -1.0 in Q8.8
#: double-buffered vector buffer: the fewest chunks an elementwise or row kernel may be cut
#: into (when it has that many words or rows; more when it does not fit a bank) — each is
#: tried and the order :func:`_pingpong` estimates fastest is kept: more chunks overlap more of
#: the loads and stores with compute, but each pays the memory latency and the VECTORs'
#: pipeline fill again
DB_MIN_CHUNKS = (1, 2, 4, 8)
#: longest row a ``mean`` kernel takes (its result is exact as documented for n < 2**13)
MEAN_MAX_ROW = (1 << 13) - 1


def mean_params(n: int) -> tuple[int, int]:
    """(multiplier, shift) with which ``rescale`` turns the ``sum`` S of ``n`` Q8.8 elements
    (Q24.8) into their mean ``floor(S / n + 1/2)`` (Q8.8): ``s = 30 + floor(log2 n)``,
    ``m = ceil(2**s / n)`` (2**29 < m <= 2**30: one int32 lane). The error bound is derived in
    :mod:`tilewright.dataflow_sim.vector_numerics`."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MEAN_MAX_ROW:
        raise ValueError(f"vector unit mean: a row of {n} elements; rows of 1 to "
                         f"{MEAN_MAX_ROW} elements are taken")
    s = 30 + int(n).bit_length() - 1
    return -(-(1 << s) // int(n)), s


@dataclass(frozen=True)
class VectorKernel:
    """One vector computation: ``kind`` elementwise | row, ``op``, operand ``shape`` (row: 2-D)."""

    name: str
    kind: str
    op: str
    shape: tuple[int, ...]

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"vector kernel {self.name}: kind {self.kind!r}; accepted: "
                             f"{', '.join(KINDS)}")
        accepted = KINDS[self.kind]
        if self.op not in accepted:
            raise ValueError(f"vector kernel {self.name}: {self.kind} op {self.op!r}; "
                             f"accepted: {', '.join(accepted)}")
        if self.kind in ("row", "requant", "gather") and len(self.shape) != 2:
            what = {"row": "a row op"}.get(self.kind, self.kind)
            raise ValueError(f"vector kernel {self.name}: {what} takes a 2-D operand "
                             f"[rows, L], not shape {self.shape}")
        if self.kind == "lookup" and len(self.shape) != 3:
            raise ValueError(f"vector kernel {self.name}: a lookup takes shape (n, rows, L), not "
                             f"{self.shape}")
        if self.kind == "scan" and len(self.shape) != 4:
            raise ValueError(f"vector kernel {self.name}: a scan takes shape (B, L, D, N), not "
                             f"{self.shape}")
        if any(int(d) < 1 for d in self.shape) or not self.shape:
            raise ValueError(f"vector kernel {self.name}: shape {self.shape}: every dimension "
                             "must be at least 1")

    @property
    def operands(self) -> int:
        return {"scan": 4, "requant": 3, "gather": 2, "lookup": 2}.get(self.kind,
                                                         2 if self.op in BINARY else 1)

    def operand_shapes(self) -> list[tuple[int, ...]]:
        """Shape of each operand (scan: a, b, c, h0)."""
        if self.kind == "scan":
            b, length, d, n = self.shape
            return [self.shape, self.shape, (b, length, n), (b, d, n)]
        if self.kind == "requant":
            return [self.shape, self.shape[1:], self.shape[1:]]
        if self.kind == "gather":           # the table and the row index
            return [self.shape, (1,)]
        if self.kind == "lookup":           # the table and the row ids
            return [self.shape[1:], self.shape[:1]]
        return [self.shape] * self.operands


@dataclass(frozen=True)
class _Chunk:
    rows: int            #: rows (row kernels), words (elementwise) or channels (scan)
    in_addr: tuple[int, ...]   #: external word address of each operand's words (scan: c, a/b/h0)
    in_words: int        #: vector words per operand (scan: of the a/b/h0 block)
    out_addr: int
    out_words: int
    origin: tuple[int, int] = (0, 0)    #: scan: (batch, first channel) of the chunk


@dataclass(frozen=True)
class VectorSegment:
    """The code of one kernel (instructions ``entry .. end``, END last) and its memory map."""

    kernel: VectorKernel
    entry: int
    end: int
    lanes: int
    row_words: int               #: vector words per row (row kernels, requant) or 0
    const_addr: int              #: external address of the -1.0 word (softmax), of the
    #: parameter words (requant), of the index words (lookup), or -1
    chunks: tuple[_Chunk, ...]

    @property
    def task(self) -> str:
        return self.kernel.name

    def _words(self, x: np.ndarray, pad: int) -> list[int]:
        """Vector words of ``x`` (raw Q8.8) laid out for this kernel (rows padded per row)."""
        k = self.kernel
        if k.kind == "row":
            rows, length = k.shape
            grid = np.full((rows, self.row_words * self.lanes), pad, np.int64)
            grid[:, :length] = x
            return pack_vector_words(grid.reshape(-1, self.lanes))
        flat = np.zeros(-(-x.size // self.lanes) * self.lanes, np.int64)
        flat[:x.size] = x.reshape(-1)
        return pack_vector_words(flat.reshape(-1, self.lanes))

    def image(self, arch: ArchSpec, *operands: np.ndarray) -> dict[int, int]:
        """External words (address -> value) holding the operands (raw Q8.8 integer arrays of
        the kernel's shape; scan: the a, b, c, h0 codes) and the constant word."""
        k = self.kernel
        if len(operands) != k.operands:
            raise ValueError(f"kernel {k.name} ({k.op}) takes {k.operands} operand(s), "
                             f"not {len(operands)}")
        w, wb = beat_bytes(arch), vector_word_bytes(arch)
        out: dict[int, int] = {}

        def put(addr: int, words: list[int]) -> None:
            for j, beat in enumerate(words_to_beats(words, wb, w)):
                out[addr + j] = beat
        if k.kind == "scan":
            self._scan_image(put, operands)
            return out
        if k.kind == "requant":
            self._requant_image(put, operands)
            return out
        if k.kind == "lookup":
            self._lookup_image(arch, put, operands, out)
            return out
        if k.kind == "gather":
            table, _ = self._gather_operands(operands)
            grid = np.zeros((k.shape[0], self.row_words * self.lanes), np.int64)
            grid[:, :k.shape[1]] = table
            put(self.chunks[0].in_addr[0], pack_vector_words(grid.reshape(-1, self.lanes)))
            return out
        pad = (0 if k.op in ("sum", "mean", "copy") else I32_MIN if k.op == "argmax"
               else Q_MIN)
        lo, hi, what = ((I32_MIN, I32_MAX, "int32") if k.op in ("argmax", "copy")
                        else (Q_MIN, Q_MAX, "raw Q8.8"))
        for i, x in enumerate(operands):
            x = np.asarray(x)
            if x.shape != k.shape:
                raise ValueError(f"kernel {k.name}: operand {i} has shape {x.shape}, expected "
                                 f"{k.shape}")
            if x.dtype.kind not in "iu" or (x.size and (x.min() < lo or x.max() > hi)):
                raise ValueError(f"kernel {k.name}: operand {i}: {what} integers in "
                                 f"[{lo}, {hi}] expected")
            words = self._words(x.astype(np.int64), pad)
            pos = 0
            for c in self.chunks:
                put(c.in_addr[i], words[pos:pos + c.in_words])
                pos += c.in_words
        if k.op == "mean":          # each chunk's multiplier and shift words follow its rows
            r = -(-wb // w)
            params = pack_vector_words(
                np.repeat(np.array([mean_params(k.shape[1])], np.int64).T, self.lanes, 1))
            for c in self.chunks:
                put(c.in_addr[0] + c.in_words * r, params)
        if k.kind == "quantize":    # requant's multiplier word (1 in every lane) after x
            r = -(-wb // w)
            c = self.chunks[0]
            put(c.in_addr[0] + c.in_words * r, pack_vector_words(np.ones((1, self.lanes),
                                                                          np.int64)))
        if self.const_addr >= 0:
            put(self.const_addr, pack_vector_words(np.full((1, self.lanes), _NEG_ONE, np.int64)))
        return out

    def _int_operands(self, what: str, names, operands, noun: str, ranges) -> list[np.ndarray]:
        """The kernel's integer operands as int64 arrays, each checked against its shape
        (``kernel.operand_shapes()``) and its inclusive range ``(lo, hi)``; ValueError naming
        the kernel and the operand otherwise."""
        k, arrays = self.kernel, []
        for name, x, shape, (lo, hi) in zip(names, operands, k.operand_shapes(), ranges):
            x = np.asarray(x)
            if x.shape != shape:
                raise ValueError(f"kernel {k.name}: {what} operand {name} has shape {x.shape}, "
                                 f"expected {shape}")
            if x.dtype.kind not in "iu" or (x.size and (x.min() < lo or x.max() > hi)):
                raise ValueError(f"kernel {k.name}: {what} operand {name}: {noun} in "
                                 f"[{lo}, {hi}] expected")
            arrays.append(x.astype(np.int64))
        return arrays

    def index(self, *operands: np.ndarray) -> int:
        """The value the host writes to the index register before this kernel's run: a gather's
        row index (checked), 0 for every other kernel (their code has no ``LOAD_VI``)."""
        if self.kernel.kind != "gather":
            return 0
        return int(self._gather_operands(operands)[1][0])

    def _gather_operands(self, operands) -> list[np.ndarray]:
        rows = self.kernel.shape[0]
        if len(operands) != 2:
            raise ValueError(f"kernel {self.kernel.name} (gather) takes 2 operand(s) (table, "
                             f"index), not {len(operands)}")
        return self._int_operands("gather", ("table", "index"), operands, "integers",
                                  [(I32_MIN, I32_MAX), (0, min(rows, 1 << IDX_BITS) - 1)])

    def _lookup_image(self, arch: ArchSpec, put, operands, out: dict[int, int]) -> None:
        """The table's rows (``row_words`` words each, padded with 0) and one index word per id
        (:func:`~tilewright.compiler.codegen.index_beats` external words each)."""
        n, rows, length = self.kernel.shape
        table, ids = self._int_operands("lookup", ("table", "ids"), operands, "integers",
                                        [(I32_MIN, I32_MAX),
                                         (0, min(rows, 1 << IDX_BITS) - 1)])
        grid = np.zeros((rows, self.row_words * self.lanes), np.int64)
        grid[:, :length] = table
        put(self.chunks[0].in_addr[0], pack_vector_words(grid.reshape(-1, self.lanes)))
        for j, beat in enumerate(words_to_beats([int(i) for i in ids], IDX_WORD_BYTES,
                                                beat_bytes(arch))):
            out[self.const_addr + j] = beat

    def _requant_image(self, put, operands) -> None:
        """acc [M, N] (int32), multiplier [N] (int32), shift [N] (0..63): the parameter words
        (multiplier and shift words of each column word, interleaved) and each chunk's
        accumulator words, column word by column word."""
        acc, mult, shift = self._int_operands(
            "requant", ("acc", "multiplier", "shift"), operands, "integers",
            [(I32_MIN, I32_MAX), (I32_MIN, I32_MAX), (0, (1 << REQUANT_SHIFT_BITS) - 1)])
        nw = self.row_words
        cols = nw * self.lanes
        params = np.zeros((nw, 2, self.lanes), np.int64)
        params[:, 0] = np.pad(mult, (0, cols - len(mult))).reshape(nw, self.lanes)
        params[:, 1] = np.pad(shift, (0, cols - len(shift))).reshape(nw, self.lanes)
        put(self.const_addr, pack_vector_words(params.reshape(-1, self.lanes)))
        grid = np.zeros((acc.shape[0], cols), np.int64)
        grid[:, :acc.shape[1]] = acc
        for c in self.chunks:
            r0 = c.origin[0]
            blk = grid[r0:r0 + c.rows].reshape(c.rows, nw, self.lanes).transpose(1, 0, 2)
            put(c.in_addr[0], pack_vector_words(blk.reshape(-1, self.lanes)))

    def _scan_image(self, put, operands) -> None:
        k = self.kernel
        a, b, c, h0 = self._int_operands(
            "scan", ("a", "b", "c", "h0"), operands, "integer codes",
            [(0, (1 << SCAN_A_BITS) - 1)] + [(SCAN_H_MIN, SCAN_H_MAX)] * 3)
        n = k.shape[3]

        def words(v: np.ndarray) -> list[int]:        # [..., N] -> words, state lanes padded
            grid = np.zeros((*v.shape[:-1], self.lanes), np.int64)
            grid[..., :n] = v
            return pack_vector_words(grid.reshape(-1, self.lanes))
        for ch in self.chunks:
            bi, d0 = ch.origin
            put(ch.in_addr[0], words(c[bi]))
            block: list[int] = []
            for d in range(d0, d0 + ch.rows):
                block += words(a[bi, :, d]) + words(b[bi, :, d]) + words(h0[bi, d][None])
            put(ch.in_addr[1], block)

    def result(self, arch: ArchSpec, read) -> np.ndarray:
        """The kernel's result from external memory (``read(addr, count)`` -> W-byte words):
        int64 raw values — Q8.8 for every op but ``sum`` (Q24.8); shape: elementwise and
        softmax as the operand, sum, mean and rmax ``[rows]``."""
        k = self.kernel
        w, wb = beat_bytes(arch), vector_word_bytes(arch)
        r = -(-wb // w)
        words: list[int] = []
        for c in self.chunks:
            words += beats_to_words(read(c.out_addr, c.out_words * r), wb, w)
        lanes = unpack_vector_words(words, self.lanes)
        if k.kind == "scan":
            bt, length, d, n = k.shape
            per = -(-length // self.lanes) + 1          # y words + the final state word
            ch = lanes.reshape(bt, d, per, self.lanes)
            y = ch[:, :, :-1].reshape(bt, d, -1)[:, :, :length]
            return np.moveaxis(y, 2, 1), ch[:, :, -1, :n]
        if k.kind in ("elementwise", "copy"):
            return lanes.reshape(-1)[:int(np.prod(k.shape))].reshape(k.shape)
        if k.kind == "quantize":         # codes words | the multiplier word | the shift word
            codes = lanes[:-2].reshape(-1)[:int(np.prod(k.shape))].reshape(k.shape)
            return codes, lanes[-1, :1]
        if k.kind == "gather":
            return lanes.reshape(-1)[:k.shape[1]]
        if k.kind == "lookup":
            return lanes.reshape(k.shape[0], -1)[:, :k.shape[2]]
        if k.kind == "requant":
            out, pos = [], 0
            for c in self.chunks:
                blk = lanes[pos:pos + c.out_words].reshape(self.row_words, c.rows, self.lanes)
                out.append(blk.transpose(1, 0, 2).reshape(c.rows, -1))
                pos += c.out_words
            return np.concatenate(out)[:, :k.shape[1]]
        rows, length = k.shape
        if k.op == "softmax":
            return lanes.reshape(rows, -1)[:, :length]
        return lanes[:, 0]


@dataclass(frozen=True)
class VectorIsa:
    """What :func:`codegen_vector` emits: instruction words and one segment per kernel."""

    arch_hash: str
    words: tuple[int, ...]
    segments: tuple[VectorSegment, ...]
    ext_words: int

    def segment(self, name: str) -> VectorSegment:
        return find_segment(self.segments, name)


def pack_vector_words(lanes: np.ndarray) -> list[int]:
    """Rows of ``lanes`` signed values -> vector words (32-bit two's-complement lanes, lane 0
    in the low bits)."""
    u = np.asarray(lanes, np.int64).astype(np.uint32).astype(object)
    return [sum(int(v) << (32 * i) for i, v in enumerate(row)) for row in u]


def unpack_vector_words(words: list[int], lanes: int) -> np.ndarray:
    """Inverse of :func:`pack_vector_words`: ``[len(words), lanes]`` signed int64."""
    out = np.array([[(int(w) >> (32 * i)) & 0xFFFFFFFF for i in range(lanes)] for w in words],
                   np.int64).reshape(len(words), lanes)
    return np.where(out >= 1 << 31, out - (1 << 32), out)


def _ins(op: str, **f: int) -> Instr:
    return Instr(op, dict(f))


def _vec(op: str, count: int, a: int, dst: int, b: int = 0, b_inc: int = 0,
         seg: int = 0) -> Instr:
    return _ins("VECTOR", vop=VECTOR_OPCODES[op], count=count, a=a, b=b, b_inc=b_inc, dst=dst,
                seg=seg)


def _kernel_code(k: VectorKernel, arch: ArchSpec, base_pc: int, addr: int):
    """(instructions, segment, next free external address) of one kernel."""
    lanes = arch.vector_unit.lanes
    r = -(-vector_word_bytes(arch) // beat_bytes(arch))
    code: list[Instr] = []
    chunks: list[_Chunk] = []
    const_addr = -1
    row_words = 0
    if k.kind == "gather":
        code, chunks, addr, row_words = _gather_code(k, arch, addr)
    elif k.kind == "lookup":
        code, chunks, addr, const_addr, row_words = _lookup_code(k, arch, addr)
    elif k.kind == "copy":
        code, chunks, addr = _copy_code(k, arch, addr)
    else:
        make = {"scan": _scan_code, "requant": _requant_code,
                "quantize": _quantize_code}.get(k.kind, _chunk_plan)
        plan = None
        if arch.vector_unit.double_buffer:   # the chunking whose ping-pong looks fastest
            best = None
            for min_chunks in DB_MIN_CHUNKS:
                plan = make(k, arch, addr, True, min_chunks)
                if plan is None:
                    break
                order, est = _pingpong(plan[0], arch)
                if best is None or est < best[0]:
                    best = (est, order, plan)
            if best is not None:
                _, code, plan = best
        if plan is None:              # unbanked, or a row longer than a bank: serially
            plan = make(k, arch, addr, False)
            code = [ins for loads, vecs, stores in plan[0] for ins in loads + vecs + stores]
        _, chunks, addr, const_addr, row_words = plan
    code.append(_ins("END"))
    seg = VectorSegment(k, base_pc, base_pc + len(code) - 1, lanes, row_words, const_addr,
                        tuple(chunks))
    return code, seg, addr


def _chunk_plan(k: VectorKernel, arch: ArchSpec, addr: int, banked: bool,
                min_chunks: int = 1):
    """(per chunk (loads, VECTORs, stores), chunks, next free address, constant's address,
    words per row) of an elementwise or row kernel; None when ``banked`` and a chunk cannot fit
    one bank. Unbanked: chunks fill the whole buffer from word 0. Banked: chunk ``i`` lives in
    bank ``i % 2`` and the operand is cut into at least ``min(min_chunks, units)`` chunks
    (words, or rows), so loads, compute and stores of neighbouring chunks can overlap."""
    lanes = arch.vector_unit.lanes
    r = -(-vector_word_bytes(arch) // beat_bytes(arch))
    cap = VBUF_BANK_WORDS if banked else VBUF_WORDS

    def base(i: int) -> int:                  # the chunk's first buffer word
        return (i % VBUF_BANKS) * VBUF_BANK_WORDS if banked else 0
    parts: list[tuple[list[Instr], list[Instr], list[Instr]]] = []
    chunks: list[_Chunk] = []
    const_addr, row_words = -1, 0
    if k.kind == "elementwise":
        total = -(-int(np.prod(k.shape)) // lanes)
        by_const = k.op in BY_NEG_ONE        # the -1.0 word in the bank's (buffer's) last word
        if by_const:
            const_addr, addr = addr, addr + r
        per = min((cap - by_const) // k.operands, _MAX_BEATS)
        if banked:
            per = min(per, -(-total // min(min_chunks, total)))
        for i, w0 in enumerate(range(0, total, per)):
            n, vb = min(per, total - w0), base(i)
            const_v = vb + cap - 1
            ins_addr = tuple(addr + j * n * r for j in range(k.operands))
            addr += k.operands * n * r
            chunks.append(_Chunk(n, ins_addr, n, addr, n))
            loads = ([_ins("LOAD_V", vaddr=const_v, count=1, addr=const_addr)]   # once per
                     if by_const and i < (VBUF_BANKS if banked else 1) else [])  # bank
            if k.op in SAME_OPERAND:            # b steps through a
                vec = _vec(SAME_OPERAND[k.op], n, vb, vb, b=vb, b_inc=1)
            elif by_const:                      # b stays on the constant word
                vec = _vec(BY_NEG_ONE[k.op], n, vb, vb, b=const_v)
            else:
                vec = _vec(k.op, n, vb, vb, b=vb + n if k.operands == 2 else vb,
                           b_inc=int(k.operands == 2))
            parts.append((loads + [_ins("LOAD_V", vaddr=vb + j * n, count=n, addr=a)
                                   for j, a in enumerate(ins_addr)],
                          [vec], [_ins("STORE_V", vaddr=vb, count=n, addr=addr)]))
            addr += n * r
        return parts, chunks, addr, const_addr, row_words
    rows, length = k.shape
    row_words = -(-length // lanes)
    if k.op == "softmax" and length > SOFTMAX_MAX_ROW:
        raise DoesNotFit(f"vector kernel {k.name}: softmax row of {length} elements: the "
                         f"vector unit's recip takes a Q8.8 sum, so rows hold at most "
                         f"{SOFTMAX_MAX_ROW} elements")
    if k.op == "mean" and length > MEAN_MAX_ROW:
        raise DoesNotFit(f"vector kernel {k.name}: mean of a row of {length} elements; "
                         f"rows of at most {MEAN_MAX_ROW} elements are taken")
    if row_words > _MAX_BEATS or row_words + 3 > VBUF_WORDS:
        raise DoesNotFit(f"vector kernel {k.name}: a row of {length} elements is "
                         f"{row_words} vector words; the vector buffer holds {VBUF_WORDS} "
                         f"words (and a VECTOR at most {_MAX_BEATS} beats)")
    if k.op == "softmax":
        const_addr, addr = addr, addr + r
    # mean: each chunk's rows are followed in external memory by the multiplier and shift
    # words, loaded with them by one LOAD_V (buffer: rows | m, s | one sum word per row)
    n_par = 2 if k.op == "mean" else 0
    # one instruction per step covers a whole chunk of rows (segments of row_words beats);
    # rows longer than a segment can be (sum/rmax/mean only) take one instruction per row
    batched = row_words <= _MAX_SEG
    # buffer: rows x row_words | one result word per row (softmax: m and s) | -1.0 (softmax)
    per_row = row_words + (2 if k.op == "softmax" else 1)
    per_rows = (cap - (k.op == "softmax") - n_par) // per_row
    if batched:
        per_rows = min(per_rows, _MAX_BEATS // row_words)
    if per_rows < 1:
        return None
    if banked:
        per_rows = min(per_rows, -(-rows // min(min_chunks, rows)))
    for i, r0 in enumerate(range(0, rows, per_rows)):
        n, vb = min(per_rows, rows - r0), base(i)
        const_v = vb + cap - 1               # the -1.0 word (softmax): the bank's last word
        nw = n * row_words
        in_addr = addr
        addr += (nw + n_par) * r
        out_words = nw if k.op == "softmax" else n
        res_v = vb + nw + n_par              # first result word in the buffer
        loads = []
        if k.op == "softmax" and (not banked or i < VBUF_BANKS):   # banked: once per bank
            loads.append(_ins("LOAD_V", vaddr=const_v, count=1, addr=const_addr))
        loads.append(_ins("LOAD_V", vaddr=vb, count=nw + n_par, addr=in_addr))
        if k.op != "softmax":
            red = "sum" if k.op == "mean" else k.op
            vecs = ([_vec(red, nw, vb, res_v, b=vb, seg=row_words)] if batched else
                    [_vec(red, row_words, vb + j * row_words, res_v + j, b=vb)
                     for j in range(n)])
            if k.op == "mean":           # S x m / 2**s: m in word nw, s in word nw + 1
                vecs.append(_vec("rescale", n, res_v, res_v, b=vb + nw))
        else:
            mm, ss, sg = vb + nw, vb + nw + n, row_words
            vecs = [_vec("rmax", nw, vb, mm, b=vb, seg=sg),
                    _vec("mul", n, mm, mm, b=const_v),
                    _vec("add", nw, vb, vb, b=mm, seg=sg),
                    _vec("exp", nw, vb, vb, b=vb),
                    _vec("sum", nw, vb, ss, b=vb, seg=sg),
                    _vec("recip", n, ss, ss, b=vb),
                    _vec("mul", nw, vb, vb, b=ss, seg=sg)]
        stores = [_ins("STORE_V", vaddr=vb if k.op == "softmax" else res_v,
                       count=out_words, addr=addr)]
        parts.append((loads, vecs, stores))
        chunks.append(_Chunk(n, (in_addr,), nw, addr, out_words))
        addr += out_words * r
    return parts, chunks, addr, const_addr, row_words


def _pingpong(parts, arch: ArchSpec) -> tuple[list[Instr], int]:
    """The chunks' instructions in one order for a double-buffered vector buffer, and the
    estimated cycle the END after them issues. Two queues —
    the DMA's (loads of chunks 0 and 1, then per chunk ``i`` its stores and the loads of chunk
    ``i + 2``, which reuses its bank) and the vector engine's (every chunk's VECTORs in order)
    — merged so that a chunk's VECTORs follow its loads and its stores follow its VECTORs
    (the controller's bank rule orders the rest), taking at each step the instruction that
    could issue first. The issue times are an estimate made with the ISA's bank rule
    (:func:`~tilewright.compiler.codegen.vbuf_bank_mask`) and its documented busy cycles; they
    choose the order only, never the results (the cycle model times the code that comes out)."""
    lat = memory_latency_cycles(arch)
    lanes = arch.vector_unit.lanes
    r = -(-vector_word_bytes(arch) // beat_bytes(arch))
    dma_q: list[tuple[Instr, tuple]] = []       # (instruction, what must be emitted first)
    for i in range(min(2, len(parts))):
        dma_q += [(ins, ()) for ins in parts[i][0]]
    vec_q: list[tuple[Instr, tuple]] = []
    for i, (loads, vecs, stores) in enumerate(parts):
        vec_q += [(ins, ("load", i) if j == 0 else ()) for j, ins in enumerate(vecs)]
    for i, (loads, vecs, stores) in enumerate(parts):
        dma_q += [(ins, ("vec", i)) for ins in stores]
        if i + 2 < len(parts):
            dma_q += [(ins, ()) for ins in parts[i + 2][0]]
    done_loads = {i: len(p[0]) for i, p in enumerate(parts)}
    done_vecs = {i: len(p[1]) for i, p in enumerate(parts)}
    owner = {}                           # id(instruction) -> its chunk
    for i, (loads, vecs, _) in enumerate(parts):
        owner.update({id(x): i for x in loads + vecs})
    t, free, banks = 0, {"dma": 0, "vec": 0}, {"dma": 0, "vec": 0}
    out: list[Instr] = []

    def cost(ins: Instr):
        f = ins.fields
        if ins.op in ("VECTOR", "SCAN"):
            return "vec", f["count"] + (VECTOR_OVERHEAD_CYCLES if ins.op == "VECTOR"
                                        else SCAN_OVERHEAD_CYCLES)
        return "dma", (lat if ins.op == "LOAD_V" else 1) + f["count"] * r

    def when(ins: Instr) -> int:
        unit, _ = cost(ins)
        other = "dma" if unit == "vec" else "vec"
        mine = vbuf_bank_mask(ins.op, ins.fields, lanes)
        return max(t + 1, free[unit], free[other] if banks[other] & mine else 0)

    def ready(dep) -> bool:
        if not dep:
            return True
        kind, i = dep
        return (done_loads if kind == "load" else done_vecs)[i] == 0
    while dma_q or vec_q:
        cands = [q for q in (dma_q, vec_q) if q and ready(q[0][1])]
        q = min(cands, key=lambda q: when(q[0][0]))      # ties: the DMA's queue (first)
        ins, _ = q.pop(0)
        t = when(ins)
        unit, dur = cost(ins)
        free[unit], banks[unit] = t + dur + 1, vbuf_bank_mask(ins.op, ins.fields, lanes)
        if id(ins) in owner:
            (done_vecs if ins.op in ("VECTOR", "SCAN") else done_loads)[owner[id(ins)]] -= 1
        out.append(ins)
    return out, max(t + 1, *free.values())


def _requant_code(k: VectorKernel, arch: ArchSpec, addr: int, banked: bool = False,
                  min_chunks: int = 1):
    """As :func:`_chunk_plan`, for a requant kernel. Vector buffer (of each bank when
    ``banked``): the parameter words at its start (per column word j of ``lanes`` channels:
    its multipliers at ``2j``, its shifts at ``2j + 1``, where the VECTOR's b word and the word
    after it are; loaded once per buffer or bank), then a chunk of rows column word by column
    word, so one VECTOR per column word streams its rows against one parameter pair, in
    place."""
    lanes = arch.vector_unit.lanes
    r = -(-vector_word_bytes(arch) // beat_bytes(arch))
    rows, n_cols = k.shape
    nw = -(-n_cols // lanes)
    cap = VBUF_BANK_WORDS if banked else VBUF_WORDS
    per_rows = min((cap - 2 * nw) // nw, _MAX_BEATS)
    if per_rows < 1:
        if banked:
            return None
        raise DoesNotFit(f"vector kernel {k.name}: requant of {n_cols} channels needs "
                         f"{3 * nw} vector-buffer words for one row; the buffer holds "
                         f"{VBUF_WORDS}")
    if banked:
        per_rows = min(per_rows, -(-rows // min(min_chunks, rows)))
    param_addr, addr = addr, addr + 2 * nw * r
    parts = []
    chunks: list[_Chunk] = []
    for i, r0 in enumerate(range(0, rows, per_rows)):
        vb = (i % VBUF_BANKS) * VBUF_BANK_WORDS if banked else 0
        n = min(per_rows, rows - r0)
        base = vb + 2 * nw
        in_addr, addr = addr, addr + n * nw * r
        loads = ([_ins("LOAD_V", vaddr=vb, count=2 * nw, addr=param_addr)]
                 if i < (VBUF_BANKS if banked else 1) else [])
        loads.append(_ins("LOAD_V", vaddr=base, count=n * nw, addr=in_addr))
        parts.append((loads,
                      [_vec("requant", n, base + j * n, base + j * n, b=vb + 2 * j)
                       for j in range(nw)],
                      [_ins("STORE_V", vaddr=base, count=n * nw, addr=addr)]))
        chunks.append(_Chunk(n, (in_addr,), n * nw, addr, n * nw, (r0, 0)))
        addr += n * nw * r
    return parts, chunks, addr, param_addr, nw


def _quantize_code(k: VectorKernel, arch: ArchSpec, addr: int, banked: bool = False,
                   min_chunks: int = 1):
    """As :func:`_chunk_plan`, for a per-tensor int8 quantize: one chunk (``banked``: None, so
    it runs serially — the shift needs every element before the first code). Vector buffer:
    the tensor's ``nw`` words (zero-padded) from word 0, the multiplier word (1 in every lane)
    at ``nw``, loaded together; ``qshift`` over all ``nw`` words (one segment) writes the shift
    to word ``nw + 1``, ``requant`` by word ``nw`` (m = 1) and word ``nw + 1`` (s = the shift)
    writes the codes in place; one ``STORE_V`` of the ``nw + 2`` words."""
    if banked:
        return None
    lanes = arch.vector_unit.lanes
    r = -(-vector_word_bytes(arch) // beat_bytes(arch))
    nw = -(-int(np.prod(k.shape)) // lanes)
    if nw + 2 > VBUF_WORDS:
        raise DoesNotFit(f"vector kernel {k.name}: a per-tensor quantize of "
                         f"{int(np.prod(k.shape))} elements needs {nw + 2} vector-buffer words "
                         f"(the whole tensor at once); the buffer holds {VBUF_WORDS}")
    in_addr, out_addr = addr, addr + (nw + 1) * r
    part = ([_ins("LOAD_V", vaddr=0, count=nw + 1, addr=in_addr)],
            [_vec("qshift", nw, 0, nw + 1), _vec("requant", nw, 0, 0, b=nw)],
            [_ins("STORE_V", vaddr=0, count=nw + 2, addr=out_addr)])
    return [part], [_Chunk(1, (in_addr,), nw, out_addr, nw + 2)], out_addr + (nw + 2) * r, -1, 0


def _table_row_words(k: VectorKernel, arch: ArchSpec, rows: int, length: int, what: str):
    """(beats per vector word, vector words per row) of a table of ``rows`` rows of ``length``
    elements that a ``what`` kernel (gather, lookup) reads row by row with ``LOAD_VI``; refused
    when a row does not fit the vector buffer or the index register cannot reach every row."""
    r = -(-vector_word_bytes(arch) // beat_bytes(arch))
    nw = -(-length // arch.vector_unit.lanes)
    if nw > VBUF_WORDS:
        raise DoesNotFit(f"vector kernel {k.name}: a {what} row of {length} elements needs {nw} "
                         f"vector-buffer words; the buffer holds {VBUF_WORDS}")
    if rows > 1 << IDX_BITS:
        raise DoesNotFit(f"vector kernel {k.name}: a table of {rows} rows; the index register "
                         f"(IDX_BITS = {IDX_BITS}) reaches {1 << IDX_BITS}")
    return r, nw


def _gather_code(k: VectorKernel, arch: ArchSpec, addr: int):
    """(instructions without END, chunks, next free address, words per row) of a gather: the
    table's rows (``nw`` words each) at ``addr``, ``LOAD_VI`` of row ``idx`` into words 0 ..,
    ``STORE_V`` of them after the table."""
    rows, length = k.shape
    r, nw = _table_row_words(k, arch, rows, length, "gather")
    table, out = addr, addr + rows * nw * r
    code = [_ins("LOAD_VI", vaddr=0, count=nw, addr=table),
            _ins("STORE_V", vaddr=0, count=nw, addr=out)]
    return code, [_Chunk(rows, (table,), rows * nw, out, nw)], out + nw * r, nw


def _lookup_code(k: VectorKernel, arch: ArchSpec, addr: int):
    """(instructions without END, chunks, next free address, address of the index words, words
    per row) of a lookup: the table's rows (``nw`` words each) at ``addr``, the ``n`` index
    words after it; per chunk of ids (as many rows as the vector buffer holds), per id
    ``LOAD_IDX`` of its word and ``LOAD_VI`` of its row into the next ``nw`` buffer words, then
    one ``STORE_V`` of the chunk's rows."""
    ri = index_beats(arch)
    n, rows, length = k.shape
    r, nw = _table_row_words(k, arch, rows, length, "lookup")
    table, ids = addr, addr + rows * nw * r
    addr = ids + n * ri
    per = VBUF_WORDS // nw
    code: list[Instr] = []
    chunks: list[_Chunk] = []
    for i0 in range(0, n, per):
        c = min(per, n - i0)
        for i in range(c):
            code += [_ins("LOAD_IDX", addr=ids + (i0 + i) * ri),
                     _ins("LOAD_VI", vaddr=i * nw, count=nw, addr=table)]
        code.append(_ins("STORE_V", vaddr=0, count=c * nw, addr=addr))
        chunks.append(_Chunk(c, (table, ids + i0 * ri), rows * nw, addr, c * nw, (i0, 0)))
        addr += c * nw * r
    return code, chunks, addr, ids, nw


def _copy_code(k: VectorKernel, arch: ArchSpec, addr: int):
    """(instructions without END, chunks, next free address) of a copy: the operand's words
    (flattened, the last zero-padded) at ``addr``; per chunk of at most ``VBUF_WORDS`` words
    ``LOAD_V`` into words 0 .. and ``STORE_V`` of them after the operand. A ``LOAD_V`` waits
    until the DMA is idle (the ISA's rule), so a chunk's load never overwrites words the previous
    store still reads."""
    r = -(-vector_word_bytes(arch) // beat_bytes(arch))
    total = -(-int(np.prod(k.shape)) // arch.vector_unit.lanes)
    src, out = addr, addr + total * r
    code: list[Instr] = []
    chunks: list[_Chunk] = []
    for w0 in range(0, total, VBUF_WORDS):
        n = min(VBUF_WORDS, total - w0)
        code += [_ins("LOAD_V", vaddr=0, count=n, addr=src + w0 * r),
                 _ins("STORE_V", vaddr=0, count=n, addr=out + w0 * r)]
        chunks.append(_Chunk(n, (src + w0 * r,), n, out + w0 * r, n))
    return code, chunks, out + total * r


def _scan_code(k: VectorKernel, arch: ArchSpec, addr: int, banked: bool = False,
               min_chunks: int = 1):
    """As :func:`_chunk_plan`, for a scan kernel. Vector buffer of a chunk (from the start of
    its bank when ``banked``): c words [0, L), then per channel a (L), b (L), h0 (1) words, then
    per channel its y words (ceil(L / lanes)) and final state word."""
    lanes = arch.vector_unit.lanes
    r = -(-vector_word_bytes(arch) // beat_bytes(arch))
    bt, length, d, n = k.shape
    if n > lanes:
        raise DoesNotFit(f"vector kernel {k.name}: scan state size N={n}: the scan unit holds "
                         f"one channel's state in its {lanes} lanes (vector_unit.lanes)")
    cap = VBUF_BANK_WORDS if banked else VBUF_WORDS
    per_in, per_out = 2 * length + 1, -(-length // lanes) + 1
    per_chunk = (cap - length) // (per_in + per_out)
    if banked and (length > _MAX_BEATS or per_chunk < 1):
        return None
    if length > _MAX_BEATS or per_chunk < 1:
        raise DoesNotFit(f"vector kernel {k.name}: scan of {length} steps: one channel needs "
                         f"{length + per_in + per_out} vector-buffer words; the buffer holds "
                         f"{VBUF_WORDS} (and a SCAN at most {_MAX_BEATS} steps)")
    if banked:
        per_chunk = min(per_chunk, -(-d // min(min_chunks, d)))
    parts = []
    chunks: list[_Chunk] = []
    for bi in range(bt):
        for d0 in range(0, d, per_chunk):
            vb = (len(parts) % VBUF_BANKS) * VBUF_BANK_WORDS if banked else 0
            nc = min(per_chunk, d - d0)
            c_addr, in_addr = addr, addr + length * r
            addr = in_addr + nc * per_in * r
            out_v = vb + length + nc * per_in
            scans = []
            for i in range(nc):
                base = vb + length + i * per_in
                scans.append(_ins("SCAN", count=length, ab=base, c=vb, h0=base + 2 * length,
                                  dst=out_v + i * per_out))
            parts.append(([_ins("LOAD_V", vaddr=vb, count=length, addr=c_addr),
                           _ins("LOAD_V", vaddr=vb + length, count=nc * per_in, addr=in_addr)],
                          scans,
                          [_ins("STORE_V", vaddr=out_v, count=nc * per_out, addr=addr)]))
            chunks.append(_Chunk(nc, (c_addr, in_addr), nc * per_in, addr, nc * per_out,
                                 (bi, d0)))
            addr += nc * per_out * r
    return parts, chunks, addr, -1, 0


def codegen_vector(arch: ArchSpec, kernels: list[VectorKernel]) -> VectorIsa:
    """Code for ``kernels`` (one segment each, in order) on ``arch``'s accelerator top.

    Raises CodegenError for an ArchSpec without a vector unit or code longer than the
    instruction memory, DoesNotFit for a row that does not fit (see the module docstring),
    AssemblerError for a field that does not fit."""
    if arch.vector_unit is None:
        raise CodegenError(f"{arch.name} has no vector_unit: its accelerator top has no vector "
                           "engine (add a vector_unit section to the ArchSpec)")
    code: list[Instr] = []
    segs, addr = [], 0
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise CodegenError(f"vector kernels need distinct names, got {names}")
    for k in kernels:
        c, seg, addr = _kernel_code(k, arch, len(code), addr)
        code += c
        segs.append(seg)
    if len(code) > IMEM_WORDS:
        raise CodegenError(f"vector kernels need {len(code)} instruction words; the "
                           f"controller's instruction memory holds {IMEM_WORDS} (run fewer "
                           "kernels per program)")
    try:
        words = assemble(code)
    except AssemblerError as err:          # a count or address the fields cannot hold
        raise DoesNotFit(f"vector kernels {names}: {err}") from err
    return VectorIsa(arch.content_hash(), tuple(words), tuple(segs), addr)


def batch_kernels(arch: ArchSpec, kernels: list[VectorKernel]) -> list[list[VectorKernel]]:
    """``kernels`` in order, cut into consecutive batches whose code fits the instruction memory
    (one :func:`codegen_vector` program each). Raises CodegenError for a kernel whose own code
    does not fit, DoesNotFit as :func:`codegen_vector`."""
    batches: list[list[VectorKernel]] = []
    cur: list[VectorKernel] = []
    used = 0
    for k in kernels:
        n = len(_kernel_code(k, arch, 0, 0)[0])
        if n > IMEM_WORDS:
            raise CodegenError(f"vector kernel {k.name} ({k.op} {k.shape}) needs {n} instruction "
                               f"words; the controller's instruction memory holds {IMEM_WORDS}")
        if used + n > IMEM_WORDS:
            batches.append(cur)
            cur, used = [], 0
        cur.append(k)
        used += n
    if cur:
        batches.append(cur)
    return batches
