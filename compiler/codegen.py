"""Codegen for the programmable accelerator top: its ISA, assembler and Program -> IsaProgram.

The compiler owns the ISA (docs/design.md): :data:`ISA` below is the one table the assembler, the
disassembler, the RTL decoder (:mod:`tilewright.rtl.controller`) and the cycle model
(:mod:`tilewright.dataflow_sim.accel_timing`) all read.

ISA — fixed 64-bit instruction words
    Bits ``[3:0]`` hold the opcode; an opcode's fields follow from bit 4 upward in the order of
    its :data:`ISA` entry (first field in the lowest bits). Every bit not covered by a field must
    be zero (the disassembler rejects anything else, so garbage never decodes silently).

    ==========  ======  =========================================================================
    op          code    fields (width in bits) and meaning
    ==========  ======  =========================================================================
    ``END``     0       — ; waits until the DMA and the GEMM engine are idle, then stops
                        (``done`` goes high)
    ``LOAD_A``  1       ``buf`` (1) scratchpad half, ``count`` (24) A words, ``addr`` (32) external
                        word address: DMA ``count`` A words from external memory into half ``buf``
                        of the A buffer, from its word 0 on
    ``LOAD_B``  2       as ``LOAD_A`` for the B buffer
    ``STORE``   3       ``buf`` (1) accumulator half, ``count`` (24) words, ``addr`` (32):
                        DMA accumulator words 0.. of half ``buf`` to external memory
    ``GEMM``    4       ``m``, ``k``, ``n`` (16 each, >= 1), ``a_buf``, ``b_buf``, ``c_buf``,
                        ``acc`` (1 each): one GEMM on the core (layouts of
                        :mod:`tilewright.compiler.layout` inside each half); C overwrites the
                        accumulator half ``c_buf``, or with ``acc=1`` is added to it (int32,
                        wrapping; fp32 on the fp8 and MX cores, an MX core's words carrying
                        their block scales) — how a split K accumulates
    ``SYNC``    5       ``dma`` (1), ``gemm`` (1), ``vec`` (1): wait until each selected unit is
                        idle
    ``LOAD_V``  6       ``vaddr`` (12) vector-buffer word, ``count`` (16) words, ``addr`` (32):
                        DMA ``count`` vector words from external memory into the vector buffer
                        from word ``vaddr`` on
    ``STORE_V`` 7       as ``LOAD_V``, vector buffer -> external memory
    ``VECTOR``  8       ``vop`` (4, :data:`VECTOR_OPCODES`), ``count`` (12, >= 1) beats, ``a``,
                        ``b`` (12 each) source words, ``b_inc`` (1), ``dst`` (12), ``seg`` (7):
                        stream vector words ``a .. a+count-1`` through the vector unit and write
                        the results to ``dst ..``. The beats form segments of ``seg`` beats
                        (``seg`` = 0: one segment of all ``count``; the last may be shorter).
                        Beat ``i``'s b word is ``b + i`` when ``b_inc`` = 1, else ``b + i // seg``
                        (the segment's word; ``b`` every beat when ``seg`` = 0). Elementwise ops
                        write ``count`` words; ``sum``/``rmax`` write one word per segment, the
                        reduction of its beats in every lane — e.g. a row max of ``n`` rows of
                        ``seg`` words each in one instruction. ``argmax`` writes the index
                        (beat within the segment x lanes + lane) of the segment's largest signed
                        32-bit lane, the lowest index on ties (as ``torch.argmax``);
                        ``requant`` writes per lane ``clamp(floor((x * m + 2**(s-1)) / 2**s),
                        -128, 127)`` (``s`` = 0: ``clamp(x * m)``) of the signed 32-bit lane
                        ``x``, the multiplier ``m`` (signed 32-bit lane of the beat's b word)
                        and the shift ``s`` (bits 5:0 of that lane in the word after the b
                        word) — round half up, the functional model's ``requantize``;
                        ``rescale`` reads the same three lanes and writes ``clamp(floor((x * m
                        + 2**(s-1)) / 2**s), -32768, 32767)``: an int32 (e.g. a ``sum``'s
                        Q24.8) to Q8.8, e.g. a row mean ``sum x (1/n)``; ``qshift`` (a
                        reduction) writes the int8 quantization shift of its segment: the
                        smallest ``k`` >= 0 with ``floor(amax / 2**k + 1/2) <= 127``, ``amax``
                        the largest ``|x|`` of its Q8.8 elements (``k`` in 0..9), so ``requant``
                        with ``m`` = 1 and ``s`` = ``k`` gives codes in -127..127, never clamped
                        (a per-tensor quantize with the scale ``2**(k - 8)``)
                        (:data:`VECTOR_UNIT_OPS` lists each op's kind and lane formats)
    ``SCAN``    9       ``count`` (12, >= 1) time steps, ``ab``, ``c``, ``h0``, ``dst`` (12 each):
                        the scan unit runs ``h[t] = a[t] h[t-1] + b[t]`` for one channel (its
                        ``lanes`` state elements): step ``t`` reads a from word ``ab+t`` (low 16
                        bits of each lane: unsigned Q0.16), b from word ``ab+count+t`` and c from
                        word ``c+t`` (Q16.16), from the state in word ``h0``; it writes
                        ``y[t] = sum_i c[t,i] h[t,i]`` (Q16.16) into lane ``t % lanes`` of word
                        ``dst + t // lanes`` (the word's other lanes unchanged) and the final h
                        into word ``dst + ceil(count / lanes)``
                        (:mod:`tilewright.dataflow_sim.scan_numerics` defines the arithmetic)
    ``SCALE``   10      ``operand`` (1: 0 = A, 1 = B), ``value`` (32, an fp32 bit pattern): set
                        the per-tensor scale ``s_a`` or ``s_b`` of the GEMMs that follow (only on
                        ArchSpecs whose engine takes them, :func:`takes_scales`: the fp8 core;
                        elsewhere it is an unknown opcode). Each run starts with both at 1.0;
                        the accumulator's read port (what STORE drains) returns
                        ``fl32(acc * fl32(s_a * s_b))`` per lane, step 4 of
                        :mod:`tilewright.dataflow_sim.numerics`. Waits until the DMA is idle (a
                        STORE in flight keeps the scales it started with); busy for no cycle.
                        ``operand`` B sets ``s_b`` of every output lane
    ``LOAD_VI`` 11      as ``LOAD_V`` (``vaddr``, ``count``, ``addr``), indirect: the external
                        address is ``addr + idx * count * r`` (wrapping at 32 bits), ``idx`` the
                        run's index register (:data:`IDX_BITS` bits, unsigned; the top's ``idx``
                        input, written by the host before ``start``) and ``r`` the beats per
                        vector word — row ``idx`` of a table of ``count``-word rows at ``addr``
                        (an embedding lookup by token id). Only on ArchSpecs with a vector unit
                        (elsewhere an unknown opcode); waits and takes as long as ``LOAD_V``
    ``SCALE_COL`` 12    ``lane`` (6), ``value`` (32, fp32): set ``s_b`` of output lane ``lane``
                        only (per-channel weight scales: lane ``j`` of a stored word is column
                        ``n0 + j`` of a one-fold-wide output tile); that lane then returns
                        ``fl32(acc * fl32(s_a * s_b[lane]))``. Same ISA rule, wait and cost as
                        ``SCALE``; a ``lane`` >= the array's columns stops the run with ``error``
    ``LOAD_IDX`` 13     ``addr`` (32): the DMA reads the *index word* at external word ``addr``
                        (:data:`IDX_BITS` bits, unsigned, little-endian in its
                        :func:`index_beats` external words — the low bits of one word whenever
                        ``W >= 2`` bytes) and writes it into the index register, replacing the
                        value the run started with; the ``LOAD_VI`` instructions after it read
                        the new value. So a Program looks up several rows (``LOAD_IDX a+i;
                        LOAD_VI ...`` per token id) and a host without the ``idx`` input (the
                        AXI/UART tops) sets the token id by writing a memory word. Only on
                        ArchSpecs with a vector unit (elsewhere an unknown opcode); waits until
                        the DMA is idle and keeps it busy for ``L + index_beats`` cycles (a
                        LOAD of one ``index_beats``-beat word); the register is written in the
                        last beat's cycle, so the DMA-idle wait of a following ``LOAD_VI`` is
                        all the ordering it needs
    ==========  ======  =========================================================================

    ``LOAD_*``/``STORE`` wait (stall the controller) until the DMA engine is idle; ``GEMM`` waits
    until the GEMM core is idle; ``LOAD_V``/``LOAD_VI``/``STORE_V``/``VECTOR``/``SCAN`` wait until
    both the DMA and the vector engine are idle (they share the vector buffer's ports);
    ``SCALE``/``SCALE_COL``/``LOAD_IDX`` wait until the DMA is idle. Nothing else is checked by
    hardware: the compiler orders buffer reuse with ``SYNC`` (the schedule of
    :func:`codegen_gemm`).

    Double-buffered vector buffer (ArchSpec ``vector_unit.double_buffer``): the buffer is
    :data:`VBUF_BANKS` banks of :data:`VBUF_BANK_WORDS` words (bank = the word address's top
    bit; addresses and :data:`VBUF_WORDS` unchanged), each with its own ports. An instruction's
    *banks* (:func:`vbuf_bank_mask`) are those of the first and the last word of every
    vector-buffer range it reads or writes (both banks for a range longer than a bank):
    ``LOAD_V``/``LOAD_VI``/``STORE_V`` ``vaddr .. vaddr+count-1`` (none for ``count`` 0);
    ``VECTOR`` ``a ..`` (``count`` words), the b words (``count`` with ``b_inc``, else one per
    segment), for ``requant``/``rescale`` the shift words one after them, ``dst ..`` (``count``
    words, a reduction's one per segment); ``SCAN`` ``ab ..`` (``2 count``), ``c ..``
    (``count``), ``h0``, ``dst .. dst + ceil(count / lanes)``. Then ``LOAD_V``/``LOAD_VI``/
    ``STORE_V`` wait until the DMA is idle and, only when the vector engine's running
    instruction has a bank in common with theirs, until the engine is idle; ``VECTOR``/``SCAN``
    wait until the engine is idle and, only when the DMA's running transfer has a bank in common
    with theirs (``LOAD_IDX`` and the GEMM-path transfers have none), until the DMA is idle. The
    controller (:mod:`tilewright.rtl.controller`) and the cycle model both call
    :func:`vbuf_bank_mask`. Without the option the rule above (both idle) holds.

Vector buffer
    :data:`VBUF_WORDS` words of ``lanes`` (``arch.vector_unit.lanes``) 32-bit lanes, lane 0 in the
    low bits (:func:`vector_word_bytes` bytes; external image as for every other word). The
    vector unit reads the low 16 bits of each lane as a signed Q8.8 operand
    (:mod:`tilewright.dataflow_sim.vector_numerics`) and writes its 32-bit results (elementwise:
    sign-extended Q8.8; ``sum``: Q24.8).

External memory
    One port of ``W = beat_bytes(arch)`` bytes per beat: the off-chip bytes per cycle
    ``offchip.bandwidth_gbps * 1e3 / clock_mhz`` rounded down to a power of two (at least 1).
    Addresses count W-byte words. A scratchpad/accumulator word of ``B`` bytes occupies
    ``ceil(B / W)`` consecutive external words, its byte ``i`` in external word ``i // W``, byte
    ``i % W`` (little-endian lanes; the unused high bytes of the last word are zero). Memory latency
    ``memory_latency_cycles(arch) = max(1, ceil(offchip.latency_ns * clock_mhz / 1000))``.

:func:`codegen` turns the ``gemm`` tasks of a Program into one *segment* of code per task (entry
point, steps — output tile x K chunk — and the external addresses of each step's A, B and C
blocks); the host starts the controller at a segment's entry once the task's operands are in
external memory (:meth:`IsaProgram.image`) and reads C back with :meth:`IsaProgram.c_result`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.layout import (MAX_GEMM_DIM, DoesNotFit, GemmLayout, half_depth,
                                        unpack_lanes)
from tilewright.compiler.program import GemmTask, Program
from tilewright.errors import UserError
from tilewright.formats import bits_of, get_format

__all__ = ["ISA", "IDX_BITS", "IDX_WORD_BYTES", "INDEX_OPS", "index_beats", "FIELD_MIN",
           "VBUF_WORDS", "VBUF_BANKS", "VBUF_BANK_WORDS", "VBUF_DMA_OPS", "vbuf_spans",
           "vbuf_bank_mask", "VECTOR_OPCODES", "VECTOR_REDUCTIONS",
           "VECTOR_UNIT_OPS", "VECTOR_INT32_OPS", "REQUANT_SHIFT_BITS",
           "VECTOR_OVERHEAD_CYCLES", "SCAN_OVERHEAD_CYCLES",
           "vector_word_bytes", "OPCODES", "OPCODE_BITS", "WORD_BITS", "IMEM_WORDS", "Instr",
           "AssemblerError", "CodegenError", "field_slices", "assemble", "disassemble",
           "beat_bytes", "memory_latency_cycles", "beats_per_word", "word_bytes", "Tile", "Segment",
           "IsaProgram", "codegen", "codegen_gemm", "codegen_gemms", "find_segment",
           "words_to_beats", "beats_to_words", "takes_scales", "fp32_pattern",
           "task_scales"]

WORD_BITS = 64        #: bits per instruction word
OPCODE_BITS = 4       #: opcode in bits [3:0]
IMEM_WORDS = 1024     #: instruction memory depth of the controller (words)

#: op name -> (opcode, ((field, width in bits), ...)); fields packed from bit OPCODE_BITS upward
ISA: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = {
    "END": (0, ()),
    "LOAD_A": (1, (("buf", 1), ("count", 24), ("addr", 32))),
    "LOAD_B": (2, (("buf", 1), ("count", 24), ("addr", 32))),
    "STORE": (3, (("buf", 1), ("count", 24), ("addr", 32))),
    "GEMM": (4, (("m", 16), ("k", 16), ("n", 16), ("a_buf", 1), ("b_buf", 1), ("c_buf", 1),
                 ("acc", 1))),
    "SYNC": (5, (("dma", 1), ("gemm", 1), ("vec", 1))),
    "LOAD_V": (6, (("vaddr", 12), ("count", 16), ("addr", 32))),
    "STORE_V": (7, (("vaddr", 12), ("count", 16), ("addr", 32))),
    "VECTOR": (8, (("vop", 4), ("count", 12), ("a", 12), ("b", 12), ("b_inc", 1),
                   ("dst", 12), ("seg", 7))),
    "SCAN": (9, (("count", 12), ("ab", 12), ("c", 12), ("h0", 12), ("dst", 12))),
    "SCALE": (10, (("operand", 1), ("value", 32))),
    "LOAD_VI": (11, (("vaddr", 12), ("count", 16), ("addr", 32))),
    "SCALE_COL": (12, (("lane", 6), ("value", 32))),
    "LOAD_IDX": (13, (("addr", 32),)),
}
#: bits of the run's index register that ``LOAD_VI`` reads (the top's ``idx`` input, or the index
#: word a ``LOAD_IDX`` reads; e.g. a token id, so a vocabulary of up to ``2**IDX_BITS`` rows)
IDX_BITS = 16
#: bytes of the index word ``LOAD_IDX`` reads (``IDX_BITS`` bits)
IDX_WORD_BYTES = -(-IDX_BITS // 8)
#: the ops that use the index register (decoded only by tops with a vector unit)
INDEX_OPS = ("LOAD_VI", "LOAD_IDX")
#: vector-buffer depth of the accelerator top (words of ``lanes`` 32-bit lanes)
VBUF_WORDS = 1024
#: banks of a double-buffered vector buffer (ArchSpec ``vector_unit.double_buffer``) and the
#: words of each: bank ``k`` holds words ``k * VBUF_BANK_WORDS ..`` (the address's top bit)
VBUF_BANKS = 2
VBUF_BANK_WORDS = VBUF_WORDS // VBUF_BANKS
#: the instructions that move words between external memory and the vector buffer
VBUF_DMA_OPS = ("LOAD_V", "LOAD_VI", "STORE_V")
#: The vector unit's operations, one row each (the one table ``vop`` codes, kinds and lane formats
#: derive from): name -> (``vop`` code, kind, operand lanes, result lanes). Kind ``elementwise``
#: writes one word per beat, ``reduction`` one word per segment (the value in every lane).
#: Operand lanes: ``Q8.8`` — the low 16 bits of each 32-bit lane, signed; ``int32`` — the whole
#: signed 32-bit lane. ``requant`` and ``rescale`` also read, per lane, the multiplier (int32) in
#: their b word and the shift (bits 5:0, 0..63) in the word after their b word
#: (:mod:`tilewright.dataflow_sim.vector_numerics` states every op's arithmetic).
VECTOR_UNIT_OPS: dict[str, tuple[int, str, str, str]] = {
    "add": (0, "elementwise", "Q8.8", "Q8.8"), "mul": (1, "elementwise", "Q8.8", "Q8.8"),
    "max": (2, "elementwise", "Q8.8", "Q8.8"), "exp": (3, "elementwise", "Q8.8", "Q8.8"),
    "recip": (4, "elementwise", "Q8.8", "Q8.8"), "rsqrt": (5, "elementwise", "Q8.8", "Q8.8"),
    "silu": (6, "elementwise", "Q8.8", "Q8.8"), "softplus": (7, "elementwise", "Q8.8", "Q8.8"),
    "sum": (8, "reduction", "Q8.8", "int32 (Q24.8)"), "rmax": (9, "reduction", "Q8.8", "Q8.8"),
    "argmax": (10, "reduction", "int32", "int32 index"),
    "requant": (11, "elementwise", "int32", "int8"),
    "rescale": (12, "elementwise", "int32", "Q8.8"),
    "sub": (13, "elementwise", "Q8.8", "Q8.8"),
    "qshift": (14, "reduction", "Q8.8", "int32 shift (0..9)"),
}
#: VECTOR ``vop`` codes (the vector unit's opcodes, :class:`tilewright.rtl.vector_unit.VectorOp`)
VECTOR_OPCODES: dict[str, int] = {name: row[0] for name, row in VECTOR_UNIT_OPS.items()}
#: the vector ops that produce one result word per run of beats
VECTOR_REDUCTIONS = tuple(name for name, row in VECTOR_UNIT_OPS.items() if row[1] == "reduction")
#: the vector ops that read whole signed 32-bit lanes (the others read Q8.8 in the low 16 bits)
VECTOR_INT32_OPS = tuple(name for name, row in VECTOR_UNIT_OPS.items() if row[2] == "int32")
#: bits of ``requant``'s per-lane shift (the low bits of the lane after the multiplier's word)
REQUANT_SHIFT_BITS = 6
#: busy cycles of a VECTOR instruction beyond one per beat (buffer read + the unit's 4-stage
#: pipeline; the contract of :mod:`tilewright.rtl.vector_engine`, which checks it)
VECTOR_OVERHEAD_CYCLES = 5
#: busy cycles of a SCAN instruction beyond one per time step (h0 read, first operand read, the
#: unit's one-cycle step, the final state's write; the contract of
#: :mod:`tilewright.rtl.vector_engine`, which checks it)
SCAN_OVERHEAD_CYCLES = 4
#: fields whose smallest accepted value is not 0 (the core needs GEMM sizes of at least 1)
FIELD_MIN: dict[tuple[str, str], int] = {("GEMM", "m"): 1, ("GEMM", "k"): 1, ("GEMM", "n"): 1,
                                         ("VECTOR", "count"): 1, ("SCAN", "count"): 1}
#: bits of an accumulator lane (int32), from the formats registry
_ACC_BITS = bits_of("int32")
#: opcode -> op name
OPCODES: dict[int, str] = {code: name for name, (code, _) in ISA.items()}


def field_slices(op: str) -> dict[str, tuple[int, int]]:
    """``{field: (lowest bit, width)}`` of ``op``'s fields in the instruction word."""
    out, lo = {}, OPCODE_BITS
    for name, width in ISA[op][1]:
        out[name] = (lo, width)
        lo += width
    return out


for _op in ISA:        # the table itself must fit the word
    assert sum(w for _, w in ISA[_op][1]) + OPCODE_BITS <= WORD_BITS, _op


def _py_mux(cond, a, b):
    return a if cond else b


def vbuf_spans(op: str, f, lanes: int, mux=_py_mux) -> list:
    """The vector-buffer ranges instruction ``op`` with fields ``f`` reads or writes, as
    ``(first word, last word - first word)`` pairs (words wrap modulo :data:`VBUF_WORDS`; the
    module docstring's list). Works on ints, or on Amaranth values with ``mux=Mux`` (the
    controller's decoder), so hardware and cycle model read one definition. ``lanes``: the
    vector unit's lanes (SCAN's y words). Empty for ops without a vector-buffer range."""
    if op in VBUF_DMA_OPS:
        return [(f["vaddr"], f["count"] - 1)]
    if op == "SCAN":
        n = f["count"]
        return [(f["ab"], 2 * n - 1), (f["c"], n - 1), (f["h0"], 0),
                (f["dst"], (n - 1) // lanes + 1)]
    if op != "VECTOR":
        return []

    def vop_in(names):
        out = False
        for name in names:
            out = out | (f["vop"] == VECTOR_OPCODES[name])
        return out
    n, seg = f["count"], f["seg"]
    last_seg = mux(seg == 0, 0, (n - 1) // mux(seg == 0, 1, seg))
    b_off = mux(f["b_inc"], n - 1, last_seg)
    spans = [(f["a"], n - 1), (f["b"], b_off),
             (f["dst"], mux(vop_in(VECTOR_REDUCTIONS), last_seg, n - 1))]
    shifted = vop_in(name for name, row in VECTOR_UNIT_OPS.items()
                     if row[2] == "int32" and row[1] == "elementwise")   # requant, rescale
    return spans + [(f["b"] + 1, mux(shifted, b_off, -1))]


def vbuf_bank_mask(op: str, f, lanes: int, mux=_py_mux):
    """Bit ``k`` set when instruction ``op`` (fields ``f``) reads or writes bank ``k`` of a
    double-buffered vector buffer: the banks of the first and last word of each range of
    :func:`vbuf_spans`, both for a range longer than a bank; a range whose last offset is -1
    (a DMA ``count`` of 0, a ``VECTOR`` without shift words) has none. Ints, or Amaranth values
    with ``mux=Mux``."""
    top = VBUF_BANK_WORDS.bit_length() - 1        # the address bit that picks the bank
    assert VBUF_BANKS == 2 and 1 << top == VBUF_BANK_WORDS

    def bank(word):
        return mux((word >> top) & 1, 2, 1)
    out = 0
    for start, off in vbuf_spans(op, f, lanes, mux):
        touched = bank(start) | bank(start + off) | mux(off >= VBUF_BANK_WORDS, 3, 0)
        out = out | mux(off < 0, 0, touched)
    return out


def takes_scales(arch: ArchSpec) -> bool:
    """True when ``arch``'s GEMM engine applies per-tensor fp32 scales (the ``SCALE``
    instruction): float elements with fp32 scaling, i.e. the fp8 formats."""
    f = get_format(arch.tensor_engine.input_format)
    return f.kind == "float" and f.scaling == "fp32"


def fp32_pattern(x) -> int:
    """The fp32 bit pattern (unsigned int) of a one-element scale array or a float."""
    return int(np.asarray(x, np.float32).reshape(-1)[0].view(np.uint32))


class AssemblerError(UserError, ValueError):
    """An instruction that cannot be encoded/decoded; the message names index, op and field."""


class CodegenError(UserError, ValueError):
    """A Program codegen cannot emit code for (another arch's Program, code longer than the
    instruction memory); the message names the program and the limit."""


@dataclass(frozen=True)
class Instr:
    """One instruction: ``op`` (a key of :data:`ISA`) and its field values (non-negative ints)."""

    op: str
    fields: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return " ".join([self.op] + [f"{k}={v}" for k, v in self.fields.items()])


def _ins(op: str, **fields: int) -> Instr:
    return Instr(op, dict(fields))


def assemble(instrs: list[Instr]) -> list[int]:
    """Encode ``instrs`` into 64-bit words. Raises :class:`AssemblerError` naming the
    instruction index, op and field for an unknown op, a missing or unknown field, or a value
    outside ``0 .. 2**width - 1`` (never truncates)."""
    words = []
    for i, ins in enumerate(instrs):
        if ins.op not in ISA:
            raise AssemblerError(f"instruction {i}: unknown op {ins.op!r}; accepted: "
                                 f"{', '.join(ISA)}")
        code, fields = ISA[ins.op]
        names = [n for n, _ in fields]
        extra = sorted(set(ins.fields) - set(names))
        if extra:
            raise AssemblerError(f"instruction {i} ({ins.op}): unknown field {extra[0]!r}; "
                                 f"accepted: {', '.join(names) or 'none'}")
        word = code
        for name, (lo, width) in field_slices(ins.op).items():
            if name not in ins.fields:
                raise AssemblerError(f"instruction {i} ({ins.op}): field {name!r} is missing")
            v, lo_v = ins.fields[name], FIELD_MIN.get((ins.op, name), 0)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) \
                    or not lo_v <= int(v) < (1 << width):
                raise AssemblerError(f"instruction {i} ({ins.op}): field {name}={v!r} does not "
                                     f"fit: accepted {lo_v} .. {(1 << width) - 1} ({width} bits)")
            word |= int(v) << lo
        words.append(word)
    return words


def disassemble(words: list[int]) -> list[Instr]:
    """Decode 64-bit words; raises :class:`AssemblerError` naming the word index for a value
    that is not a 64-bit word, an unknown opcode or non-zero bits outside the op's fields."""
    out = []
    for i, w in enumerate(words):
        if not isinstance(w, (int, np.integer)) or not 0 <= int(w) < (1 << WORD_BITS):
            raise AssemblerError(f"word {i}: {w!r} is not a {WORD_BITS}-bit unsigned word")
        w = int(w)
        code = w & ((1 << OPCODE_BITS) - 1)
        if code not in OPCODES:
            raise AssemblerError(f"word {i} ({w:#018x}): unknown opcode {code}; accepted: "
                                 + ", ".join(f"{c} ({n})" for c, n in OPCODES.items()))
        op = OPCODES[code]
        fields, used = {}, OPCODE_BITS
        for name, (lo, width) in field_slices(op).items():
            fields[name] = (w >> lo) & ((1 << width) - 1)
            used = lo + width
        if w >> used:
            raise AssemblerError(f"word {i} ({w:#018x}, {op}): reserved bits {used}..63 are not "
                                 f"zero")
        for name, v in fields.items():
            if v < FIELD_MIN.get((op, name), 0):
                raise AssemblerError(f"word {i} ({w:#018x}, {op}): field {name}={v}: accepted "
                                     f"from {FIELD_MIN[(op, name)]}")
        out.append(Instr(op, fields))
    return out


# ---- external memory ----------------------------------------------------------------------------
def beat_bytes(arch: ArchSpec) -> int:
    """W: bytes per external-memory beat (one beat per cycle) — off-chip bytes per cycle
    ``bandwidth_gbps * 1e3 / clock_mhz`` rounded down to a power of two, at least 1."""
    per_cycle = arch.offchip.bandwidth_gbps * 1e3 / arch.clock_mhz
    return 1 << max(0, math.floor(math.log2(per_cycle))) if per_cycle >= 1 else 1


def memory_latency_cycles(arch: ArchSpec) -> int:
    """Cycles from a read request to its first data beat: ceil(latency_ns * clock_mhz / 1000),
    at least 1."""
    return max(1, math.ceil(arch.offchip.latency_ns * arch.clock_mhz / 1000 - 1e-9))


def word_bytes(arch: ArchSpec) -> dict[str, int]:
    """Bytes per on-chip word ``{"a", "b", "c"}`` (:meth:`GemmLayout.word_bytes`: systolic
    ``rows``, ``cols``, ``4 * cols``; tile-MAC kinds one engine tile per word)."""
    return GemmLayout.word_bytes(arch)


def vector_word_bytes(arch: ArchSpec) -> int:
    """Bytes per vector-buffer word: ``4 * arch.vector_unit.lanes`` (32-bit lanes); 0 for an
    ArchSpec without a vector unit (its top has no vector buffer)."""
    return 4 * arch.vector_unit.lanes if arch.vector_unit is not None else 0


def beats_per_word(arch: ArchSpec) -> dict[str, int]:
    """External beats per on-chip word of the A, B and accumulator buffers and the vector buffer
    (``ceil(B / W)``; keys a, b, c and, with a vector unit, v)."""
    w = beat_bytes(arch)
    out = {k: -(-b // w) for k, b in word_bytes(arch).items()}
    if vector_word_bytes(arch):
        out["v"] = -(-vector_word_bytes(arch) // w)
    return out


def index_beats(arch: ArchSpec) -> int:
    """External beats of the index word ``LOAD_IDX`` reads: ``ceil(IDX_WORD_BYTES / W)`` (1 for
    every ``W >= 2`` bytes)."""
    return -(-IDX_WORD_BYTES // beat_bytes(arch))


def words_to_beats(words: list[int], word_bytes_: int, w: int) -> list[int]:
    """On-chip words (unsigned ints of ``word_bytes_`` bytes) -> external W-byte words."""
    r = -(-word_bytes_ // w)
    mask = (1 << (8 * w)) - 1
    return [(word >> (8 * w * j)) & mask for word in words for j in range(r)]


def beats_to_words(beats: list[int], word_bytes_: int, w: int) -> list[int]:
    """Inverse of :func:`words_to_beats` (high padding bytes are dropped)."""
    r = -(-word_bytes_ // w)
    if len(beats) % r:
        raise ValueError(f"{len(beats)} beats is not a multiple of {r} beats per word")
    out = []
    for i in range(0, len(beats), r):
        word = 0
        for j in range(r):
            word |= int(beats[i + j]) << (8 * w * j)
        out.append(word & ((1 << (8 * word_bytes_)) - 1))
    return out


# ---- programs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tile:
    """One GEMM step of a segment: C rows ``m0 .. m0+tm`` x columns ``n0 .. n0+tn`` over the K
    range ``k0 .. k0+k``. ``*_addr`` are external word addresses of the step's A and B blocks and
    of its output tile's C block (shared by every K step of that tile; ``k0 > 0`` accumulates;
    ``last``: the tile's last K step, after which C is stored)."""

    m0: int
    tm: int
    n0: int
    tn: int
    k: int
    a_addr: int
    b_addr: int
    c_addr: int
    k0: int = 0
    last: bool = True

    def layout(self, arch: ArchSpec) -> GemmLayout:
        return GemmLayout.for_arch(arch, self.tm, self.k, self.tn)


def find_segment(segments, task: str):
    """The segment of ``segments`` (anything with a ``task`` name) for ``task``; KeyError naming
    the segments there are."""
    for s in segments:
        if s.task == task:
            return s
    raise KeyError(f"no segment for task {task!r}; segments: "
                   f"{', '.join(s.task for s in segments)}")


@dataclass(frozen=True)
class Segment:
    """The code of one GEMM task: instructions ``entry .. end`` (inclusive, the last is END)."""

    task: str
    m: int
    k: int
    n: int
    entry: int
    end: int
    tiles: tuple[Tile, ...]


@dataclass(frozen=True)
class IsaProgram:
    """What :func:`codegen` emits: instruction words, segments and the external-memory map."""

    arch_hash: str
    words: tuple[int, ...]
    segments: tuple[Segment, ...]
    beat_bytes: int           #: W, bytes per external word
    ext_words: int            #: external memory size the image needs (W-byte words)

    def segment(self, task: str) -> Segment:
        return find_segment(self.segments, task)

    def instructions(self) -> list[Instr]:
        return disassemble(list(self.words))

    def image(self, arch: ArchSpec, seg: Segment, a: np.ndarray, b: np.ndarray,
              xa: np.ndarray | None = None, xb: np.ndarray | None = None) -> dict[int, int]:
        """External words (address -> value) holding every tile's A and B blocks of ``seg`` for
        operands ``a`` (M x K int8) and ``b`` (K x N int8); an MX ArchSpec's 8-bit element codes
        also need their E8M0 block-scale codes ``xa`` (M x ceil(K/32)) and ``xb``
        (ceil(K/32) x N), which travel in the words (:mod:`tilewright.compiler.layout`); other
        layouts ignore ``xa``/``xb`` (an fp8 task's per-tensor scales travel in its SCALE
        instructions)."""
        if a.shape != (seg.m, seg.k) or b.shape != (seg.k, seg.n):
            raise ValueError(f"task {seg.task}: operands {a.shape} @ {b.shape}, expected "
                             f"({seg.m}, {seg.k}) @ ({seg.k}, {seg.n})")
        wb, w = word_bytes(arch), self.beat_bytes
        out: dict[int, int] = {}
        for t in seg.tiles:
            lay = t.layout(arch)
            rows, cols, blks = slice(t.m0, t.m0 + t.tm), slice(t.n0, t.n0 + t.tn), slice(None)
            if lay.mx:             # K chunks are whole MX blocks (multiples of R = 32)
                blks = slice(t.k0 // lay.rows, t.k0 // lay.rows + lay.kb)
            ks = slice(t.k0, t.k0 + t.k)
            for addr, words, nb in (
                    (t.a_addr, lay.a_words_of(a[rows, ks], _rows_of(xa, rows, blks, lay.mx)),
                     wb["a"]),
                    (t.b_addr, lay.b_words_of(b[ks, cols], _rows_of(xb, blks, cols, lay.mx)),
                     wb["b"])):
                for j, beat in enumerate(words_to_beats(words, nb, w)):
                    out[addr + j] = beat
        return out

    def c_result(self, arch: ArchSpec, seg: Segment, read) -> np.ndarray:
        """C (M x N int32) of ``seg`` from external memory; ``read(addr, count)`` returns
        ``count`` external words from ``addr``."""
        wb, w = word_bytes(arch)["c"], self.beat_bytes
        r = -(-wb // w)
        c = np.zeros((seg.m, seg.n), np.int32)
        for t in seg.tiles:
            if not t.last:
                continue
            lay = t.layout(arch)
            words = beats_to_words(read(t.c_addr, lay.acc_words * r), wb, w)
            c[t.m0:t.m0 + t.tm, t.n0:t.n0 + t.tn] = lay.c_from_lanes(
                unpack_lanes(words, lay.acc_lanes, _ACC_BITS))
        return c


def _rows_of(x: np.ndarray | None, rows: slice, cols: slice, mx: bool) -> np.ndarray | None:
    """The block scales ``x[rows, cols]`` of an MX layout's tile; None otherwise."""
    return None if x is None or not mx else x[rows, cols]


def _half_depths(arch: ArchSpec) -> tuple[int, int, int]:
    return tuple(half_depth(d) for d in GemmLayout.depths(arch))


def _fit(arch: ArchSpec, m: int, k: int, n: int) -> tuple[int, int, int] | None:
    """(tile count, tm, tn) with the fewest tiles of all of ``k`` that fit one half of each
    buffer, or None if not even one R x C output block fits (tile-MAC kinds: R x C = Tm x Tn,
    laid out like OS with one word per Tk-deep K block and one accumulator word per block)."""
    te = arch.tensor_engine
    R, C = te.rows, te.cols
    ha, hb, hc = _half_depths(arch)
    kb = -(-k // R)
    nb_all, mb_all = -(-n // C), -(-m // R)
    kw, accw = (-(-k // te.depth), 1) if not te.systolic else (k, R)   # words per block
    best = None
    for nbt in range(1, nb_all + 1):
        if te.dataflow == "ws":
            if nbt * kb * R > hb:
                break
            tm = min(m, ha // kb, hc // nbt)
            if tm < 1:
                continue
        else:
            if nbt * kw > hb:
                break
            mbt = min(mb_all, ha // kw, hc // (nbt * accw))
            if mbt < 1:
                continue
            tm = min(m, mbt * R)
        tn = min(n, nbt * C)
        count = -(-m // tm) * -(-n // tn)
        if best is None or count < best[0]:
            best = (count, tm, tn)
    return best


def _up(x: int, q: int) -> int:
    return -(-x // q) * q


def _tile_shape(arch: ArchSpec, m: int, k: int, n: int, what: str) -> tuple[int, int, int]:
    """(tm, tn, kc): output tiles of tm x tn and K chunks of kc (kc = k unless all of K does not
    fit, then the longest chunk that does, a multiple of R) that fit one half of each buffer;
    fewest tiles, then the most even split. Raises DoesNotFit when not even one R x C output
    block with a K chunk of R fits."""
    te = arch.tensor_engine
    R, C = te.rows, te.cols
    kq = R if te.systolic else te.depth       # K chunks are multiples of kq
    ha, hb, hc = _half_depths(arch)
    for name, v in (("M", m), ("K", k), ("N", n)):
        if not 1 <= v <= MAX_GEMM_DIM:
            raise DoesNotFit(f"{what}: GEMM {name}={v}: must be from 1 to {MAX_GEMM_DIM}")
    kc, best = k, _fit(arch, m, k, n)
    if best is None:        # split K: the longest chunk one output block allows
        kc = (R * min(hb // R, ha) if te.dataflow == "ws" else min(ha, hb) // R * R
              if te.systolic else te.depth * min(ha, hb))
        best = _fit(arch, m, kc, n) if kc >= 1 else None
    if best is None:
        raise DoesNotFit(
            f"{what}: GEMM {m}x{k}x{n} on {arch.name}: not even one {R}x{C} output block with "
            f"a K chunk of {kq} fits half of a buffer (halves: A {ha}, B {hb}, accumulator {hc} "
            f"words; memory.scratchpad_kib={arch.memory.scratchpad_kib}, "
            f"memory.accumulator_kib={arch.memory.accumulator_kib})")
    _, tm, tn = best
    # even out: same counts, smallest pieces (WS rows any size; OS rows, K chunks multiples of R)
    mt, nt, kt = -(-m // tm), -(-n // tn), -(-k // kc)
    tn = min(n, _up(-(-n // nt), C))
    tm = -(-m // mt) if te.dataflow == "ws" else min(m, _up(-(-m // mt), R))
    kc = k if kt == 1 else min(kc, _up(-(-k // kt), kq))
    return tm, tn, kc


def codegen_gemm(arch: ArchSpec, m: int, k: int, n: int, task: str = "gemm",
                 base_pc: int = 0, base_addr: int = 0,
                 scales: tuple[int, int | tuple[int, ...]] | None = None
                 ) -> tuple[list[Instr], Segment, int]:
    """Code for one ``m x k x n`` GEMM: (instructions, segment, next free external address).
    ``scales``: ``(s_a, s_b)`` as fp32 bit patterns (only where :func:`takes_scales`;
    CodegenError elsewhere) — the segment starts with ``SCALE`` A, and with ``SCALE`` B when
    ``s_b`` is one per-tensor pattern; a tuple of ``n`` patterns (per output column) instead
    makes every output tile one array width (``cols``) wide, so that a STORE drains one column
    fold, and puts a ``SCALE_COL`` per lane whose scale changes (all of the first tile's) before
    each STORE: lane ``j`` of tile ``n0`` gets ``s_b[n0 + j]``. None: no SCALE (the run's scales
    stay 1.0).

    The GEMM is cut into steps (output tile x K chunk, K innermost; see :func:`_tile_shape`).
    Schedule — steps ``s = 0 ..`` alternate A/B halves ``s % 2``, output tiles ``j`` alternate
    accumulator halves ``j % 2``::

        LOAD_A/LOAD_B step 0 into half 0
        for each step s:  SYNC dma (+gemm if s > 0); GEMM s (acc=1 unless its K chunk is the
                          first); STORE tile j-1 if step s-1 was its last; LOAD_A/LOAD_B step s+1
                          into half (s+1) % 2
        SYNC gemm; STORE the last tile; END

    so the loads of the next step and the store of the previous tile overlap the current GEMM.
    The DMA runs one transfer at a time, so ``SYNC dma`` before a GEMM also covers the store that
    last read the accumulator half the GEMM is about to overwrite.
    """
    tm, tn, kc = _tile_shape(arch, m, k, n, f"task {task}")
    if scales is not None and not takes_scales(arch):
        raise CodegenError(f"task {task}: {arch.name}'s {arch.tensor_engine.input_format} "
                           f"engine takes no per-tensor scales (SCALE: fp8 formats only)")
    columns = scales is not None and isinstance(scales[1], tuple)
    if columns:
        if len(scales[1]) != n:
            raise CodegenError(f"task {task}: {len(scales[1])} per-column B scales for N={n}")
        tn = min(tn, arch.tensor_engine.cols)     # one column fold per STORE (fewer words: fits)
    bpw = beats_per_word(arch)
    steps, addr = [], base_addr
    for m0 in range(0, m, tm):
        for n0 in range(0, n, tn):
            tmm, tnn = min(tm, m - m0), min(tn, n - n0)
            blocks = []
            for k0 in range(0, k, kc):
                lay = GemmLayout.for_arch(arch, tmm, min(kc, k - k0), tnn)
                blocks.append((k0, lay.k, addr, addr + lay.a_words * bpw["a"]))
                addr += lay.a_words * bpw["a"] + lay.b_words * bpw["b"]
            c_addr = addr
            addr += GemmLayout.for_arch(arch, tmm, 1, tnn).acc_words * bpw["c"]
            steps += [Tile(m0, tmm, n0, tnn, kk, a_addr, b_addr, c_addr, k0, k0 + kk == k)
                      for k0, kk, a_addr, b_addr in blocks]

    def loads(t: Tile, h: int) -> list[Instr]:
        lay = t.layout(arch)
        return [_ins("LOAD_A", buf=h, count=lay.a_words, addr=t.a_addr),
                _ins("LOAD_B", buf=h, count=lay.b_words, addr=t.b_addr)]

    lane_scales: list[int | None] = [None] * arch.tensor_engine.cols   # as set by this code

    def store(t: Tile, h: int) -> list[Instr]:
        out = []
        if columns:                 # the tile's column scales, lane j = column n0 + j
            for j in range(t.tn):
                v = scales[1][t.n0 + j]
                if lane_scales[j] != v:
                    out.append(_ins("SCALE_COL", lane=j, value=v))
                    lane_scales[j] = v
        return out + [_ins("STORE", buf=h, count=t.layout(arch).acc_words, addr=t.c_addr)]

    code = [] if scales is None else [_ins("SCALE", operand=i, value=v)
                                      for i, v in enumerate(scales[:1] if columns else scales)]
    code += loads(steps[0], 0)
    j = 0                                   # output tile of the current step
    for s, t in enumerate(steps):
        if s > 0 and steps[s - 1].last:
            j += 1
        h = s % 2
        code.append(_ins("SYNC", dma=1, gemm=int(s > 0), vec=0))
        code.append(_ins("GEMM", m=t.tm, k=t.k, n=t.tn, a_buf=h, b_buf=h, c_buf=j % 2,
                         acc=int(t.k0 > 0)))
        if s > 0 and steps[s - 1].last:
            code += store(steps[s - 1], (j - 1) % 2)
        if s + 1 < len(steps):
            code += loads(steps[s + 1], 1 - h)
    code += [_ins("SYNC", dma=0, gemm=1, vec=0), *store(steps[-1], j % 2), _ins("END")]
    seg = Segment(task, m, k, n, base_pc, base_pc + len(code) - 1, tuple(steps))
    return code, seg, addr


def codegen(program: Program, arch: ArchSpec) -> IsaProgram:
    """Code and external-memory map for every ``gemm`` task of ``program`` (one segment each, in
    task order). Other task kinds run on the host. On an ArchSpec that :func:`takes_scales`, a
    task's ``a_scale``/``b_scale`` (one-element fp32 constants of the Program) become its
    segment's SCALE instructions (:func:`task_scales`). Raises DoesNotFit (naming the task) for a
    GEMM that cannot be tiled, AssemblerError for a field that does not fit, CodegenError for a
    program compiled for another arch, code longer than the instruction memory or a scale SCALE
    cannot carry."""
    if program.arch_hash != arch.content_hash():
        raise CodegenError(f"program {program.name} was compiled for arch {program.arch_hash}, "
                         f"not {arch.name} ({arch.content_hash()})")
    code: list[Instr] = []
    segs, addr = [], 0
    for task in program.tasks:
        if not isinstance(task, GemmTask):
            continue
        c, seg, addr = codegen_gemm(arch, task.m, task.k, task.n, task.name, len(code), addr,
                                    task_scales(program, task, arch))
        code += c
        segs.append(seg)
    return _finish(arch, code, segs, addr)


def task_scales(program: Program, task: GemmTask, arch: ArchSpec
                ) -> tuple[int, int | tuple[int, ...]] | None:
    """The scale operands ``(s_a, s_b)`` (fp32 patterns; a missing scale is 1.0) of ``task`` on
    an ArchSpec that :func:`takes_scales`, None when it has neither scale or the ArchSpec takes
    none (an MX task's block scales travel in its words): ``s_a`` one pattern (``SCALE`` A),
    ``s_b`` one pattern (``SCALE`` B) or, for an fp32 constant of ``task.n`` elements (one per
    output column), a tuple of ``n`` (``SCALE_COL``, :func:`codegen_gemm`). CodegenError
    (naming the task) for any other scale: a run-time tensor, another dtype or size (the
    instructions carry the values, fixed when the code is generated)."""
    if not takes_scales(arch) or (task.a_scale is None and task.b_scale is None):
        return None
    out: list = []
    for name, per_col in ((task.a_scale, 1), (task.b_scale, task.n)):
        if name is None:
            out.append(fp32_pattern(1.0))
            continue
        x = program.constants.get(name)
        xa = None if x is None else np.asarray(x)
        if xa is None or xa.dtype != np.float32 or xa.size not in (1, per_col):
            what = "A" if per_col == 1 else "B"
            raise CodegenError(
                f"task {task.name}: scale {name!r} must be an fp32 constant of the program "
                f"with one element" + ("" if per_col == 1 else f" or N={task.n} (per column)")
                + f" (operand {what}: SCALE{'' if per_col == 1 else '/SCALE_COL'}), not "
                + ("a run-time tensor" if xa is None else f"{xa.dtype} of shape {xa.shape}"))
        out.append(fp32_pattern(xa) if xa.size == 1 else
                   tuple(int(v) for v in xa.reshape(-1).view(np.uint32)))
    return out[0], out[1]


def _finish(arch: ArchSpec, code: list[Instr], segs: list[Segment], addr: int) -> IsaProgram:
    if len(code) > IMEM_WORDS:
        raise CodegenError(f"program needs {len(code)} instruction words; the controller's "
                         f"instruction memory holds {IMEM_WORDS}")
    return IsaProgram(arch.content_hash(), tuple(assemble(code)), tuple(segs), beat_bytes(arch),
                      addr)


def codegen_gemms(arch: ArchSpec, shapes: list[tuple[int, int, int]]) -> IsaProgram:
    """Code for plain GEMMs ``(m, k, n)`` (tasks ``gemm0``, ``gemm1``, ...), one segment each."""
    code: list[Instr] = []
    segs, addr = [], 0
    for i, (m, k, n) in enumerate(shapes):
        c, seg, addr = codegen_gemm(arch, m, k, n, f"gemm{i}", len(code), addr)
        code += c
        segs.append(seg)
    return _finish(arch, code, segs, addr)
