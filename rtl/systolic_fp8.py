"""fp8 x fp8 -> fp32 weight-stationary systolic array and GEMM core (issue 20, item 2).

``fp8-e4m3`` (ml_dtypes ``float8_e4m3fn``) or ``fp8-e5m2`` (``float8_e5m2``) operands, fp32
accumulation, per-tensor scales applied at the output; bit-exact with
``numerics.gemm(qa, qb, fmt, acc="fp32", k_block=rows)`` of :mod:`tilewright.dataflow_sim.numerics`
for per-tensor quantized operands (``qa``, ``qb`` :class:`~tilewright.formats.QTensor` with one
fp32 scale each):

* PE(i, j): ``p_out = Fp32Add(p_in, Fp8Mul(a, w))`` (:mod:`tilewright.rtl.fp_arith`). The fp8
  product is exact in fp32 (numerics step 1 needs no rounding), so the psum leaving column j is
  numerics step 2 — ``p = +0``, then ``p = fl32(p + a_k * w_k)`` for the tile's k in increasing
  order. numerics' order is one a weight-stationary array does naturally: no change was needed.
* The accumulator read-modify-write is step 3 (``acc = fl32(acc + p_tile)``, tiles in increasing
  k, the first added to +0), the bf16 core's :func:`~tilewright.rtl.systolic_bf16._fp32_accumulate`.
* Step 4, the scales, at the host read port: the core holds ``scale_a`` and ``scale_b`` (fp32
  patterns, input ports), forms ``s = fl32(scale_a * scale_b)`` with one :class:`Fp32Mul` and
  returns ``fl32(acc * s)`` per lane (one :class:`Fp32Mul` per column) on ``acc_rd_data``.
  Unscaled operands: ``scale_a = scale_b = 1.0`` (``0x3F800000``) returns the accumulator as is.
  ``per_column=True`` (the accelerator top's core): ``scale_b`` holds one fp32 pattern per
  output lane and lane ``j`` returns ``fl32(acc * fl32(scale_a * scale_b[j]))`` (one more
  :class:`Fp32Mul` per column) — numerics' per-output-channel weight scales.

Elements are fp8 bit patterns (8-bit lanes, the int8 core's buffer words), psums and accumulator
words fp32 patterns (32-bit lanes). NaN results are the canonical quiet NaN ``0x7FC00000``. e4m3
has no inf (its only special is NaN = S.1111.111); e5m2 has IEEE inf and NaN; fp32 sums and the
output scaling can still overflow to inf.

:class:`Fp8WeightStationaryArray` has the ports and timing of the int8 ``WeightStationaryArray``
(a row on ``a_in`` at cycle t has its result on ``c_out`` at t + rows + cols - 1).
:class:`Fp8GemmCore` has the host ports of :class:`~tilewright.rtl.systolic_bf16.Bf16GemmCore`
(8-bit lanes) plus ``scale_a``/``scale_b`` (32 bit, read combinationally with the accumulator
read data: hold them while reading) and the same cycles:
:func:`~tilewright.rtl.systolic_bf16.bf16_gemm_cycles` ``= R + (F - 1) * P + M + R + C + 1``,
the WS closed form of the cycle model.
"""

from __future__ import annotations

import time

from amaranth import Cat, Module, Signal
from amaranth.back import verilog
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.compiler.layout import GemmLayout
from tilewright.formats import bits_of
from tilewright.rtl.emit import write_float_core_rtl
from tilewright.rtl.fp_arith import FP8_FIELDS, Fp8Mul, Fp32Add, Fp32Mul
from tilewright.rtl.gemm_core import (HALF_PORTS, _CoreShape, core_ports, half_offsets, memories,
                                      run_state, ws_sequencer)
from tilewright.rtl.systolic import _check_dims, _PEArray, pe_units, ws_array
from tilewright.rtl.systolic_bf16 import _check_int, _fp32_accumulate

__all__ = ["FP8_FORMATS", "Fp8WeightStationaryArray", "Fp8GemmCore", "generate_fp8_verilog",
           "FP8_TOP_NAME", "ELEMENT_BITS", "ACC_BITS", "FP32_ONE", "fp8_core_for_arch",
           "write_fp8_rtl", "FP8_GENERATOR_VERSION"]

FP8_FORMATS = tuple(FP8_FIELDS)   #: the element formats the fp8 engine builds
ELEMENT_BITS = bits_of("fp8-e4m3")  #: bits of an element (fp8 pattern)
ACC_BITS = bits_of("fp32")          #: bits of a psum / accumulator lane (fp32 pattern)
FP8_TOP_NAME = "tw_fp8_gemm_core"
FP32_ONE = 0x3F800000               #: fp32 1.0, the scale of unscaled operands


def _check_fmt(fmt) -> str:
    if fmt not in FP8_FORMATS:
        raise ValueError(f"fmt {fmt!r}: accepted: {', '.join(FP8_FORMATS)}")
    return fmt


class _Fp8PE(wiring.Component):
    """One PE's arithmetic: ``p_out = fl32(p_in + a * w)`` (the product exact; combinational)."""

    def __init__(self, fmt: str):
        self._fmt = fmt
        super().__init__({"a": In(ELEMENT_BITS), "w": In(ELEMENT_BITS), "p_in": In(ACC_BITS),
                          "p_out": Out(ACC_BITS)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mul = mul = Fp8Mul(fmt=self._fmt)
        m.submodules.add = add = Fp32Add()
        m.d.comb += [mul.a.eq(self.a), mul.b.eq(self.w), add.a.eq(self.p_in),
                     add.b.eq(mul.out), self.p_out.eq(add.out)]
        return m


class Fp8WeightStationaryArray(_PEArray):
    """WS array of fp8 PEs; ports and timing as the int8 ``WeightStationaryArray``.

    Parameters (keyword-only): ``rows``, ``cols`` (1..64), ``fmt`` (:data:`FP8_FORMATS`).
    """

    def __init__(self, *, rows: int, cols: int, fmt: str):
        _check_dims(rows, cols)
        self._fmt = _check_fmt(fmt)
        a_layout = data.StructLayout({"a": data.ArrayLayout(ELEMENT_BITS, rows), "commit": 1})
        super().__init__({
            "w_in": In(stream.Signature(data.ArrayLayout(ELEMENT_BITS, cols), always_ready=True)),
            "a_in": In(stream.Signature(a_layout, always_ready=True)),
            "c_out": Out(stream.Signature(data.ArrayLayout(ACC_BITS, cols), always_ready=True)),
        }, rows=rows, cols=cols)

    @property
    def fmt(self) -> str:
        return self._fmt

    def elaborate(self, platform):
        m = Module()

        ws_array(m, self, ELEMENT_BITS, ACC_BITS, pe_units(m, lambda: _Fp8PE(self._fmt)))
        return m


class Fp8GemmCore(_CoreShape, wiring.Component):
    """Standalone fp8 WS GEMM core (module docstring: ports, arithmetic, timing).

    Parameters (keyword-only): ``rows``, ``cols`` (1..64), ``fmt`` (:data:`FP8_FORMATS`),
    ``a_depth``, ``b_depth``, ``acc_depth`` (buffer depths in words, 1..2**20).
    """

    def __init__(self, *, rows: int, cols: int, fmt: str, a_depth: int, b_depth: int,
                 acc_depth: int, banks: tuple[int, int, int] = (1, 1, 1), halves: bool = False,
                 scaled: bool = True, per_column: bool = False):
        _check_int("rows", rows, 1, 64)
        _check_int("cols", cols, 1, 64)
        for name, v in (("a_depth", a_depth), ("b_depth", b_depth), ("acc_depth", acc_depth)):
            _check_int(name, v, 1, 1 << 20)
        if (not isinstance(banks, tuple) or len(banks) != 3
                or any(not isinstance(b, int) or b < 1 or b & (b - 1) for b in banks)):
            raise ValueError(f"banks must be 3 powers of two (A, B, accumulator), not {banks!r}")
        for name, v in (("halves", halves), ("scaled", scaled), ("per_column", per_column)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool, not {type(v).__name__}")
        self._fmt = _check_fmt(fmt)
        self._rows, self._cols = rows, cols
        self._depths = (a_depth, b_depth, acc_depth)
        if per_column and not scaled:
            raise ValueError("per_column needs scaled=True")
        self._banks, self._halves, self._scaled = banks, halves, scaled
        self._per_column = per_column
        nb = cols if per_column else 1      # B scales: one per output lane, or one for all
        one_b = sum(FP32_ONE << (ACC_BITS * j) for j in range(nb))
        super().__init__({**core_ports(rows, cols, self._depths, ELEMENT_BITS),
                          **({"scale_a": In(ACC_BITS, init=FP32_ONE),
                              "scale_b": In(ACC_BITS * nb, init=one_b)} if scaled else {}),
                          **(HALF_PORTS if halves else {})})

    @property
    def banks(self) -> tuple[int, int, int]:
        """(A, B, accumulator) SRAM banks."""
        return self._banks

    @property
    def fmt(self) -> str:
        return self._fmt

    def elaborate(self, platform):
        m = Module()
        raw = Signal(self._cols * ACC_BITS, name="acc_rd_raw")   # the accumulator's read data
        a_r, b_r, c_r, c_w, host = memories(m, _RawReadPort(self, raw), ELEMENT_BITS)
        acc_q = None
        if self._halves:       # double buffer: offset every engine address by its half's base
            a_r, b_r, c_r, c_w, acc_q = half_offsets(m, self, a_r, b_r, c_r, c_w)
        m.d.comb += host
        if self._scaled:       # lane j scaled by fl32(scale_a * scale_b[j]) (numerics step 4)
            scales = []
            for j in range(self._cols if self._per_column else 1):
                sc = Fp32Mul()
                m.submodules["scale" if not self._per_column else f"scale_{j}"] = sc
                m.d.comb += [sc.a.eq(self.scale_a),
                             sc.b.eq(self.scale_b[j * ACC_BITS:(j + 1) * ACC_BITS])]
                scales.append(sc.out)
            lanes = []
            for j in range(self._cols):
                mul = Fp32Mul()
                m.submodules[f"out_scale_{j}"] = mul
                m.d.comb += [mul.a.eq(raw[j * ACC_BITS:(j + 1) * ACC_BITS]),
                             mul.b.eq(scales[j if self._per_column else 0])]
                lanes.append(mul.out)
            m.d.comb += self.acc_rd_data.eq(Cat(*lanes))
        else:
            m.d.comb += self.acc_rd_data.eq(raw)
        running, t, mr, kr, nr = run_state(m, self)
        m.submodules.array = arr = Fp8WeightStationaryArray(rows=self._rows, cols=self._cols,
                                                            fmt=self._fmt)
        ws_sequencer(m, arr, self.start, running, t, mr, kr, nr, a_r, b_r, c_r, c_w,
                     element_bits=ELEMENT_BITS, accumulate=_fp32_accumulate, acc_q=acc_q)
        return m


class _RawReadPort:
    """``core`` seen by :func:`~tilewright.rtl.gemm_core.memories` with ``acc_rd_data``
    replaced by ``raw`` (the unscaled accumulator word); every other attribute is the core's."""

    def __init__(self, core, raw):
        self._core, self.acc_rd_data = core, raw

    def __getattr__(self, name):
        return getattr(self._core, name)


def fp8_core_for_arch(arch: ArchSpec, *, halves: bool = False) -> Fp8GemmCore:
    """The fp8 core an ArchSpec describes: ``tensor_engine`` rows x cols (``dataflow`` ws,
    ``input_format`` = ``weight_format`` in :data:`FP8_FORMATS`, ``accumulator_format`` fp32),
    the buffers of :class:`~tilewright.compiler.layout.GemmLayout` (A/B scratchpad halves of
    8-bit lanes, fp32 accumulator lanes: the int8 core's word widths) and banks
    (``memory.*_banks``). ``halves=True``: the accelerator top's double-buffered core (the
    ports of :class:`~tilewright.rtl.gemm_core.GemmCore` with ``halves=True``) plus
    ``scale_a`` and ``scale_b`` per output lane (``per_column``: ``cols`` fp32 patterns, lane
    ``j`` scaled by ``fl32(scale_a * scale_b[j])``), which the accelerator top drives from the
    ``SCALE``/``SCALE_COL`` instructions (:mod:`tilewright.rtl.controller`): the output scaling
    (numerics step 4, per-tensor or per output channel) is in hardware there as in the
    standalone core."""
    te = arch.tensor_engine
    fmts = (te.input_format, te.weight_format, te.accumulator_format)
    if (not te.systolic or te.dataflow != "ws" or te.input_format not in FP8_FORMATS
            or te.weight_format != te.input_format or te.accumulator_format != "fp32"):
        raise ArchSpecError(
            f"{arch.name}: the fp8 RTL core is a weight-stationary systolic array with "
            f"input_format = weight_format in {', '.join(FP8_FORMATS)} and accumulator_format "
            f"fp32, not kind {te.kind!r} dataflow {te.dataflow!r} formats {fmts}")
    a_depth, b_depth, acc_depth = GemmLayout.depths(arch)
    mem = arch.memory
    return Fp8GemmCore(rows=te.rows, cols=te.cols, fmt=te.input_format, a_depth=a_depth,
                       b_depth=b_depth, acc_depth=acc_depth,
                       banks=(mem.scratchpad_banks, mem.scratchpad_banks, mem.accumulator_banks),
                       halves=halves, per_column=halves)


def generate_fp8_verilog(core: Fp8GemmCore) -> str:
    """Verilog text of ``core`` with top module :data:`FP8_TOP_NAME`."""
    if not isinstance(core, Fp8GemmCore):
        raise TypeError(f"generate_fp8_verilog takes an Fp8GemmCore, not {type(core).__name__}")
    return verilog.convert(core, name=FP8_TOP_NAME, emit_src=False)


#: bump when the generated fp8 core's behaviour or ports change
FP8_GENERATOR_VERSION = "0.1.0"


def write_fp8_rtl(arch: ArchSpec, out_dir) -> dict:
    """``tilewright rtl`` for an fp8 ArchSpec: write ``<FP8_TOP_NAME>.v`` and ``manifest.json``
    (the core of :func:`fp8_core_for_arch`) to ``out_dir``; return the manifest."""
    t0 = time.perf_counter()
    core = fp8_core_for_arch(arch)
    text = generate_fp8_verilog(core)
    gen_s = time.perf_counter() - t0
    return write_float_core_rtl(out_dir, core, top=FP8_TOP_NAME, text=text, arch=arch,
                                generator="tilewright.rtl.systolic_fp8.Fp8GemmCore",
                                version=FP8_GENERATOR_VERSION, seconds=gen_s)
