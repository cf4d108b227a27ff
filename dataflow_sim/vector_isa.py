"""Functional model of the accelerator top's vector path at the instruction level.

Executes the ``LOAD_V`` / ``LOAD_IDX`` / ``LOAD_VI`` / ``STORE_V`` / ``VECTOR`` / ``SYNC`` /
``END`` instructions
of a segment (:mod:`tilewright.compiler.codegen`) on a numpy vector buffer and an external-memory
dict, with the
vector unit's bit-exact arithmetic (:func:`tilewright.dataflow_sim.vector_numerics.run_beats`).
It is the reference the Verilated top is checked against, word for word.

Semantics (what the RTL does for the code :mod:`tilewright.compiler.vector_codegen` emits):
SCAN uses the scan unit's arithmetic (:mod:`tilewright.dataflow_sim.scan_numerics`: the step and
the C-projection on codes); a VECTOR instruction reads every source word first and then writes its results, which is what the
hardware does whenever its destination does not start more than
:data:`~tilewright.compiler.codegen.VECTOR_OVERHEAD_CYCLES` words after a source range it
overlaps (the code generator writes in place or to disjoint words only). The Q8.8 ops read the
low 16 bits of each 32-bit lane; ``argmax``, ``requant`` and ``rescale`` read whole signed 32-bit
lanes, and ``requant`` and ``rescale`` their shifts from the word after each beat's b word. Vector-buffer addresses wrap at
:data:`~tilewright.compiler.codegen.VBUF_WORDS`.
"""

from __future__ import annotations

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import (IDX_BITS, IDX_WORD_BYTES, REQUANT_SHIFT_BITS, VBUF_WORDS,
                                         VECTOR_OPCODES, beat_bytes, beats_to_words, disassemble,
                                         index_beats, vector_word_bytes, words_to_beats)
from tilewright.compiler.vector_codegen import (VectorIsa, VectorKernel, codegen_vector,
                                                pack_vector_words, unpack_vector_words)
from tilewright.dataflow_sim.scan_numerics import project_codes, scan_step
from tilewright.dataflow_sim.vector_numerics import run_beats

__all__ = ["run_vector_segment", "kernel_reference"]

_OP_NAMES = {v: k for k, v in VECTOR_OPCODES.items()}


def run_vector_segment(isa: VectorIsa, name: str, arch: ArchSpec, ext: dict[int, int],
                       vbuf: np.ndarray | None = None, idx: int = 0) -> np.ndarray:
    """Run segment ``name`` of ``isa`` from its entry to END on ``ext`` (external W-byte words,
    updated in place by STORE_V), ``idx`` in the index register at the start (``LOAD_VI`` reads
    row ``idx`` of a table of ``count``-word rows: external word ``addr + idx * count * r``;
    ``LOAD_IDX`` replaces ``idx`` with the low ``IDX_BITS`` bits of the index word at its
    ``addr``); returns the
    vector buffer ``[VBUF_WORDS, lanes]`` (int64 lane values) it leaves. GEMM-path instructions
    are refused (this model covers the vector path)."""
    seg = isa.segment(name)
    lanes = arch.vector_unit.lanes
    w, wb = beat_bytes(arch), vector_word_bytes(arch)
    r = -(-wb // w)
    buf = np.zeros((VBUF_WORDS, lanes), np.int64) if vbuf is None else vbuf
    for ins in disassemble(list(isa.words[seg.entry:seg.end + 1])):
        f = ins.fields
        if ins.op in ("LOAD_V", "LOAD_VI"):
            base = (f["addr"] + (idx * f["count"] * r if ins.op == "LOAD_VI" else 0)) % (1 << 32)
            words = beats_to_words([ext.get((base + j) % (1 << 32), 0)
                                    for j in range(f["count"] * r)], wb, w)
            at = (f["vaddr"] + np.arange(f["count"])) % VBUF_WORDS
            buf[at] = unpack_vector_words(words, lanes)
        elif ins.op == "LOAD_IDX":
            word, = beats_to_words([ext.get((f["addr"] + j) % (1 << 32), 0)
                                    for j in range(index_beats(arch))], IDX_WORD_BYTES, w)
            idx = word & ((1 << IDX_BITS) - 1)
        elif ins.op == "STORE_V":
            at = (f["vaddr"] + np.arange(f["count"])) % VBUF_WORDS
            for j, beat in enumerate(words_to_beats(pack_vector_words(buf[at]), wb, w)):
                ext[f["addr"] + j] = beat
        elif ins.op == "VECTOR":
            op, n, seg = _OP_NAMES[f["vop"]], f["count"], f["seg"]
            i = np.arange(n)
            a = buf[(f["a"] + i) % VBUF_WORDS]
            b_idx = f["b"] + (i if f["b_inc"] else (i // seg if seg else np.zeros(n, np.int64)))
            b = buf[b_idx % VBUF_WORDS]
            shifts = buf[(b_idx + 1) % VBUF_WORDS] & ((1 << REQUANT_SHIFT_BITS) - 1)
            last = (i == n - 1) | ((i % seg == seg - 1) if seg else False)
            out = np.asarray(run_beats([op] * n, a, b, list(last), shifts),
                             np.int64).reshape(-1, lanes)
            buf[(f["dst"] + np.arange(len(out))) % VBUF_WORDS] = out
        elif ins.op == "SCAN":
            _scan(buf, f, lanes)
        elif ins.op == "END":
            break
        elif ins.op != "SYNC":
            raise ValueError(f"vector segment {name}: instruction {ins} is not on the vector "
                             f"path (accepted: LOAD_V, LOAD_IDX, LOAD_VI, STORE_V, VECTOR, SCAN, "
                             f"SYNC, END)")
    return buf


def _scan(buf: np.ndarray, f: dict[str, int], lanes: int) -> None:
    """One SCAN (the ISA table): the scan unit's step and projection on the buffer's words."""
    n = f["count"]
    rows = lambda base: buf[(base + np.arange(n)) % VBUF_WORDS]  # noqa: E731
    a, b, c = rows(f["ab"]) & 0xFFFF, rows(f["ab"] + n), rows(f["c"])
    h = buf[f["h0"] % VBUF_WORDS].copy()
    ys = np.empty(n, np.int64)
    for t in range(n):
        h = scan_step(a[t], b[t], h)
        ys[t] = project_codes(c[t], h)
    for t in range(n):               # y[t] into lane t % lanes of word dst + t // lanes
        buf[(f["dst"] + t // lanes) % VBUF_WORDS, t % lanes] = ys[t]
    buf[(f["dst"] + -(-n // lanes)) % VBUF_WORDS] = h


def kernel_reference(kernel: VectorKernel, arch: ArchSpec, *operands: np.ndarray,
                     isa: VectorIsa | None = None) -> np.ndarray:
    """The bit-exact result of ``kernel`` on raw Q8.8 ``operands``: its code
    (:func:`~tilewright.compiler.vector_codegen.codegen_vector`) run on this model."""
    isa = isa or codegen_vector(arch, [kernel])
    seg = isa.segment(kernel.name)
    ext = seg.image(arch, *operands)
    run_vector_segment(isa, kernel.name, arch, ext, idx=seg.index(*operands))
    return seg.result(arch, lambda addr, count: [ext.get(addr + i, 0) for i in range(count)])

