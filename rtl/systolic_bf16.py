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

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.back import verilog
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from tilewright.compiler.layout import MAX_DIM
from tilewright.rtl.fp_arith import Bf16Mul, Fp32Add
from tilewright.rtl.systolic import delay, ws_latency_cycles

__all__ = ["Bf16WeightStationaryArray", "Bf16GemmCore", "bf16_gemm_cycles",
           "generate_bf16_verilog", "BF16_TOP_NAME", "BF16_GENERATOR_VERSION",
           "ELEMENT_BITS", "ACC_BITS"]

ELEMENT_BITS = 16            #: bits of an element (bf16 pattern)
ACC_BITS = 32                #: bits of a psum / accumulator word lane (fp32 pattern)
BF16_TOP_NAME = "tw_bf16_gemm_core"
#: bump when the generated hardware's behaviour or ports change
BF16_GENERATOR_VERSION = "0.1.0"
_DIM_BITS = MAX_DIM.bit_length()


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


class Bf16WeightStationaryArray(wiring.Component):
    """WS array of bf16 PEs; ports and timing as the int8 ``WeightStationaryArray``.

    Parameters (keyword-only): ``rows`` (reduction depth of a tile, 1..64), ``cols`` (output
    width of a tile, 1..64).
    """

    def __init__(self, *, rows: int, cols: int):
        _check_int("rows", rows, 1, 64)
        _check_int("cols", cols, 1, 64)
        self._rows, self._cols = rows, cols
        a_layout = data.StructLayout({"a": data.ArrayLayout(ELEMENT_BITS, rows), "commit": 1})
        super().__init__({
            "w_in": In(stream.Signature(data.ArrayLayout(ELEMENT_BITS, cols), always_ready=True)),
            "a_in": In(stream.Signature(a_layout, always_ready=True)),
            "c_out": Out(stream.Signature(data.ArrayLayout(ACC_BITS, cols), always_ready=True)),
        })

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def cols(self) -> int:
        return self._cols

    def elaborate(self, platform):
        m = Module()
        R, C = self._rows, self._cols
        w_sh = [[Signal(ELEMENT_BITS, name=f"wsh_{i}_{j}") for j in range(C)] for i in range(R)]
        w_act = [[Signal(ELEMENT_BITS, name=f"w_{i}_{j}") for j in range(C)] for i in range(R)]
        with m.If(self.w_in.valid):
            for j in range(C):
                m.d.sync += w_sh[0][j].eq(self.w_in.payload[j])
                for i in range(1, R):
                    m.d.sync += w_sh[i][j].eq(w_sh[i - 1][j])
        p = self.a_in.payload
        x = [delay(m, p.a[i], i, f"skew_a{i}") for i in range(R)]
        xc = [delay(m, p.commit & self.a_in.valid, i, f"skew_c{i}") for i in range(R)]
        a_reg = [[Signal(ELEMENT_BITS, name=f"a_{i}_{j}") for j in range(C)] for i in range(R)]
        c_reg = [[Signal(name=f"c_{i}_{j}") for j in range(C)] for i in range(R)]
        p_reg = [[Signal(ACC_BITS, name=f"p_{i}_{j}") for j in range(C)] for i in range(R)]
        for i in range(R):
            for j in range(C):
                a_seen = x[i] if j == 0 else a_reg[i][j - 1]
                commit = xc[i] if j == 0 else c_reg[i][j - 1]
                if j < C - 1:
                    m.d.sync += [a_reg[i][j].eq(a_seen), c_reg[i][j].eq(commit)]
                with m.If(commit):
                    m.d.sync += w_act[i][j].eq(w_sh[i][j])
                pe = _Bf16PE()
                m.submodules[f"pe_{i}_{j}"] = pe
                m.d.comb += [pe.a.eq(a_seen), pe.w.eq(Mux(commit, w_sh[i][j], w_act[i][j])),
                             pe.p_in.eq(0 if i == 0 else p_reg[i - 1][j])]
                m.d.sync += p_reg[i][j].eq(pe.p_out)
        for j in range(C):
            m.d.comb += self.c_out.payload[j].eq(delay(m, p_reg[R - 1][j], C - 1 - j, f"dsk{j}"))
        m.d.comb += self.c_out.valid.eq(delay(m, self.a_in.valid, ws_latency_cycles(R, C), "valid"))
        return m


def _abits(depth: int) -> int:
    return max(1, (depth - 1).bit_length())


class Bf16GemmCore(wiring.Component):
    """Standalone bf16 WS GEMM core (see module docstring for ports, layout and timing).

    Parameters (keyword-only): ``rows``, ``cols`` (1..64), ``a_depth``, ``b_depth``,
    ``acc_depth`` (buffer depths in words, 1..2**20).
    """

    def __init__(self, *, rows: int, cols: int, a_depth: int, b_depth: int, acc_depth: int):
        _check_int("rows", rows, 1, 64)
        _check_int("cols", cols, 1, 64)
        for name, v in (("a_depth", a_depth), ("b_depth", b_depth), ("acc_depth", acc_depth)):
            _check_int(name, v, 1, 1 << 20)
        self._rows, self._cols = rows, cols
        self._depths = (a_depth, b_depth, acc_depth)
        super().__init__({
            "a_wr_en": In(1), "a_wr_addr": In(_abits(a_depth)),
            "a_wr_data": In(rows * ELEMENT_BITS),
            "b_wr_en": In(1), "b_wr_addr": In(_abits(b_depth)),
            "b_wr_data": In(cols * ELEMENT_BITS),
            "acc_rd_addr": In(_abits(acc_depth)), "acc_rd_data": Out(cols * ACC_BITS),
            "m": In(_DIM_BITS), "k": In(_DIM_BITS), "n": In(_DIM_BITS),
            "start": In(1), "busy": Out(1), "cycles": Out(32),
        })

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def cols(self) -> int:
        return self._cols

    @property
    def depths(self) -> tuple[int, int, int]:
        """(A, B, accumulator) buffer depths in words."""
        return self._depths

    def elaborate(self, platform):
        m = Module()
        R, C = self._rows, self._cols
        da, db, dc = self._depths
        m.submodules.mem_a = mem_a = memory.Memory(shape=unsigned(R * ELEMENT_BITS), depth=da,
                                                   init=[])
        m.submodules.mem_b = mem_b = memory.Memory(shape=unsigned(C * ELEMENT_BITS), depth=db,
                                                   init=[])
        m.submodules.mem_acc = mem_c = memory.Memory(shape=unsigned(C * ACC_BITS), depth=dc,
                                                     init=[])
        a_w, b_w, c_w = mem_a.write_port(), mem_b.write_port(), mem_c.write_port()
        a_r, b_r = mem_a.read_port(), mem_b.read_port()
        c_r = mem_c.read_port(transparent_for=(c_w,))
        host_r = mem_c.read_port()
        m.d.comb += [
            a_w.en.eq(self.a_wr_en), a_w.addr.eq(self.a_wr_addr), a_w.data.eq(self.a_wr_data),
            b_w.en.eq(self.b_wr_en), b_w.addr.eq(self.b_wr_addr), b_w.data.eq(self.b_wr_data),
            host_r.addr.eq(self.acc_rd_addr), self.acc_rd_data.eq(host_r.data),
        ]
        mr, kr, nr = (Signal(_DIM_BITS, name=x) for x in ("m_r", "k_r", "n_r"))
        running = Signal()
        t = Signal(_DIM_BITS + 8)
        cycles = Signal(32)
        m.d.comb += [self.busy.eq(running), self.cycles.eq(cycles)]
        with m.If(running):
            m.d.sync += cycles.eq(cycles + 1)
        with m.If(self.start & ~running):
            m.d.sync += [running.eq(1), t.eq(0), cycles.eq(0),
                         mr.eq(self.m), kr.eq(self.k), nr.eq(self.n)]

        m.submodules.array = arr = Bf16WeightStationaryArray(rows=R, cols=C)
        k_base, n_base = Signal(_DIM_BITS + 7), Signal(_DIM_BITS + 7)
        a_base = Signal.like(a_r.addr, name="a_base")
        b_base = Signal.like(b_r.addr, name="b_base")
        acc_base = Signal.like(c_w.addr, name="acc_base")
        pre = Signal(init=1)
        last_fold, fold_end = Signal(), Signal()
        period = Signal(_DIM_BITS + 1)
        reload_at = R + C - 2
        m.d.comb += [
            last_fold.eq((k_base + R >= kr) & (n_base + C >= nr)),
            period.eq(Mux(mr > 2 * R + C - 2, mr, 2 * R + C - 2)),
            fold_end.eq(Mux(last_fold, t == mr + (R + C), t == period - 1)),
        ]
        # weight reads: preload (fold 0) or, during a period, the next fold's rows R-1 .. 0
        ld, st = Signal(), Signal()
        with m.If(pre):
            m.d.comb += [ld.eq(running), b_r.addr.eq(b_base + (R - 1) - t[:8])]
        with m.Else():
            m.d.comb += [ld.eq(running & ~last_fold & (t >= reload_at) & (t < reload_at + R)),
                         b_r.addr.eq(b_base + R + (R - 1) - (t - reload_at)[:8])]
        m.d.comb += [st.eq(running & ~pre & (t < mr)), a_r.addr.eq(a_base + t)]
        ld_q, st_q, commit_q = Signal(), Signal(), Signal()
        m.d.sync += [ld_q.eq(ld), st_q.eq(st), commit_q.eq(st & (t == 0))]
        for j in range(C):
            m.d.comb += arr.w_in.payload[j].eq(b_r.data[j * ELEMENT_BITS:(j + 1) * ELEMENT_BITS])
        for i in range(R):
            m.d.comb += arr.a_in.payload.a[i].eq(
                a_r.data[i * ELEMENT_BITS:(i + 1) * ELEMENT_BITS])
        m.d.comb += [arr.w_in.valid.eq(ld_q), arr.a_in.valid.eq(st_q),
                     arr.a_in.payload.commit.eq(commit_q)]

        # sideband: accumulator address and first-k-tile flag ride beside the array
        tag_addr = Signal.like(c_w.addr, name="tag_addr")
        tag_first = Signal(name="tag_first")
        m.d.sync += [tag_addr.eq(acc_base + t), tag_first.eq(k_base == 0)]
        lat = ws_latency_cycles(R, C)
        out_addr = delay(m, tag_addr, lat, "wb_addr")
        out_first = delay(m, tag_first, lat, "wb_first")

        # accumulator read-modify-write in fp32: acc = fl32(old + p), old = +0 for the first tile
        out_q = Signal(C * ACC_BITS)
        wr_q, first_q = Signal(), Signal()
        addr_q = Signal.like(c_w.addr)
        m.d.comb += c_r.addr.eq(out_addr)
        m.d.sync += [wr_q.eq(arr.c_out.valid), first_q.eq(out_first), addr_q.eq(out_addr),
                     out_q.eq(Cat(*arr.c_out.payload))]
        summed = []
        for j in range(C):
            lo, hi = j * ACC_BITS, (j + 1) * ACC_BITS
            add = Fp32Add()
            m.submodules[f"acc_add_{j}"] = add
            m.d.comb += [add.a.eq(Mux(first_q, 0, c_r.data[lo:hi])), add.b.eq(out_q[lo:hi])]
            summed.append(add.out)
        m.d.comb += [c_w.en.eq(wr_q), c_w.addr.eq(addr_q), c_w.data.eq(Cat(*summed))]

        # sequencing: nb outer, kb inner (the int8 core's WS sequencer)
        with m.If(self.start & ~running):
            m.d.sync += pre.eq(1)
        with m.If(running):
            m.d.sync += t.eq(t + 1)
            with m.If(pre):
                with m.If(t == R - 1):
                    m.d.sync += [pre.eq(0), t.eq(0)]
            with m.Elif(fold_end):
                m.d.sync += [t.eq(0), b_base.eq(b_base + R)]
                with m.If(k_base + R < kr):
                    m.d.sync += [k_base.eq(k_base + R), a_base.eq(a_base + mr)]
                with m.Else():
                    m.d.sync += [k_base.eq(0), a_base.eq(0)]
                    with m.If(n_base + C < nr):
                        m.d.sync += [n_base.eq(n_base + C), acc_base.eq(acc_base + mr)]
                    with m.Else():
                        m.d.sync += [running.eq(0), n_base.eq(0), acc_base.eq(0), b_base.eq(0),
                                     pre.eq(1)]
        return m


def generate_bf16_verilog(core: Bf16GemmCore) -> str:
    """Verilog text of ``core`` with top module :data:`BF16_TOP_NAME`."""
    if not isinstance(core, Bf16GemmCore):
        raise TypeError(f"generate_bf16_verilog takes a Bf16GemmCore, not {type(core).__name__}")
    return verilog.convert(core, name=BF16_TOP_NAME, emit_src=False)
