"""bf16 x bf16 -> fp32 weight-stationary systolic array and GEMM core (issue 4's float engine).

The float twin of :class:`tilewright.rtl.systolic.WeightStationaryArray` and of the WS half of
:class:`tilewright.rtl.gemm_core.GemmCore`, bit-exact with
``numerics.gemm(a, b, "bf16", acc="fp32", k_block=rows)`` (:mod:`tilewright.dataflow_sim.numerics`):

* PE(i, j) computes ``p_out = Fp32Add(p_in, Bf16Mul(a, w))`` (:mod:`tilewright.rtl.fp_arith`,
  both combinational), so the psum leaving the bottom of column j is numerics step 2: ``p = +0``,
  then ``p = fl32(p + fl32(A[m, k] * W[k, j]))`` for the tile's k in increasing order (row 0 adds
  its product to +0, which turns a -0 product into +0 exactly like numpy's ``p += prod``).
* The core's accumulator read-modify-write is numerics step 3: ``acc = fl32(acc + p_tile)`` with
  the first k-tile of an output added to +0, tiles in increasing k.

Elements are bf16 bit patterns (16-bit lanes), psums and accumulators fp32 bit patterns (32-bit
lanes), lane 0 in the LSBs. NaN results are the canonical quiet NaN ``0x7FC00000``.

:class:`Bf16WeightStationaryArray` has exactly the ports and timing contract of the int8
``WeightStationaryArray`` (see :mod:`tilewright.rtl.systolic`) with 16-bit elements and 32-bit
results: a row on ``a_in`` at cycle t has its result on ``c_out`` at t + rows + cols - 1. The
float units are combinational inside each PE's one register stage, so the latency is the same as
the int8 array (the price is a long combinational path per PE: multiplier, alignment shifter,
adder, normaliser, rounder; pipelining them would add their stages to every latency below).

:class:`Bf16GemmCore` (standalone, host ports like ``GemmCore``, WS only)
    ``a_wr_en/addr/data`` (data: ``rows`` bf16 lanes), ``b_wr_en/addr/data`` (``cols`` lanes),
    ``acc_rd_addr`` -> ``acc_rd_data`` (``cols`` fp32 lanes, one cycle later), ``m``, ``k``,
    ``n`` (16 bit), ``start``, ``busy``, ``cycles``. Buffer word addresses are those of the WS
    rows of :mod:`tilewright.compiler.layout` (``GemmLayout`` with ``dataflow="ws"``); elements
    outside the matrices must be written as +0 (a padded k then adds ``fl32(p + 0) = p``).
    Cycles ``busy`` is high (R = rows, C = cols, F = ceil(K/R) * ceil(N/C) folds,
    P = max(M, 2R + C - 2)), identical to the int8 core's WS closed form
    (:func:`bf16_gemm_cycles`): ``R + (F - 1) * P + M + R + C + 1``.
"""

from __future__ import annotations

import time

from amaranth import Cat, Module, Mux
from amaranth.back import verilog
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.compiler.layout import ab_buffer_bytes
from tilewright.formats import bits_of
from tilewright.rtl.emit import write_float_core_rtl
from tilewright.rtl.fp_arith import Bf16Mul, Fp32Add
from tilewright.rtl.gemm_core import _CoreShape, core_ports, memories, run_state, ws_sequencer
from tilewright.rtl.systolic import _check_dims, _PEArray, pe_units, ws_array

__all__ = ["Bf16WeightStationaryArray", "Bf16GemmCore", "bf16_gemm_cycles",
           "generate_bf16_verilog", "BF16_TOP_NAME", "bf16_buffer_depths", "bf16_core_for_arch",
           "write_bf16_rtl", "BF16_GENERATOR_VERSION",
           "ELEMENT_BITS", "ACC_BITS"]

ELEMENT_BITS = bits_of("bf16")  #: bits of an element (bf16 pattern)
ACC_BITS = bits_of("fp32")      #: bits of a psum / accumulator word lane (fp32 pattern)
BF16_TOP_NAME = "tw_bf16_gemm_core"


def _check_int(name: str, v, lo: int, hi: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be from {lo} to {hi}, not {v}")


def bf16_gemm_cycles(rows: int, cols: int, m: int, k: int, n: int) -> int:
    """Cycles ``busy`` is high for one M x K x N GEMM on :class:`Bf16GemmCore` (see docstring)."""
    folds = -(-k // rows) * -(-n // cols)
    period = max(m, 2 * rows + cols - 2)
    return rows + (folds - 1) * period + m + rows + cols + 1


class _Bf16PE(wiring.Component):
    """One PE's arithmetic: ``p_out = fl32(p_in + fl32(a * w))`` (combinational)."""

    def __init__(self):
        super().__init__({"a": In(ELEMENT_BITS), "w": In(ELEMENT_BITS), "p_in": In(ACC_BITS),
                          "p_out": Out(ACC_BITS)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mul = mul = Bf16Mul()
        m.submodules.add = add = Fp32Add()
        m.d.comb += [mul.a.eq(self.a), mul.b.eq(self.w), add.a.eq(self.p_in),
                     add.b.eq(mul.out), self.p_out.eq(add.out)]
        return m


class Bf16WeightStationaryArray(_PEArray):
    """WS array of bf16 PEs; ports and timing as the int8 ``WeightStationaryArray``.

    Parameters (keyword-only): ``rows`` (reduction depth of a tile, 1..64), ``cols`` (output
    width of a tile, 1..64).
    """

    def __init__(self, *, rows: int, cols: int):
        _check_dims(rows, cols)
        a_layout = data.StructLayout({"a": data.ArrayLayout(ELEMENT_BITS, rows), "commit": 1})
        super().__init__({
            "w_in": In(stream.Signature(data.ArrayLayout(ELEMENT_BITS, cols), always_ready=True)),
            "a_in": In(stream.Signature(a_layout, always_ready=True)),
            "c_out": Out(stream.Signature(data.ArrayLayout(ACC_BITS, cols), always_ready=True)),
        }, rows=rows, cols=cols)

    def elaborate(self, platform):
        m = Module()

        ws_array(m, self, ELEMENT_BITS, ACC_BITS, pe_units(m, _Bf16PE))
        return m


class Bf16GemmCore(_CoreShape, wiring.Component):
    """Standalone bf16 WS GEMM core (see module docstring for ports, layout and timing).

    Parameters (keyword-only): ``rows``, ``cols`` (1..64), ``a_depth``, ``b_depth``,
    ``acc_depth`` (buffer depths in words, 1..2**20).
    """

    fmt = "bf16"     #: element format (the manifest's ``element_format``)

    def __init__(self, *, rows: int, cols: int, a_depth: int, b_depth: int, acc_depth: int):
        _check_int("rows", rows, 1, 64)
        _check_int("cols", cols, 1, 64)
        for name, v in (("a_depth", a_depth), ("b_depth", b_depth), ("acc_depth", acc_depth)):
            _check_int(name, v, 1, 1 << 20)
        self._rows, self._cols = rows, cols
        self._depths = (a_depth, b_depth, acc_depth)
        super().__init__(core_ports(rows, cols, self._depths, ELEMENT_BITS))

    def elaborate(self, platform):
        m = Module()
        a_r, b_r, c_r, c_w, host = memories(m, self, ELEMENT_BITS)
        m.d.comb += host
        running, t, mr, kr, nr = run_state(m, self)
        m.submodules.array = arr = Bf16WeightStationaryArray(rows=self._rows, cols=self._cols)
        # the int8 core's WS sequencer; the accumulator read-modify-write in fp32:
        # acc = fl32(old + p), old = +0 for the first tile
        ws_sequencer(m, arr, self.start, running, t, mr, kr, nr, a_r, b_r, c_r, c_w,
                     element_bits=ELEMENT_BITS, accumulate=_fp32_accumulate)
        return m


def _fp32_accumulate(m: Module, new, old, first):
    """fp32 lanes: ``fl32(old + new)`` with ``old = +0`` on the first k-block (Fp32Add)."""
    summed = []
    for j in range(len(new) // ACC_BITS):
        lo, hi = j * ACC_BITS, (j + 1) * ACC_BITS
        add = Fp32Add()
        m.submodules[f"acc_add_{j}"] = add
        m.d.comb += [add.a.eq(Mux(first, 0, old[lo:hi])), add.b.eq(new[lo:hi])]
        summed.append(add.out)
    return Cat(*summed)


def generate_bf16_verilog(core: Bf16GemmCore) -> str:
    """Verilog text of ``core`` with top module :data:`BF16_TOP_NAME`."""
    if not isinstance(core, Bf16GemmCore):
        raise TypeError(f"generate_bf16_verilog takes a Bf16GemmCore, not {type(core).__name__}")
    return verilog.convert(core, name=BF16_TOP_NAME, emit_src=False)


#: bump when the generated bf16 core's behaviour or ports change
BF16_GENERATOR_VERSION = "0.1.0"


def bf16_buffer_depths(arch: ArchSpec) -> tuple[int, int, int]:
    """(A, B, accumulator) buffer depths in words of the bf16 core ``arch`` describes: the
    scratchpad (``memory.scratchpad_kib``) split equally between A and B buffers of 16-bit lanes
    (``rows`` and ``cols`` lanes a word), the accumulator (``memory.accumulator_kib``) of ``cols``
    fp32 lanes a word. The core has one bank per buffer: an ArchSpec with
    ``memory.scratchpad_banks`` or ``memory.accumulator_banks`` other than 1 is refused (one line),
    not built with one bank."""
    te, mem = arch.tensor_engine, arch.memory
    if (not te.systolic or te.dataflow != "ws" or te.input_format != "bf16"
            or te.weight_format != "bf16" or te.accumulator_format != "fp32"):
        raise ArchSpecError(
            f"{arch.name}: the bf16 RTL core is a weight-stationary systolic array with "
            f"input_format = weight_format = bf16 and accumulator_format fp32, not kind "
            f"{te.kind!r} dataflow {te.dataflow!r} formats "
            f"{(te.input_format, te.weight_format, te.accumulator_format)}")
    if (mem.scratchpad_banks, mem.accumulator_banks) != (1, 1):
        raise ArchSpecError(
            f"{arch.name}: memory.scratchpad_banks = {mem.scratchpad_banks}, "
            f"memory.accumulator_banks = {mem.accumulator_banks}: the bf16 RTL core has one bank "
            f"per buffer; accepted: 1 and 1")
    ab = ab_buffer_bytes(arch)
    return (ab // (2 * te.rows), ab // (2 * te.cols),
            mem.accumulator_bytes // (4 * te.cols))


def bf16_core_for_arch(arch: ArchSpec) -> Bf16GemmCore:
    """The bf16 core an ArchSpec describes (:func:`bf16_buffer_depths`)."""
    a_depth, b_depth, acc_depth = bf16_buffer_depths(arch)
    te = arch.tensor_engine
    return Bf16GemmCore(rows=te.rows, cols=te.cols, a_depth=a_depth, b_depth=b_depth,
                        acc_depth=acc_depth)


def write_bf16_rtl(arch: ArchSpec, out_dir) -> dict:
    """``tilewright rtl`` for a bf16 ArchSpec: write ``<BF16_TOP_NAME>.v`` and ``manifest.json``
    (the core of :func:`bf16_core_for_arch`) to ``out_dir``; return the manifest."""
    t0 = time.perf_counter()
    core = bf16_core_for_arch(arch)
    text = generate_bf16_verilog(core)
    return write_float_core_rtl(out_dir, core, top=BF16_TOP_NAME, text=text, arch=arch,
                                generator="tilewright.rtl.systolic_bf16.Bf16GemmCore",
                                version=BF16_GENERATOR_VERSION,
                                seconds=time.perf_counter() - t0)
