"""DMA engine of the accelerator top: one external-memory port <-> the core's A/B/accumulator SRAMs.

One command at a time (``start`` while ``busy`` is low): ``op`` = :data:`OP_LOAD_A`,
:data:`OP_LOAD_B` (external -> A/B buffer half ``buf``, words ``0 .. count-1``),
:data:`OP_STORE` (accumulator half ``buf`` words ``0 .. count-1`` -> external),
:data:`OP_LOAD_V` / :data:`OP_STORE_V` (external <-> vector-buffer words ``vaddr ..
vaddr+count-1``, modulo the buffer depth), external word address ``addr``. On-chip words of ``B`` bytes travel as ``r = ceil(B / W)`` beats of ``W`` bytes
(the image format of :mod:`tilewright.compiler.codegen`).

External memory port (``sync`` domain; valid/ready handshakes, payload held until transferred)
    ``mem_req_valid/ready``, ``mem_req_write``, ``mem_req_addr`` (W-byte words), ``mem_req_len``
    (beats): one request per command. Read data: ``mem_rd_valid``/``mem_rd_data`` (8W bits), the
    DMA keeps ``mem_rd_ready`` high while it waits for data. Write data: ``mem_wr_valid``/
    ``mem_wr_data``/``mem_wr_ready``, the ``len`` beats in order after the request.

Timing contract (memory that is always ready and answers a read ``L`` cycles after the request
cycle with one beat per cycle): a command issued (``start`` high) in cycle ``c`` keeps ``busy``
high in cycles ``c+1 .. c+D``: LOAD ``D = L + count*r`` (request in ``c+1``, beats in
``c+1+L ..``, each word written to the SRAM in its last beat's cycle); STORE ``D = 1 + count*r``
(request in ``c+1``, one write beat per cycle from ``c+2``; writes are posted — no
acknowledgement is awaited). With the ArchSpec's ``pipeline.host_read`` the accumulator's read
takes two cycles and runs free (the core's ``acc_rd_en`` tied high: ``acc_rd_data`` in cycle
``t + 2`` is the word at ``acc_rd_addr`` in ``t``): a STORE reads word 0 in one more cycle
before its request (``c+1``; request in ``c+2``), word 1 in ``c+2``, then word ``w + 2`` as word
``w``'s last beat goes, and keeps the words that arrive while the write side stalls in a
two-word skid buffer: ``D = 2 + count*r``. ``count = 0`` does nothing (``D = 0``; with the
ArchSpec's ``pipeline.issue`` the controller's issue register never starts the DMA with
``count = 0``, and the DMA relies on that: no count test between ``start`` and its registers). The same for the vector
buffer (``LOAD_V``/``STORE_V``) with ``r`` = beats per vector word.

Indirect loads (``Dma(indirect=True)``, an ArchSpec with a vector unit): :data:`OP_LOAD_VI` is
``OP_LOAD_V`` from external word ``addr + idx * count * r`` (the ``idx`` input sampled with
``start``; wrapping at :data:`ADDR_BITS` bits) — row ``idx`` of a table of ``count``-word rows,
the ISA's ``LOAD_VI``; same timing as ``OP_LOAD_V``. :data:`OP_LOAD_IDX` (the ISA's
``LOAD_IDX``, ``count`` 1) reads the index word at ``addr``
(:func:`~tilewright.compiler.codegen.index_beats` beats ``ri``) and drives its low
:data:`~tilewright.compiler.codegen.IDX_BITS` bits on ``idx_wr_data`` with ``idx_wr_en`` high in
its last beat's cycle (the controller's index register); timing as a LOAD of one ``ri``-beat
word, ``D = L + ri``. Without ``indirect`` the engine has no ``idx``/``idx_wr_*`` ports and its
logic is the one it had before ``LOAD_VI`` existed.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import (IDX_BITS, VBUF_WORDS, beat_bytes, beats_per_word,
                                         field_slices, index_beats, word_bytes)
from tilewright.compiler.layout import GemmLayout

__all__ = ["Dma", "OP_LOAD_A", "OP_LOAD_B", "OP_STORE", "OP_LOAD_V", "OP_STORE_V", "OP_LOAD_VI",
           "OP_LOAD_IDX",
           "COUNT_BITS", "ADDR_BITS", "VBUF_ADDR_BITS"]

OP_LOAD_A, OP_LOAD_B, OP_STORE, OP_LOAD_V, OP_STORE_V, OP_LOAD_VI, OP_LOAD_IDX = range(7)
#: address bits of the vector buffer (``VBUF_WORDS`` words)
VBUF_ADDR_BITS = (VBUF_WORDS - 1).bit_length()
#: widths of the command fields, from the ISA table
COUNT_BITS = field_slices("LOAD_A")["count"][1]
ADDR_BITS = field_slices("LOAD_A")["addr"][1]


def _abits(depth: int) -> int:
    return max(1, (depth - 1).bit_length())


class Dma(wiring.Component):
    """The DMA engine for one ArchSpec (see module docstring)."""

    def __init__(self, *, arch: ArchSpec, indirect: bool = False):
        if not isinstance(arch, ArchSpec):
            raise TypeError(f"Dma takes arch=ArchSpec, not {type(arch).__name__}")
        if not isinstance(indirect, bool):
            raise TypeError(f"Dma indirect must be a bool, not {type(indirect).__name__}")
        if indirect and arch.vector_unit is None:
            raise ValueError(f"{arch.name}: indirect loads (LOAD_VI, LOAD_IDX) fill the vector "
                             f"buffer; this ArchSpec has no vector_unit")
        self._indirect = indirect
        self._host_reg = arch.tensor_engine.pipeline.host_read
        # pipeline.issue: the controller's issue register starts the DMA only for count != 0
        self._started_nonzero = arch.tensor_engine.pipeline.issue
        self._w = beat_bytes(arch)
        self._r = beats_per_word(arch)
        self._ri = index_beats(arch) if indirect else 0
        self._wb = word_bytes(arch)       # on-chip word sizes (the core's layouts)
        self._lanes = arch.vector_unit.lanes if arch.vector_unit is not None else 0
        self._depths = GemmLayout.depths(arch)
        da, db, dc = self._depths
        W = 8 * self._w
        super().__init__({
            "start": In(1), "op": In(3), "buf": In(1), "count": In(COUNT_BITS),
            "addr": In(ADDR_BITS), "vaddr": In(VBUF_ADDR_BITS), "busy": Out(1),
            **({"idx": In(IDX_BITS), "idx_wr_en": Out(1), "idx_wr_data": Out(IDX_BITS)}
               if indirect else {}),
            "mem_req_valid": Out(1), "mem_req_ready": In(1), "mem_req_write": Out(1),
            "mem_req_addr": Out(ADDR_BITS), "mem_req_len": Out(32),
            "mem_rd_valid": In(1), "mem_rd_ready": Out(1), "mem_rd_data": In(W),
            "mem_wr_valid": Out(1), "mem_wr_ready": In(1), "mem_wr_data": Out(W),
            "a_wr_en": Out(1), "a_wr_addr": Out(_abits(da)), "a_wr_data": Out(8 * self._wb["a"]),
            "b_wr_en": Out(1), "b_wr_addr": Out(_abits(db)), "b_wr_data": Out(8 * self._wb["b"]),
            "acc_rd_addr": Out(_abits(dc)), "acc_rd_data": In(8 * self._wb["c"]),
            # the vector buffer's ports (an ArchSpec without a vector unit has none)
            **({"v_wr_en": Out(1), "v_wr_addr": Out(VBUF_ADDR_BITS),
                "v_wr_data": Out(32 * self._lanes),
                "v_rd_addr": Out(VBUF_ADDR_BITS), "v_rd_data": In(32 * self._lanes)}
               if self._lanes else {}),
        })

    @property
    def beat_bytes(self) -> int:
        return self._w

    def elaborate(self, platform):
        m = Module()
        W = 8 * self._w
        ra, rb, rc = self._r["a"], self._r["b"], self._r["c"]
        vec = self._lanes > 0
        rv = self._r["v"] if vec else rc
        ri = self._ri
        rmax = max(ra, rb, rc, rv, ri)
        da, db, dc = self._depths
        op, buf = Signal(3), Signal()
        count, addr = Signal(COUNT_BITS), Signal(ADDR_BITS)
        vaddr = Signal(VBUF_ADDR_BITS)
        word, chunk = Signal(COUNT_BITS), Signal(range(rmax + 1))
        r_op = Signal(range(rmax + 1))
        is_v = (op == OP_LOAD_V) | (op == OP_STORE_V)
        is_store = (op == OP_STORE) | (op == OP_STORE_V)
        r_sel = Mux(op == OP_LOAD_A, ra, Mux(op == OP_LOAD_B, rb, Mux(is_v, rv, rc)))
        if self._indirect:       # LOAD_IDX: one index word of ri beats
            r_sel = Mux(op == OP_LOAD_IDX, ri, r_sel)
        m.d.comb += r_op.eq(r_sel)
        last_chunk = chunk == r_op - 1

        # state machine as an if-chain (Amaranth's FSM emits case statements without a default,
        # which Verilator's lint flags)
        IDLE, REQ, READ, WRITE = range(4)
        state = Signal(2)
        if self._host_reg:        # count - 1 kept from the start (no subtractor in the state's
            count_m1 = Signal(COUNT_BITS, name="count_minus_1")        # next-state logic)
            with m.If((state == IDLE) & self.start):
                m.d.sync += count_m1.eq(self.count - 1)
            last_word = word == count_m1
        else:
            last_word = word == count - 1

        def goto(x):
            m.d.sync += state.eq(x)

        prime = None
        acc_word = self.acc_rd_data      # the accumulator word the write gearbox sends
        if self._host_reg:
            # the accumulator's two-register read (pipeline.host_read) runs free (the top ties
            # the core's acc_rd_en high): the word at address acc_ra in cycle t is on
            # acc_rd_data in t + 2. A STORE reads word 0 in its first REQ cycle (no request
            # yet: `prime`), word 1 in the next, then word w + 2 in the cycle word w's last
            # beat goes — the reads of the enabled pipeline, so the timing is unchanged — and
            # a two-word skid buffer keeps the words that arrive while the write side stalls.
            # Every select of the buffer is a register: no ready-dependent net reaches the
            # RAMs or the buffer's enables (the enable's fan-out to the accumulator's block
            # RAMs was the accelerator top's critical path on ECP5).
            acc_ra = Signal(_abits(dc), name="acc_read_addr")
            primed = Signal(name="acc_primed")
            prime = (state == REQ) & (op == OP_STORE) & ~primed
            left = Signal(COUNT_BITS, name="acc_reads_left")     # words not yet read
            left_nz = Signal(name="acc_reads_left_nz")           # left != 0, kept
            ahead = Signal(range(3), name="acc_reads_ahead")     # read, not yet sent
            sent = Signal(name="acc_word_sent")                  # word w's last beat goes
            read = Signal(name="acc_read")                       # acc_ra is a wanted word
            arrive = Signal(2, name="acc_read_pipe")             # reads 1 and 2 cycles ago
            skid = [Signal.like(self.acc_rd_data, name=f"acc_skid{i}") for i in range(2)]
            wp, rp = Signal(name="acc_skid_wp"), Signal(name="acc_skid_rp")
            held = Signal(range(3), name="acc_skid_held")        # words in the skid buffer
            m.d.comb += [
                self.acc_rd_addr.eq(acc_ra),
                # a STORE's words have rc beats: its last beat without the r_op select
                sent.eq((state == WRITE) & self.mem_wr_ready & (chunk == rc - 1)
                        & (op == OP_STORE)),
                read.eq((op == OP_STORE) & (state != IDLE) & left_nz & ((ahead < 2) | sent)),
            ]
            m.d.sync += [arrive.eq(Cat(read, arrive[0])),
                         ahead.eq(ahead + read - sent),
                         held.eq(held + arrive[1] - sent)]
            with m.If(read):
                m.d.sync += [acc_ra.eq(acc_ra + 1), left.eq(left - 1), left_nz.eq(left != 1)]
            with m.If(arrive[1]):           # every arriving word is kept (wp: a register)
                for i, reg in enumerate(skid):
                    with m.If(wp == i):
                        m.d.sync += reg.eq(self.acc_rd_data)
                m.d.sync += wp.eq(~wp)
            with m.If(sent):
                m.d.sync += rp.eq(~rp)
            # the word to send: the oldest kept one, or the one arriving now (skid empty)
            acc_word = Mux(held == 0, self.acc_rd_data, Mux(rp, skid[1], skid[0]))
            with m.If((state == IDLE) & self.start):
                m.d.sync += [acc_ra.eq(Mux(self.buf, dc // 2, 0)), primed.eq(0),
                             left.eq(self.count), left_nz.eq(1 if self._started_nonzero else self.count != 0), ahead.eq(0),
                             held.eq(0), wp.eq(0), rp.eq(0)]
            with m.If(prime):
                m.d.sync += primed.eq(1)
        with m.If(state == IDLE):
            with m.If(self.start if self._started_nonzero else self.start & (self.count != 0)):
                m.d.sync += [op.eq(self.op), buf.eq(self.buf), count.eq(self.count),
                             addr.eq(self.addr), vaddr.eq(self.vaddr), word.eq(0), chunk.eq(0)]
                if self._indirect:   # LOAD_VI: a LOAD_V of row idx (count words of rv beats)
                    with m.If(self.op == OP_LOAD_VI):
                        m.d.sync += [op.eq(OP_LOAD_V),
                                     addr.eq(self.addr + self.idx * self.count * rv)]
                goto(REQ)
        with m.Elif(state == REQ):
            m.d.comb += [self.busy.eq(1), self.mem_req_valid.eq(1 if prime is None else ~prime),
                         self.mem_req_write.eq(is_store), self.mem_req_addr.eq(addr),
                         self.mem_req_len.eq(count * r_op)]
            if not self._host_reg:
                m.d.comb += self.acc_rd_addr.eq(Mux(buf, dc // 2, 0))
            if vec:
                m.d.comb += self.v_rd_addr.eq(vaddr)
            with m.If(self.mem_req_ready if prime is None else self.mem_req_ready & ~prime):
                goto(Mux(is_store, WRITE, READ))
        with m.Elif(state == READ):
            m.d.comb += [self.busy.eq(1), self.mem_rd_ready.eq(1)]
            with m.If(self.mem_rd_valid):
                with m.If(last_chunk):
                    m.d.comb += [self.a_wr_en.eq(op == OP_LOAD_A),
                                 self.b_wr_en.eq(op == OP_LOAD_B)]
                    if vec:
                        m.d.comb += self.v_wr_en.eq(op == OP_LOAD_V)
                    if self._indirect:
                        m.d.comb += self.idx_wr_en.eq(op == OP_LOAD_IDX)
                    m.d.sync += [word.eq(word + 1), chunk.eq(0)]
                    with m.If(last_word):
                        goto(IDLE)
                with m.Else():
                    m.d.sync += chunk.eq(chunk + 1)
        with m.Else():     # WRITE
            nxt = Signal.like(word, name="next_word")
            m.d.comb += [self.busy.eq(1), self.mem_wr_valid.eq(1),
                         nxt.eq(word + (self.mem_wr_ready & last_chunk))]
            if not self._host_reg:
                m.d.comb += self.acc_rd_addr.eq(Mux(buf, dc // 2, 0) + nxt)
            if vec:
                m.d.comb += self.v_rd_addr.eq(vaddr + nxt)
            with m.If(self.mem_wr_ready):
                with m.If(last_chunk):
                    m.d.sync += [word.eq(word + 1), chunk.eq(0)]
                    with m.If(last_word):
                        goto(IDLE)
                with m.Else():
                    m.d.sync += chunk.eq(chunk + 1)

        # read gearbox: earlier beats of a word shift into `gather` (newest at the top)
        if rmax > 1:
            gather = Signal((rmax - 1) * W)
            with m.If(self.mem_rd_valid & self.mem_rd_ready & ~last_chunk):
                m.d.sync += gather.eq(Cat(gather[W:], self.mem_rd_data) if rmax > 2
                                      else self.mem_rd_data)
        ports = [(ra, 8 * self._wb["a"], "a", Mux(buf, da // 2, 0)),
                 (rb, 8 * self._wb["b"], "b", Mux(buf, db // 2, 0))]
        if vec:
            ports.append((rv, 32 * self._lanes, "v", vaddr))
        def assembled(r):        # the word whose last beat is on mem_rd_data (r beats)
            return Cat(gather[(rmax - r) * W:], self.mem_rd_data) if r > 1 else self.mem_rd_data
        for r, bits, port, base in ports:
            m.d.comb += [getattr(self, f"{port}_wr_data").eq(assembled(r)[:bits]),
                         getattr(self, f"{port}_wr_addr").eq(base + word)]
        if self._indirect:
            m.d.comb += self.idx_wr_data.eq(assembled(ri)[:IDX_BITS])
        # write gearbox: beat `chunk` of the accumulator (or vector) word being read
        rw = max(rc, rv)

        def padded(value, bits):
            return Cat(value, Const(0, rw * W - bits)) if rw * W > bits else value
        src = padded(acc_word, 8 * self._wb["c"])
        if vec:
            src = Mux(op == OP_STORE_V, padded(self.v_rd_data, 32 * self._lanes), src)
        m.d.comb += self.mem_wr_data.eq(src.word_select(chunk, W) if rw > 1 else src[:W])
        return m
