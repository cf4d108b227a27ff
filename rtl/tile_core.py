"""TileCore: a tile-MAC tensor engine with its A/B scratchpads, accumulator SRAM and a sequencer.

The core of the accelerator top (:mod:`tilewright.rtl.accel_top`) for ``tensor_engine.kind``
``adder_tree``, ``outer_product`` and ``cube``: the engine of :mod:`tilewright.rtl.cube`
((Tm, Tk, Tn) = (rows, depth, cols)), ``lib.memory`` buffers whose words are whole engine tiles
(layouts of :mod:`tilewright.compiler.layout`: an A word is a Tm x Tk tile, a B word a Tk x Tn
tile, an accumulator word a Tm x Tn int32 tile) and a sequencer that streams one A and one B word
into the engine per cycle. Same port contract as :class:`tilewright.rtl.gemm_core.GemmCore`
(``a_wr_*``, ``b_wr_*``, ``acc_rd_*``, ``m``/``k``/``n``, ``start``, ``busy``, ``cycles``; with
``halves=True`` also ``a_half``/``b_half``/``acc_half``/``accumulate``, sampled with ``start``).

Sequence: output tiles ``mb`` outer, ``nb`` inner (MB = ceil(M/Tm), NB = ceil(N/Tn)); for each,
``kb = 0 .. KB-1`` (KB = ceil(K/Tk)) reads A word ``mb*KB + kb`` and B word ``nb*KB + kb`` and
streams them as one engine beat (``first`` on kb = 0, ``last`` on kb = KB-1). The engine's
finished tile ``i`` (in visit order) is written to accumulator word ``i`` — added to the word's
contents when ``accumulate`` was set (int32, wrapping), which the sequencer reads one cycle ahead,
so no cycle is spent on the read-modify-write.

Timing contract (``sync`` domain, SRAM read latency 1; stated by
:func:`tilewright.compiler.engine_timing.tile_core_busy_cycles`, which the cycle model uses)
    ``start`` sampled in cycle ``s``: the read addresses of beat ``b`` are issued in cycle
    ``s+1+b`` (one beat per cycle, no bubbles between output tiles), the beat reaches the engine
    in ``s+2+b``; the last tile leaves the engine ``latency = 2 + ceil(log2 Tk)`` cycles after its
    last beat and is written to the accumulator in that same cycle, the last cycle ``busy`` is
    high. So ``busy`` stays high for exactly::

        ceil(M/Tm) * ceil(N/Tn) * ceil(K/Tk) + 2 + ceil(log2 Tk) + 1

    cycles (beats + engine latency + the SRAM read cycle), ``accumulate`` or not.
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.compiler.layout import TILE_KINDS, GemmLayout
from tilewright.rtl.cube import ELEMENT_BITS, TileMacEngine, latency_cycles
from tilewright.rtl.gemm_core import (_DIM_BITS, HALF_PORTS, _CoreArch, _int32_accumulate,
                                      check_core_arch, half_offsets, memories, run_state,
                                      word_ports)
from tilewright.rtl.systolic import delay

__all__ = ["TileCore"]


class TileCore(_CoreArch, wiring.Component):
    """The tile-MAC GEMM core for one :class:`~tilewright.arch.ArchSpec` (module docstring)."""

    def __init__(self, arch: ArchSpec, *, halves: bool = False):
        check_core_arch(arch, "TileCore")
        te = arch.tensor_engine
        if te.kind not in TILE_KINDS:
            raise ArchSpecError(f"{arch.name}: tensor_engine.kind = {te.kind!r}: TileCore "
                                f"builds the tile-MAC kinds; accepted: {', '.join(TILE_KINDS)} "
                                f"(systolic arrays: GemmCore)")
        if not isinstance(halves, bool):
            raise TypeError(f"TileCore halves must be a bool, not {type(halves).__name__}")
        self._arch, self._halves = arch, halves
        self._shape = te.tile_shape
        self._depths = tuple(GemmLayout.depths(arch))
        wb = GemmLayout.word_bytes(arch)
        self._widths = (8 * wb["a"], 8 * wb["b"], 8 * wb["c"])
        mem = arch.memory
        self._banks = (mem.scratchpad_banks, mem.scratchpad_banks, mem.accumulator_banks)
        for buf, d, kib in zip(("A", "B", "accumulator"), self._depths,
                               ("scratchpad_kib", "scratchpad_kib", "accumulator_kib")):
            if d < (2 if halves else 1):
                raise ArchSpecError(
                    f"{arch.name}: memory.{kib} = {getattr(mem, kib)} is too small for a "
                    f"{te.describe()} engine: the {buf} buffer would hold {d} words of "
                    f"{wb[buf[0].lower()]} bytes; accepted: at least {2 if halves else 1} words")
        super().__init__({**word_ports(self._widths, self._depths),
                          **(HALF_PORTS if halves else {})})

    @property
    def depths(self) -> tuple[int, int, int]:
        """(A, B, accumulator) buffer depths in words."""
        return self._depths

    def elaborate(self, platform):
        m = Module()
        tm, tk, tn = self._shape
        a_r, b_r, c_r, c_w, host = memories(m, self, ELEMENT_BITS, self._widths)
        acc_q = None
        if self._halves:
            a_r, b_r, c_r, c_w, acc_q = half_offsets(m, self, a_r, b_r, c_r, c_w)
        m.d.comb += host
        m.submodules.engine = eng = TileMacEngine(tm=tm, tk=tk, tn=tn)
        running, _, mr, kr, nr = run_state(m, self)

        # issue side: element offsets of the beat (m0, n0, k0) and word pointers
        m0, n0, k0 = (Signal(_DIM_BITS + 7, name=x) for x in ("m0", "n0", "k0"))
        a_ptr = Signal.like(a_r.addr, name="a_ptr")
        a_row = Signal.like(a_r.addr, name="a_row")     # A word of this tile row's kb = 0
        b_ptr = Signal.like(b_r.addr, name="b_ptr")
        issuing, drain = Signal(), Signal(range(latency_cycles(tk) + 1))
        last_k, last_n, last_m = k0 + tk >= kr, n0 + tn >= nr, m0 + tm >= mr
        m.d.comb += [a_r.addr.eq(a_ptr), b_r.addr.eq(b_ptr)]
        v_q, first_q, last_q = Signal(), Signal(), Signal()
        m.d.sync += [v_q.eq(issuing), first_q.eq(k0 == 0), last_q.eq(last_k)]
        p = eng.ops_in.payload
        m.d.comb += [p.a.eq(a_r.data), p.b.eq(b_r.data), p.first.eq(first_q),
                     p.last.eq(last_q), eng.ops_in.valid.eq(v_q)]

        with m.If(self.start & ~running):
            m.d.sync += [issuing.eq(1), drain.eq(0), m0.eq(0), n0.eq(0), k0.eq(0),
                         a_ptr.eq(0), a_row.eq(0), b_ptr.eq(0)]
        with m.If(issuing):
            with m.If(~last_k):
                m.d.sync += [k0.eq(k0 + tk), a_ptr.eq(a_ptr + 1), b_ptr.eq(b_ptr + 1)]
            with m.Elif(~last_n):       # next output tile along N: same A row, next B column
                m.d.sync += [k0.eq(0), n0.eq(n0 + tn), a_ptr.eq(a_row), b_ptr.eq(b_ptr + 1)]
            with m.Elif(~last_m):       # next tile row: next A words, B from word 0
                m.d.sync += [k0.eq(0), n0.eq(0), m0.eq(m0 + tm), a_ptr.eq(a_ptr + 1),
                             a_row.eq(a_ptr + 1), b_ptr.eq(0)]
            with m.Else():
                m.d.sync += issuing.eq(0)
        with m.Elif(running):           # the last beat's tile drains through the engine
            m.d.sync += drain.eq(drain + 1)
            with m.If(drain == latency_cycles(tk)):
                m.d.sync += running.eq(0)

        # accumulator: tile i (visit order) -> word i; its old value read one cycle ahead
        rd_addr = Signal.like(c_r.addr, name="acc_rd_ptr")
        wr_addr = Signal.like(c_w.addr, name="acc_wr_ptr")
        ahead = delay(m, issuing & last_k, latency_cycles(tk), "tile_ahead")
        with m.If(self.start & ~running):
            m.d.sync += [rd_addr.eq(0), wr_addr.eq(0)]
        with m.If(ahead):
            m.d.sync += rd_addr.eq(rd_addr + 1)
        with m.If(eng.c_out.valid):
            m.d.sync += wr_addr.eq(wr_addr + 1)
        new = Cat(*eng.c_out.payload)
        written = (new if acc_q is None
                   else _int32_accumulate(m, new, c_r.data, ~acc_q))
        m.d.comb += [c_r.addr.eq(rd_addr), c_w.addr.eq(wr_addr), c_w.en.eq(eng.c_out.valid),
                     c_w.data.eq(written)]
        return m
