"""Vector engine of the accelerator top: the vector buffer, the vector unit and the sequencer that
streams one ``VECTOR`` instruction through it.

Blocks: a :data:`~tilewright.compiler.codegen.VBUF_WORDS`-word vector buffer (Amaranth
``lib.memory``; words of ``lanes`` 32-bit lanes, lane 0 in the low bits) with one write port and
two read ports (read latency 1), and :class:`~tilewright.rtl.vector_unit.VectorUnit`. The DMA
reaches the buffer through ``dma_wr_*`` (its write port) and ``dma_rd_*`` (read port 0) while the
sequencer is idle; the controller never runs both at once (``LOAD_V``/``STORE_V``/``VECTOR`` wait
for the DMA and this engine to be idle), so the ports are shared by a plain multiplexer.

Command (``sync`` domain; ``start`` pulses for one cycle while ``busy`` is low)
    ``op`` (the vector unit's opcode, :data:`~tilewright.compiler.codegen.VECTOR_OPCODES`),
    ``count`` beats (>= 1), source words ``a`` and ``b``, ``b_inc`` (1: ``b`` advances with
    ``a``; 0: the word ``b`` every beat), destination word ``dst``. Beat ``i`` feeds the low 16
    bits of every lane of words ``a+i`` and ``b+i`` (or ``b``) to the unit as signed Q8.8, with
    ``last`` on beat ``count-1``; each result word is written to ``dst``, ``dst+1``, ... as it
    leaves the unit (elementwise: ``count`` words; ``sum``/``rmax``: one word). Addresses wrap
    modulo the buffer depth.

Timing contract
    A command started in cycle ``c`` reads beat ``i`` in cycle ``c+1+i`` and hands it to the unit
    in ``c+2+i``; the unit answers :data:`~tilewright.rtl.vector_unit.LATENCY` cycles later
    (its results are always taken). ``busy`` is high in cycles ``c+1 .. c+D`` with
    ``D = count + 1 + LATENCY`` (:data:`VECTOR_OVERHEAD` = ``1 + LATENCY`` cycles of pipeline fill
    on top of one beat per cycle) — the last result is written in cycle ``c+D``.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import (VBUF_WORDS, VECTOR_OPCODES, VECTOR_OVERHEAD_CYCLES,
                                         VECTOR_REDUCTIONS, field_slices)
from tilewright.rtl.vector_unit import LATENCY, OP_NAMES, VectorUnit, vector_lanes

__all__ = ["VectorEngine", "VECTOR_OVERHEAD", "VBUF_ADDR_BITS"]

#: busy cycles of a VECTOR command beyond one per beat: the buffer read and the unit's pipeline
VECTOR_OVERHEAD = 1 + LATENCY
assert VECTOR_OVERHEAD == VECTOR_OVERHEAD_CYCLES, "the compiler's VECTOR timing drifted"
VBUF_ADDR_BITS = (VBUF_WORDS - 1).bit_length()
_COUNT_BITS = field_slices("VECTOR")["count"][1]

# the compiler's VECTOR opcodes are the unit's (one table would be nicer; the rtl layer checks)
assert {k: v.value for k, v in OP_NAMES.items()} == VECTOR_OPCODES, "VECTOR opcodes drifted"


class VectorEngine(wiring.Component):
    """Vector buffer + vector unit + VECTOR sequencer for one ArchSpec (module docstring)."""

    def __init__(self, arch: ArchSpec):
        if not isinstance(arch, ArchSpec):
            raise TypeError(f"VectorEngine takes an ArchSpec, not {type(arch).__name__}")
        self._lanes = vector_lanes(arch)
        wbits = 32 * self._lanes
        super().__init__({
            "start": In(1), "op": In(4), "count": In(_COUNT_BITS), "a": In(VBUF_ADDR_BITS),
            "b": In(VBUF_ADDR_BITS), "b_inc": In(1), "dst": In(VBUF_ADDR_BITS), "busy": Out(1),
            "dma_wr_en": In(1), "dma_wr_addr": In(VBUF_ADDR_BITS), "dma_wr_data": In(wbits),
            "dma_rd_addr": In(VBUF_ADDR_BITS), "dma_rd_data": Out(wbits),
        })

    @property
    def lanes(self) -> int:
        return self._lanes

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        m.submodules.unit = unit = VectorUnit(lanes=lanes)
        m.submodules.vbuf = vbuf = memory.Memory(shape=unsigned(32 * lanes), depth=VBUF_WORDS,
                                                 init=[])
        wp, rp_a, rp_b = vbuf.write_port(), vbuf.read_port(), vbuf.read_port()

        op, count = Signal(4), Signal(_COUNT_BITS)
        a, b, dst = (Signal(VBUF_ADDR_BITS, name=n) for n in ("a_ptr", "b_ptr", "dst_ptr"))
        b_inc = Signal()
        issued = Signal(_COUNT_BITS)        # beats read so far
        running = Signal()                  # beats left to read
        outstanding = Signal(_COUNT_BITS)   # result words not yet written
        rd_valid, rd_last = Signal(), Signal()
        m.d.comb += self.busy.eq(outstanding != 0)

        is_red = Signal()
        m.d.comb += is_red.eq(sum(self.op == VECTOR_OPCODES[r] for r in VECTOR_REDUCTIONS) != 0)
        with m.If(self.start & ~self.busy):
            m.d.sync += [op.eq(self.op), count.eq(self.count), a.eq(self.a), b.eq(self.b),
                         b_inc.eq(self.b_inc), dst.eq(self.dst), issued.eq(0),
                         running.eq(self.count != 0),
                         outstanding.eq(Mux(self.count == 0, 0, Mux(is_red, 1, self.count)))]

        # read: the sequencer owns read port A while running, else the DMA does
        m.d.sync += [rd_valid.eq(running), rd_last.eq(issued == count - 1)]
        m.d.comb += [rp_a.addr.eq(Mux(running, a + issued, self.dma_rd_addr)),
                     rp_b.addr.eq(b + Mux(b_inc, issued, 0)),
                     self.dma_rd_data.eq(rp_a.data)]
        with m.If(running):
            m.d.sync += issued.eq(issued + 1)
            with m.If(issued == count - 1):
                m.d.sync += running.eq(0)

        # the unit: one beat per cycle, results always taken
        p = unit.operands.payload
        m.d.comb += [unit.operands.valid.eq(rd_valid), p.op.as_value().eq(op),
                     p.last.eq(rd_last),
                     p.a.as_value().eq(Cat(rp_a.data[32 * i:32 * i + 16] for i in range(lanes))),
                     p.b.as_value().eq(Cat(rp_b.data[32 * i:32 * i + 16] for i in range(lanes))),
                     unit.results.ready.eq(1)]

        # write: result words to dst.., else the DMA's words
        res = unit.results
        m.d.comb += [wp.en.eq(res.valid | self.dma_wr_en),
                     wp.addr.eq(Mux(res.valid, dst, self.dma_wr_addr)),
                     wp.data.eq(Mux(res.valid, res.payload.data.as_value(), self.dma_wr_data))]
        with m.If(res.valid):
            m.d.sync += [dst.eq(dst + 1), outstanding.eq(outstanding - 1)]
        return m
