"""Scan unit for the SSM (Mamba) recurrence ``h[t] = a[t] * h[t-1] + b[t]`` in Amaranth.

``lanes`` independent channels advance one time step per cycle. Number formats (bit-exact twin:
:mod:`tilewright.dataflow_sim.scan_numerics`, which documents the error bound):

* ``a``: unsigned Q0.``a_bits`` code (value ``a_code * 2**-a_bits``, 0 <= a <= 1 - 2**-a_bits);
* ``b``, ``c``, ``h0``, ``h`` and ``y``: signed ``h_bits``-bit two's complement codes with
  ``frac_bits`` fraction bits (value ``code * 2**-frac_bits``); defaults a_bits=16, Q16.16 in
  32 bits.

One step per lane, all in one cycle: exact product ``a_code * h`` (``a_bits + h_bits`` bits),
rounded back to the h grid by round-to-nearest-even on the ``a_bits`` dropped bits, plus ``b``
(exact), then saturated to the ``h_bits`` range (no wrap-around).

Timing contract (a "cycle" is one period of the ``sync`` domain):

``s_in`` (stream; payload ``a`` [lanes], ``b`` [lanes], ``c`` [lanes], ``first``)
    One beat is one time step for all lanes (``c`` is only used for ``y``). A beat transfers at
    a rising edge where ``s_in.valid`` and ``s_in.ready`` are both high;
    ``s_in.ready = ~h_out.valid | h_out.ready`` (combinational from ``h_out.ready``: the unit
    holds one result and stalls only when that result has not been taken).
``h0`` (plain input, [lanes])
    The initial state of a sequence: sampled at the edge that transfers a beat with ``first``
    high (that beat computes ``h = a * h0 + b``); any other beat continues from the held h.
``h_out`` (stream; payload ``h`` [lanes], ``y``)
    The h computed by a beat, and ``y = sat(rne(sum_i c[i] * h[i] / 2**frac_bits))`` of that
    beat's ``c`` and that h (the C-projection; exact products and sum, one round-to-nearest-even,
    then saturation, in the h format), are on ``h_out.payload`` with ``h_out.valid`` high from
    the edge that transferred the beat until the edge where ``h_out.ready`` is high (no change
    meanwhile).
    ``y`` is the output of one channel when a beat holds that channel's whole state vector
    (N = lanes; pad unused lanes with c = 0). It is combinational from registers (the held h and
    c), outside the loop: it lengthens no loop path but the output path by a multiplier and a
    ``lanes``-input adder.

Throughput and latency: the multiply-add loop closes in one cycle, so with ``s_in.valid`` and
``h_out.ready`` held high a sequence of L steps (or several sequences back to back, L = the sum
of their lengths) takes :func:`scan_cycles` = L + 1 cycles, counted from the edge that transfers
the first beat to the edge that transfers the last result, inclusive: 1 step per cycle plus 1
cycle of latency. The loop-carried critical path is one ``a_bits x h_bits`` multiplier, an
increment and a ``h_bits + 1``-bit add; a faster clock would pipeline the multiplier and
interleave that many independent lane groups (not done here).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.back import verilog
from amaranth.lib.wiring import In, Out

from tilewright.rtl.emit import write_verilog

__all__ = ["ScanUnit", "scan_cycles", "SCAN_TOP_NAME", "write_scan_rtl"]

#: name of the generated top-level Verilog module
SCAN_TOP_NAME = "tw_scan_unit"


def scan_cycles(steps: int) -> int:
    """Cycles of ``steps`` back-to-back time steps at full rate (first beat accepted through
    last result delivered, inclusive): ``steps + 1``."""
    if steps < 1:
        raise ValueError(f"scan steps must be >= 1, not {steps}")
    return steps + 1


def _check_int(name: str, v, lo: int, hi: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"ScanUnit {name} must be an int, not {type(v).__name__}")
    if not lo <= v <= hi:
        raise ValueError(f"ScanUnit {name} must be from {lo} to {hi}, not {v}")


class ScanUnit(wiring.Component):
    """``lanes``-wide fixed-point scan unit; see the module docstring for formats and timing.

    Parameters (keyword-only): ``lanes`` (channels per beat, 1..256), ``a_bits`` (1..24),
    ``h_bits`` (2..36) and ``frac_bits`` (0..h_bits-1).
    """

    def __init__(self, *, lanes: int, a_bits: int = 16, h_bits: int = 32, frac_bits: int = 16):
        _check_int("lanes", lanes, 1, 256)
        _check_int("a_bits", a_bits, 1, 24)
        _check_int("h_bits", h_bits, 2, 36)
        _check_int("frac_bits", frac_bits, 0, h_bits - 1)
        self._lanes, self._a_bits, self._h_bits, self._frac_bits = lanes, a_bits, h_bits, frac_bits
        h_vec = data.ArrayLayout(signed(h_bits), lanes)
        super().__init__({
            "s_in": In(stream.Signature(data.StructLayout({
                "a": data.ArrayLayout(unsigned(a_bits), lanes), "b": h_vec, "c": h_vec,
                "first": 1}))),
            "h0": In(h_vec),
            "h_out": Out(stream.Signature(data.StructLayout({"h": h_vec,
                                                             "y": signed(h_bits)}))),
        })

    @property
    def lanes(self) -> int:
        return self._lanes

    @property
    def a_bits(self) -> int:
        return self._a_bits

    @property
    def h_bits(self) -> int:
        return self._h_bits

    @property
    def frac_bits(self) -> int:
        return self._frac_bits

    def _step(self, m: Module, i: int, a, h, b):
        """Combinational sat(rne(a * h / 2**a_bits) + b) of lane ``i``."""
        fa, hb = self._a_bits, self._h_bits
        prod = Signal(signed(fa + hb + 1), name=f"prod{i}")
        m.d.comb += prod.eq(a * h)
        floor = Signal(signed(hb + 1), name=f"floor{i}")
        m.d.comb += floor.eq(prod >> fa)
        rem = prod[:fa]
        half = 1 << (fa - 1)
        up = (rem > half) | ((rem == half) & floor[0])
        total = Signal(signed(hb + 2), name=f"sum{i}")
        m.d.comb += total.eq(floor + up + b)
        hi, lo = (1 << (hb - 1)) - 1, -(1 << (hb - 1))
        return Mux(total > hi, hi, Mux(total < lo, lo, total))

    def _y(self, m: Module, c_reg: list, h: list):
        """Combinational sat(rne(sum_i c_i * h_i / 2**frac_bits)) of the held h and c."""
        hb, fb, n = self._h_bits, self._frac_bits, self._lanes
        total = Signal(signed(2 * hb + n.bit_length()), name="y_sum")
        m.d.comb += total.eq(sum(c_reg[i] * h[i] for i in range(n)))
        if fb:
            floor = Signal(signed(len(total) - fb), name="y_floor")
            m.d.comb += floor.eq(total >> fb)
            rem, half = total[:fb], 1 << (fb - 1)
            rounded = Signal(signed(len(total) - fb + 1), name="y_rounded")
            m.d.comb += rounded.eq(floor + ((rem > half) | ((rem == half) & floor[0])))
        else:
            rounded = total
        hi, lo = (1 << (hb - 1)) - 1, -(1 << (hb - 1))
        return Mux(rounded > hi, hi, Mux(rounded < lo, lo, rounded))

    def elaborate(self, platform):
        m = Module()
        p, out = self.s_in.payload, self.h_out.payload
        take = Signal()
        m.d.comb += [self.s_in.ready.eq(~self.h_out.valid | self.h_out.ready),
                     take.eq(self.s_in.valid & self.s_in.ready)]
        c_reg = [Signal(signed(self._h_bits), name=f"c{i}") for i in range(self._lanes)]
        with m.If(take):
            m.d.sync += self.h_out.valid.eq(1)
            for i in range(self._lanes):
                h_prev = Mux(p.first, self.h0[i], out.h[i])
                m.d.sync += [out.h[i].eq(self._step(m, i, p.a[i], h_prev, p.b[i])),
                             c_reg[i].eq(p.c[i])]
        with m.Elif(self.h_out.ready):
            m.d.sync += self.h_out.valid.eq(0)
        m.d.comb += out.y.eq(self._y(m, c_reg, [out.h[i] for i in range(self._lanes)]))
        return m


def write_scan_rtl(out_dir, *, lanes: int, a_bits: int, h_bits: int, frac_bits: int):
    """Write ``<SCAN_TOP_NAME>.v`` of a :class:`ScanUnit` to ``out_dir`` (atomically); return its
    path."""
    unit = ScanUnit(lanes=lanes, a_bits=a_bits, h_bits=h_bits, frac_bits=frac_bits)
    return write_verilog(out_dir, SCAN_TOP_NAME, verilog.convert(unit, name=SCAN_TOP_NAME,
                                                                 emit_src=False))
