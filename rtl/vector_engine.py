"""Vector engine of the accelerator top: the vector buffer, the vector unit, the scan unit and the
sequencers that stream one ``VECTOR`` or ``SCAN`` instruction through them.

Blocks: a :data:`~tilewright.compiler.codegen.VBUF_WORDS`-word vector buffer (Amaranth
``lib.memory``; words of ``lanes`` 32-bit lanes, lane 0 in the low bits) with one write port
(32-bit lane enables) and three read ports (read latency 1),
:class:`~tilewright.rtl.vector_unit.VectorUnit` and :class:`~tilewright.rtl.scan_unit.ScanUnit`
(``lanes`` state lanes; Q0.16 a, Q16.16 b/c/h). The DMA
reaches the buffer through ``dma_wr_*`` (its write port) and ``dma_rd_*`` (read port 0) while the
sequencer is idle; the controller never runs both at once (``LOAD_V``/``STORE_V``/``VECTOR`` wait
for the DMA and this engine to be idle), so the ports are shared by a plain multiplexer.

Double-buffered buffer (ArchSpec ``vector_unit.double_buffer``)
    The buffer is :data:`~tilewright.compiler.codegen.VBUF_BANKS` memories of
    :data:`~tilewright.compiler.codegen.VBUF_BANK_WORDS` words (bank = the address's top bit),
    each with one write port and four read ports: the sequencers' three and the DMA's own. A
    logical read port reads the same low address bits in both banks and returns the bank its
    address (registered with the read) named; a bank's write port takes the sequencers' write
    when it is in that bank, else the DMA's, so the DMA and the engine access different banks in
    the same cycle. The controller keeps them on different banks while both run (the ISA's bank
    rule); same timing as the single buffer.

Command (``sync`` domain; ``start`` pulses for one cycle while ``busy`` is low)
    ``op`` (the vector unit's opcode, :data:`~tilewright.compiler.codegen.VECTOR_OPCODES`),
    ``count`` beats (>= 1), source words ``a`` and ``b``, ``b_inc``, destination word ``dst``,
    segment length ``seg`` (the ISA's VECTOR). Beat ``i`` feeds every 32-bit lane of words
    ``a+i`` and ``b+i`` (``b_inc`` = 1) or ``b + i // seg`` (``b_inc`` = 0; ``b`` when
    ``seg`` = 0) to the unit (its Q8.8 ops read the low 16 bits), and the low 6 bits of each lane
    of the word after that b word as ``requant``'s / ``rescale``'s shift (read port C, idle
    outside SCAN), with
    ``last`` on the last beat of each segment and
    on beat ``count-1``; each result word is written to ``dst``, ``dst+1``, ... as it leaves the
    unit (elementwise: ``count`` words; ``sum``/``rmax``: one word per segment). Addresses wrap
    modulo the buffer depth.

SCAN command (``scan_start``; fields ``scan_count``, ``scan_ab``, ``scan_c``, ``scan_h0``,
``scan_dst``, the ISA's SCAN)
    Started in cycle ``s``: reads word ``h0`` in ``s+1``; reads step ``t``'s a, b and c words in
    ``s+2+t`` and hands them to the scan unit in ``s+3+t`` (``first`` on step 0, with the h0 word);
    writes ``y[t]`` into its lane in ``s+4+t`` and the final state word in ``s+4+count``.
    ``busy`` is high in ``s+1 .. s+D`` with ``D = count + SCAN_OVERHEAD`` (4).

Timing contract
    A command started in cycle ``c`` reads beat ``i`` in cycle ``c+1+i`` and hands it to the unit
    in ``c+2+i``; the unit answers :data:`~tilewright.rtl.vector_unit.LATENCY` cycles later
    (its results are always taken). ``busy`` is high in cycles ``c+1 .. c+D`` with
    ``D = count + 1 + LATENCY`` (:data:`VECTOR_OVERHEAD` = ``1 + LATENCY`` cycles of pipeline fill
    on top of one beat per cycle) — the last result is written in cycle ``c+D``.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import (REQUANT_SHIFT_BITS, SCAN_OVERHEAD_CYCLES, VBUF_BANKS,
                                         VBUF_BANK_WORDS, VBUF_WORDS,
                                         VECTOR_OPCODES,
                                         VECTOR_OVERHEAD_CYCLES, VECTOR_REDUCTIONS, field_slices)
from tilewright.rtl.scan_unit import ScanUnit
from tilewright.rtl.vector_unit import LATENCY, VectorUnit, vector_lanes

__all__ = ["VectorEngine", "VECTOR_OVERHEAD", "SCAN_OVERHEAD", "VBUF_ADDR_BITS"]

#: busy cycles of a VECTOR command beyond one per beat: the buffer read and the unit's pipeline
VECTOR_OVERHEAD = 1 + LATENCY
assert VECTOR_OVERHEAD == VECTOR_OVERHEAD_CYCLES, "the compiler's VECTOR timing drifted"
#: busy cycles of a SCAN command beyond one per step: h0 read, operand read, the unit's step
#: register, the final state's write
SCAN_OVERHEAD = 4
assert SCAN_OVERHEAD == SCAN_OVERHEAD_CYCLES, "the compiler's SCAN timing drifted"
VBUF_ADDR_BITS = (VBUF_WORDS - 1).bit_length()
_COUNT_BITS = field_slices("VECTOR")["count"][1]
_SEG_BITS = field_slices("VECTOR")["seg"][1]


class VectorEngine(wiring.Component):
    """Vector buffer + vector unit + VECTOR sequencer for one ArchSpec (module docstring)."""

    def __init__(self, arch: ArchSpec):
        if not isinstance(arch, ArchSpec):
            raise TypeError(f"VectorEngine takes an ArchSpec, not {type(arch).__name__}")
        self._lanes = vector_lanes(arch)
        self._banked = bool(arch.vector_unit is not None and arch.vector_unit.double_buffer)
        wbits = 32 * self._lanes
        super().__init__({
            "start": In(1), "op": In(4), "count": In(_COUNT_BITS), "a": In(VBUF_ADDR_BITS),
            "b": In(VBUF_ADDR_BITS), "b_inc": In(1), "dst": In(VBUF_ADDR_BITS),
            "seg": In(_SEG_BITS), "busy": Out(1),
            "dma_wr_en": In(1), "dma_wr_addr": In(VBUF_ADDR_BITS), "dma_wr_data": In(wbits),
            "dma_rd_addr": In(VBUF_ADDR_BITS), "dma_rd_data": Out(wbits),
            "scan_start": In(1), "scan_count": In(_COUNT_BITS), "scan_ab": In(VBUF_ADDR_BITS),
            "scan_c": In(VBUF_ADDR_BITS), "scan_h0": In(VBUF_ADDR_BITS),
            "scan_dst": In(VBUF_ADDR_BITS),
        })

    @property
    def lanes(self) -> int:
        return self._lanes

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        m.submodules.unit = unit = VectorUnit(lanes=lanes)
        if self._banked:
            m.submodules.scan = scan = ScanUnit(lanes=lanes)
            wp, rp_a, rp_b, rp_c = self._banks(m)
        else:
            m.submodules.vbuf = vbuf = memory.Memory(shape=unsigned(32 * lanes),
                                                     depth=VBUF_WORDS, init=[])
            m.submodules.scan = scan = ScanUnit(lanes=lanes)
            wp = vbuf.write_port(granularity=32)
            rp_a, rp_b, rp_c = vbuf.read_port(), vbuf.read_port(), vbuf.read_port()
        all_lanes = (1 << lanes) - 1

        op, count = Signal(4), Signal(_COUNT_BITS)
        a, b, dst = (Signal(VBUF_ADDR_BITS, name=n) for n in ("a_ptr", "b_ptr", "dst_ptr"))
        b_inc, seg = Signal(), Signal(_SEG_BITS)
        issued = Signal(_COUNT_BITS)        # beats read so far
        seg_pos = Signal(_SEG_BITS)         # beat within its segment
        seg_idx = Signal(_COUNT_BITS)       # segment of the beat
        running = Signal()                  # beats left to read
        pending = Signal(_COUNT_BITS + 1)   # result words due from beats already read
        rd_valid, rd_last = Signal(), Signal()
        scan_busy = Signal()
        m.d.comb += self.busy.eq(running | (pending != 0) | scan_busy)

        is_red = Signal()
        m.d.comb += is_red.eq(sum(op == VECTOR_OPCODES[r] for r in VECTOR_REDUCTIONS) != 0)
        with m.If(self.start & ~self.busy):
            m.d.sync += [op.eq(self.op), count.eq(self.count), a.eq(self.a), b.eq(self.b),
                         b_inc.eq(self.b_inc), dst.eq(self.dst), seg.eq(self.seg),
                         issued.eq(0), seg_pos.eq(0), seg_idx.eq(0),
                         running.eq(self.count != 0)]

        # read: the sequencer owns read port A while running, else the DMA does
        last = Signal()
        m.d.comb += last.eq((issued == count - 1) | ((seg != 0) & (seg_pos == seg - 1)))
        m.d.sync += [rd_valid.eq(running), rd_last.eq(last)]
        b_addr = Signal(VBUF_ADDR_BITS)
        if self._banked:          # the DMA reads through its own port (self._banks)
            m.d.comb += [rp_a.addr.eq(a + issued),
                         b_addr.eq(b + Mux(b_inc, issued, seg_idx)), rp_b.addr.eq(b_addr),
                         rp_c.addr.eq(b_addr + 1)]        # requant's shifts (SCAN overrides)
        else:
            m.d.comb += [rp_a.addr.eq(Mux(running, a + issued, self.dma_rd_addr)),
                         b_addr.eq(b + Mux(b_inc, issued, seg_idx)), rp_b.addr.eq(b_addr),
                         rp_c.addr.eq(b_addr + 1),        # requant's shifts (SCAN overrides)
                         self.dma_rd_data.eq(rp_a.data)]
        self._scan(m, scan, rp_a, rp_b, rp_c, wp, scan_busy)
        due = Signal()            # this beat produces a result word (elementwise, or a last)
        m.d.comb += due.eq(running & (~is_red | last))
        with m.If(running):
            m.d.sync += issued.eq(issued + 1)
            with m.If((seg != 0) & (seg_pos == seg - 1)):
                m.d.sync += [seg_pos.eq(0), seg_idx.eq(seg_idx + 1)]
            with m.Else():
                m.d.sync += seg_pos.eq(seg_pos + 1)
            with m.If(issued == count - 1):
                m.d.sync += running.eq(0)

        # the unit: one beat per cycle, results always taken
        p = unit.operands.payload
        m.d.comb += [unit.operands.valid.eq(rd_valid), p.op.as_value().eq(op),
                     p.last.eq(rd_last),
                     p.a.as_value().eq(rp_a.data), p.b.as_value().eq(rp_b.data),
                     p.s.as_value().eq(Cat(rp_c.data[32 * i:32 * i + REQUANT_SHIFT_BITS]
                                           for i in range(lanes))),
                     unit.results.ready.eq(1)]

        # write: result words to dst.., else the DMA's words
        res = unit.results
        m.d.sync += pending.eq(pending + due - res.valid)
        with m.If(res.valid):
            m.d.comb += [wp.en.eq(all_lanes), wp.addr.eq(dst),
                         wp.data.eq(res.payload.data.as_value())]
            m.d.sync += dst.eq(dst + 1)
        if not self._banked:      # (banked: the DMA writes through its bank's own port)
            with m.Elif(self.dma_wr_en):
                m.d.comb += [wp.en.eq(all_lanes), wp.addr.eq(self.dma_wr_addr),
                             wp.data.eq(self.dma_wr_data)]
        return m

    def _banks(self, m: Module):
        """The two banks (module docstring) behind logical ports: returns the sequencers' write
        port and read ports A, B, C (objects with ``addr``/``data``, the write port also
        ``en``); the DMA's ``dma_wr_*``/``dma_rd_*`` are wired to the banks here."""
        lanes, wbits = self._lanes, 32 * self._lanes
        low = (VBUF_BANK_WORDS - 1).bit_length()         # address bits inside a bank
        banks = []
        for k in range(VBUF_BANKS):
            mem = memory.Memory(shape=unsigned(wbits), depth=VBUF_BANK_WORDS, init=[])
            m.submodules[f"vbuf{k}"] = mem
            banks.append(mem)

        class _Port:
            def __init__(self, name, write=False):
                self.addr = Signal(VBUF_ADDR_BITS, name=f"{name}_addr")
                self.data = Signal(wbits, name=f"{name}_data")
                if write:
                    self.en = Signal(lanes, name=f"{name}_en")

        def read(name):
            port = _Port(name)
            sel = Signal(name=f"{name}_bank_q")
            m.d.sync += sel.eq(port.addr[low:])
            data = []
            for mem in banks:
                rp = mem.read_port()
                m.d.comb += rp.addr.eq(port.addr[:low])
                data.append(rp.data)
            m.d.comb += port.data.eq(Mux(sel, data[1], data[0]))
            return port
        rp_a, rp_b, rp_c, rp_d = read("rd_a"), read("rd_b"), read("rd_c"), read("rd_dma")
        m.d.comb += [rp_d.addr.eq(self.dma_rd_addr), self.dma_rd_data.eq(rp_d.data)]
        wp = _Port("wr_eng", write=True)
        all_lanes = (1 << lanes) - 1
        for k, mem in enumerate(banks):
            port = mem.write_port(granularity=32)
            with m.If((wp.en != 0) & (wp.addr[low:] == k)):
                m.d.comb += [port.en.eq(wp.en), port.addr.eq(wp.addr[:low]),
                             port.data.eq(wp.data)]
            with m.Elif(self.dma_wr_en & (self.dma_wr_addr[low:] == k)):
                m.d.comb += [port.en.eq(all_lanes), port.addr.eq(self.dma_wr_addr[:low]),
                             port.data.eq(self.dma_wr_data)]
        return wp, rp_a, rp_b, rp_c

    def _scan(self, m: Module, scan: ScanUnit, rp_a, rp_b, rp_c, wp, scan_busy) -> None:
        """The SCAN sequencer (module docstring): owns the three read ports while it runs and
        writes y lanes and the final state through the write port (the engine's other users
        are idle then: the controller issues one vector-buffer command at a time)."""
        lanes = self._lanes
        count = Signal(_COUNT_BITS, name="scan_count_reg")
        ab, c, h0a = (Signal(VBUF_ADDR_BITS, name=f"scan_{k}_reg") for k in ("ab", "c", "h0"))
        h0_phase, h0_valid, running = Signal(), Signal(), Signal()
        step = Signal(_COUNT_BITS)                  # steps read so far
        beat_valid, beat_first = Signal(), Signal()
        y_word, y_lane = Signal(VBUF_ADDR_BITS), Signal(range(max(lanes, 2)))
        results = Signal(_COUNT_BITS)               # y values written so far
        fin_pending = Signal()
        h_fin = Signal(32 * lanes)
        h0_reg = Signal(32 * lanes)

        with m.If(self.scan_start & ~self.busy):
            m.d.sync += [count.eq(self.scan_count), ab.eq(self.scan_ab), c.eq(self.scan_c),
                         h0a.eq(self.scan_h0), h0_phase.eq(1), scan_busy.eq(1), step.eq(0),
                         results.eq(0), y_word.eq(self.scan_dst), y_lane.eq(0)]
        # cycle s+1: read h0; s+2 ..: read step t's a, b (rp_a, rp_b) and c (rp_c)
        with m.If(h0_phase):
            m.d.comb += rp_c.addr.eq(h0a)
            m.d.sync += [h0_phase.eq(0), running.eq(1)]
        m.d.sync += h0_valid.eq(h0_phase)
        with m.If(h0_valid):
            m.d.sync += h0_reg.eq(rp_c.data)
        with m.If(running):
            m.d.comb += [rp_a.addr.eq(ab + step), rp_b.addr.eq(ab + count + step),
                         rp_c.addr.eq(c + step)]
            m.d.sync += step.eq(step + 1)
            with m.If(step == count - 1):
                m.d.sync += running.eq(0)
        m.d.sync += [beat_valid.eq(running), beat_first.eq(running & (step == 0))]

        p = scan.s_in.payload
        m.d.comb += [scan.s_in.valid.eq(beat_valid), p.first.eq(beat_first),
                     scan.h_out.ready.eq(1),
                     scan.h0.as_value().eq(h0_reg)]
        for i in range(lanes):
            m.d.comb += [p.a[i].eq(rp_a.data[32 * i:32 * i + 16]),
                         p.b[i].eq(rp_b.data[32 * i:32 * i + 32]),
                         p.c[i].eq(rp_c.data[32 * i:32 * i + 32])]
        out = scan.h_out
        with m.If(out.valid):            # y[t] into its lane; the last step's h kept for later
            m.d.comb += [wp.en.eq((Const(1, lanes) << y_lane)[:lanes]), wp.addr.eq(y_word),
                         wp.data.eq(Cat(*[out.payload.y] * lanes))]
            m.d.sync += results.eq(results + 1)
            with m.If(y_lane == lanes - 1):
                m.d.sync += [y_lane.eq(0), y_word.eq(y_word + 1)]
            with m.Else():
                m.d.sync += y_lane.eq(y_lane + 1)
            with m.If(results == count - 1):
                m.d.sync += [fin_pending.eq(1), h_fin.eq(out.payload.h.as_value())]
        with m.If(fin_pending):          # the final state, in the word after the last y
            m.d.comb += [wp.en.eq((1 << lanes) - 1), wp.addr.eq(y_word + (y_lane != 0)),
                         wp.data.eq(h_fin)]
            m.d.sync += [fin_pending.eq(0), scan_busy.eq(0)]
