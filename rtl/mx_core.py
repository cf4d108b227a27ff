"""MX (OCP Microscaling) GEMM core: MXINT8 / MXFP8 / MXFP8-E5M2 on a 32-row WS array (issue 20).

Bit-exact with ``numerics.gemm(qa, qb, fmt, acc="fp32", k_block=32)`` for the MX formats of
:mod:`tilewright.formats` (block 32 along K, one shared E8M0 exponent per block: ``Xa[m, j]``
for row m of A, ``Xb[j, n]`` for column n of B; numerics' "MX rule"):

* The array has ``rows = 32`` = the MX block, so one K tile is one block j and the psum leaving
  column n is the block dot ``d_j``: the int8 WS array of :mod:`tilewright.rtl.systolic` for
  MXINT8 (exact integer dot, ``|d_j| <= 32 * 128**2 < 2**24``), the fp8 array of
  :mod:`tilewright.rtl.systolic_fp8` for MXFP8 (E4M3) / MXFP8-E5M2 (numerics step 2: sequential
  fp32 sum from +0 over the block's k).
* At the accumulator read-modify-write each lane is scaled by the power of two
  ``2**(Xa + Xb - 254 + shift)`` (``shift`` = -12 for MXINT8's implicit 2**-6 per operand, 0 for
  MXFP8) with **one** fp32 rounding (:class:`Pow2Scale`; MXINT8's integer dot is converted in
  the same rounding, exact unless the result leaves fp32's normal range) and added:
  ``acc = fl32(acc + scaled_j)``, blocks in increasing j, the first added to +0.

Scales travel with the operands (the MX word layout of :mod:`tilewright.compiler.layout`): each
A buffer word (row m of K tile j: 32 8-bit lanes) carries the E8M0 code of ``Xa[m, j]`` in its
top 8 bits; each B buffer word (weight row k of fold (j, n): ``cols`` lanes) carries the ``cols``
E8M0 codes of ``Xb[j, n..]`` above its lanes (the same in all 32 rows of the fold). With
``halves=True`` it is the accelerator top's GEMM core (:class:`~tilewright.rtl.accel_top.AccelTop`;
the DMA fills the words, ``acc=1`` continues the block sum of a split K). The sequencer is the WS one of :mod:`tilewright.rtl.gemm_core`
unchanged (it reads only the lanes); the scales ride beside the array: ``Xb`` latched from the
weight words as they enter, made active when the fold commits, and both exponents delayed by the
array's latency to meet their output row. Cycles are therefore the WS closed form
(:func:`~tilewright.rtl.systolic_bf16.bf16_gemm_cycles`, the cycle model's).

E8M0 code 255 (NaN in the OCP spec) is taken as the exponent 128, as numerics does.
"""

from __future__ import annotations

import time

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpecError
from tilewright.compiler.layout import SCALE_BITS, GemmLayout
from tilewright.formats import MX_BLOCK, get_format
from tilewright.rtl.emit import write_float_core_rtl
from tilewright.rtl.fp_arith import FP32_QNAN, Fp32Add, round_pack
from tilewright.rtl.gemm_core import (HALF_PORTS, _CoreShape, half_offsets, memories, run_state,
                                      word_ports, ws_sequencer)
from tilewright.rtl.systolic import WeightStationaryArray, delay, ws_latency_cycles
from tilewright.rtl.systolic_bf16 import _check_int
from tilewright.rtl.systolic_fp8 import Fp8WeightStationaryArray

__all__ = ["MX_FORMATS", "MxGemmCore", "Pow2Scale", "MX_TOP_NAME", "generate_mx_verilog",
           "SCALE_BITS", "ACC_BITS", "ELEMENT_BITS", "mx_core_for_arch", "write_mx_rtl",
           "MX_GENERATOR_VERSION"]

#: bump when the generated MX core's behaviour or ports change
MX_GENERATOR_VERSION = "0.1.0"

#: MX format -> the fp8 element format of its array (None: MXINT8's int8 array)
MX_FORMATS = {"mxint8": None, "mxfp8": "fp8-e4m3", "mxfp8-e5m2": "fp8-e5m2"}
ELEMENT_BITS = 8      #: bits of an element code
ACC_BITS = 32         #: bits of a psum (int32 or fp32) and accumulator lane (fp32)
MX_TOP_NAME = "tw_mx_gemm_core"
_EXP = 12             #: width of the signed exponent arithmetic (as fp_arith's rounder)


class Pow2Scale(wiring.Component):
    """``out = fl32(x * 2**e)``, one RNE rounding (combinational).

    Parameter (keyword-only): ``integer`` — False: ``x`` is an fp32 pattern (NaN -> canonical
    NaN, inf stays inf, signed zeros kept); True: ``x`` is a two's-complement int32 of magnitude
    below 2**25 (converted and scaled in the same rounding; 0 gives +0).
    Ports: ``x`` (32 bit, in), ``e`` (signed 12 bit, in; -2048..2047), ``out`` (32 bit, out).
    """

    def __init__(self, *, integer: bool):
        if not isinstance(integer, bool):
            raise TypeError(f"integer must be a bool, not {type(integer).__name__}")
        self._integer = integer
        super().__init__({"x": In(32), "e": In(signed(_EXP)), "out": Out(32)})

    def elaborate(self, platform):
        m = Module()
        x = self.x
        s = Signal(26)
        e_top = Signal(signed(_EXP))
        if self._integer:
            # |x| * 2**e: MSB of the 26-bit s (bit 25) is worth 2**(25 + e), biased 152 + e
            sign = x[31]
            m.d.comb += [s.eq(Mux(sign, -x, x)[:26]), e_top.eq(self.e + 152)]
            m.d.comb += self.out.eq(round_pack(m, sign, s, e_top, "p2i"))
        else:
            ex, fr = x[23:31], x[:23]
            xe = Mux(ex == 0, 1, ex)
            # x = sig * 2**(xe - 150); s = sig << 2 -> MSB worth 2**(xe - 127 + e)
            m.d.comb += [s.eq(Cat(Const(0, 2), fr, ex != 0)), e_top.eq(xe + self.e)]
            rounded = round_pack(m, x[31], s, e_top, "p2f")
            with m.If((ex == 255) & (fr != 0)):
                m.d.comb += self.out.eq(FP32_QNAN)
            with m.Elif(ex == 255):
                m.d.comb += self.out.eq(x)
            with m.Else():
                m.d.comb += self.out.eq(rounded)
        return m


class MxGemmCore(_CoreShape, wiring.Component):
    """Standalone MX WS GEMM core (module docstring). Host ports as
    :class:`~tilewright.rtl.systolic_bf16.Bf16GemmCore`; A words are ``32 * 8 + 8`` bits, B
    words ``cols * 8 + cols * 8`` bits, accumulator words ``cols`` fp32 lanes.

    Parameters (keyword-only): ``fmt`` (:data:`MX_FORMATS`), ``cols`` (1..64), ``a_depth``,
    ``b_depth``, ``acc_depth`` (1..2**20). ``rows`` is the MX block, 32. ``banks`` (A, B,
    accumulator SRAM banks, powers of two) and ``halves`` (the double-buffer ports of
    :class:`~tilewright.rtl.gemm_core.GemmCore` with ``halves=True``: the accelerator top's core)
    as :class:`~tilewright.rtl.systolic_fp8.Fp8GemmCore`.
    """

    def __init__(self, *, fmt: str, cols: int, a_depth: int, b_depth: int, acc_depth: int,
                 banks: tuple[int, int, int] = (1, 1, 1), halves: bool = False):
        if fmt not in MX_FORMATS:
            raise ValueError(f"fmt {fmt!r}: accepted: {', '.join(MX_FORMATS)}")
        _check_int("cols", cols, 1, 64)
        for name, v in (("a_depth", a_depth), ("b_depth", b_depth), ("acc_depth", acc_depth)):
            _check_int(name, v, 1, 1 << 20)
        if (not isinstance(banks, tuple) or len(banks) != 3
                or any(not isinstance(b, int) or b < 1 or b & (b - 1) for b in banks)):
            raise ValueError(f"banks must be 3 powers of two (A, B, accumulator), not {banks!r}")
        if not isinstance(halves, bool):
            raise TypeError(f"halves must be a bool, not {type(halves).__name__}")
        self._fmt, self._rows, self._cols = fmt, MX_BLOCK, cols
        self._depths = (a_depth, b_depth, acc_depth)
        self._banks, self._halves = banks, halves
        super().__init__({**word_ports(self.word_bits, self._depths),
                          **(HALF_PORTS if halves else {})})

    @property
    def banks(self) -> tuple[int, int, int]:
        """(A, B, accumulator) SRAM banks."""
        return self._banks

    @property
    def fmt(self) -> str:
        return self._fmt

    @property
    def word_bits(self) -> tuple[int, int, int]:
        """Bits of an (A, B, accumulator) buffer word."""
        R, C = self._rows, self._cols
        return (R * ELEMENT_BITS + SCALE_BITS, C * (ELEMENT_BITS + SCALE_BITS), C * ACC_BITS)

    def elaborate(self, platform):
        m = Module()
        R, C = self._rows, self._cols
        a_r, b_r, c_r, c_w, host = memories(m, self, ELEMENT_BITS, widths=self.word_bits)
        acc_q = None
        if self._halves:       # double buffer: offset every engine address by its half's base
            a_r, b_r, c_r, c_w, acc_q = half_offsets(m, self, a_r, b_r, c_r, c_w)
        m.d.comb += host
        running, t, mr, kr, nr = run_state(m, self)
        elem = MX_FORMATS[self._fmt]
        arr = (WeightStationaryArray(rows=R, cols=C) if elem is None
               else Fp8WeightStationaryArray(rows=R, cols=C, fmt=elem))
        m.submodules.array = arr

        # the scales beside the array: Xb latched as weights enter, active from the commit
        xb_sh = Signal(C * SCALE_BITS, name="xb_shadow")
        xb_act = Signal(C * SCALE_BITS, name="xb_active")
        with m.If(arr.w_in.valid):
            m.d.sync += xb_sh.eq(b_r.data[C * ELEMENT_BITS:])
        commit = arr.a_in.valid & arr.a_in.payload.commit
        xb_row = Mux(commit, xb_sh, xb_act)
        with m.If(commit):
            m.d.sync += xb_act.eq(xb_sh)
        # each streamed row's (Xa, Xb) meet its result: array latency + the out_q register
        lat = ws_latency_cycles(R, C) + 1
        xa_out = delay(m, a_r.data[R * ELEMENT_BITS:], lat, "xa")
        xb_out = delay(m, xb_row, lat, "xb")
        shift = 2 * get_format(self._fmt).element_exp     # -12 for MXINT8, 0 for MXFP8
        integer = elem is None

        def accumulate(m, new, old, first):
            summed = []
            for j in range(C):
                lo, hi = j * ACC_BITS, (j + 1) * ACC_BITS
                sc = Pow2Scale(integer=integer)
                add = Fp32Add()
                m.submodules[f"mx_scale_{j}"], m.submodules[f"acc_add_{j}"] = sc, add
                xb = xb_out[j * SCALE_BITS:(j + 1) * SCALE_BITS]
                m.d.comb += [sc.x.eq(new[lo:hi]), sc.e.eq(xa_out + xb + (shift - 254)),
                             add.a.eq(Mux(first, 0, old[lo:hi])), add.b.eq(sc.out)]
                summed.append(add.out)
            return Cat(*summed)

        ws_sequencer(m, arr, self.start, running, t, mr, kr, nr, a_r, b_r, c_r, c_w,
                     element_bits=ELEMENT_BITS, accumulate=accumulate, acc_q=acc_q)
        return m


def generate_mx_verilog(core: MxGemmCore) -> str:
    """Verilog text of ``core`` with top module :data:`MX_TOP_NAME`."""
    if not isinstance(core, MxGemmCore):
        raise TypeError(f"generate_mx_verilog takes an MxGemmCore, not {type(core).__name__}")
    return verilog.convert(core, name=MX_TOP_NAME, emit_src=False)


def mx_core_for_arch(arch, *, halves: bool = False) -> MxGemmCore:
    """The MX core an ArchSpec describes (``tensor_engine`` ws, 32 rows, ``cols``, an MX
    ``input_format`` = ``weight_format``, fp32 accumulator) with the buffers of
    :class:`~tilewright.compiler.layout.GemmLayout` (the scratchpad split equally between A
    and B buffers of MX words — element lanes plus scale lanes —, the accumulator of ``cols``
    fp32 lanes a word) and banks (``memory.*_banks``). ``halves=True``: the accelerator top's
    double-buffered core."""
    te = arch.tensor_engine
    if (not te.systolic or te.dataflow != "ws" or te.rows != MX_BLOCK
            or te.input_format not in MX_FORMATS or te.weight_format != te.input_format
            or te.accumulator_format != "fp32"):
        raise ArchSpecError(f"{arch.name}: the MX RTL core is a 32-row weight-stationary "
                            f"systolic array with input_format = weight_format in "
                            f"{', '.join(MX_FORMATS)} and an fp32 accumulator")
    a_depth, b_depth, acc_depth = GemmLayout.depths(arch)
    mem = arch.memory
    return MxGemmCore(fmt=te.input_format, cols=te.cols, a_depth=a_depth, b_depth=b_depth,
                      acc_depth=acc_depth,
                      banks=(mem.scratchpad_banks, mem.scratchpad_banks, mem.accumulator_banks),
                      halves=halves)


def write_mx_rtl(arch, out_dir) -> dict:
    """``tilewright rtl`` for an MX ArchSpec: write ``<MX_TOP_NAME>.v`` and ``manifest.json``;
    return the manifest."""
    t0 = time.perf_counter()
    core = mx_core_for_arch(arch)
    text = generate_mx_verilog(core)
    gen_s = time.perf_counter() - t0
    return write_float_core_rtl(out_dir, core, top=MX_TOP_NAME, text=text, arch=arch,
                                generator="tilewright.rtl.mx_core.MxGemmCore",
                                version=MX_GENERATOR_VERSION, seconds=gen_s)
