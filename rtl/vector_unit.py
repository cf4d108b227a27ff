"""The vector unit in Amaranth: ``lanes`` Q8.8 elements per beat, elementwise ops, reductions and
table-based non-linear functions (exp, reciprocal, rsqrt, SiLU, softplus).

Number formats, tables and rounding are written out in
:mod:`tilewright.dataflow_sim.vector_numerics`, the bit-exact reference this RTL is checked
against (the two derive their tables independently from the same rules). In short: operands are
signed Q8.8 (16-bit raw, value raw/256); elementwise results are Q8.8, saturating, sign-extended
into 32-bit output lanes; ``sum`` gives a wrapping int32 (Q24.8); ``exp`` uses range reduction
2**(x log2 e) = 2**i * 2**f with a 64-segment linearly interpolated table of 2**f; ``recip`` and
``rsqrt`` normalise the input to m in [1, 2) (rsqrt: [1, 4) by exponent parity) and interpolate a
64-segment table; ``silu`` and ``softplus`` interpolate a 256-segment table on [-16, 16) with
linear tails outside. Each table is held as two constant ROMs of exactly 2**bits words (segment
start and segment end values), so one lookup gives both interpolation endpoints.
``argmax`` (a reduction) gives the lowest index ``beat * lanes + lane`` of the largest signed
32-bit lane of a run; ``requant`` (elementwise) gives ``clamp(rshift_round(x * m, s), -128, 127)``
of the signed 32-bit lane ``x``, multiplier ``m`` (32-bit lane of ``b``) and shift ``s`` (0..63);
``rescale`` the same clamped to Q8.8 (-32768..32767; e.g. a ``sum``'s Q24.8 times 1/n: a mean).
``qshift`` (a reduction) gives the int8 quantization shift of a run's largest ``|x|`` (Q8.8):
``rmax``'s tree and accumulator fed magnitudes, then nine comparisons against constants.
Every lane holds every function (area is not shared between ops); ArchSpec's
``vector_unit.transcendental_passes`` is not used: every op takes one pass (one beat per cycle).

Ports (all in the ``sync`` domain; a "cycle" is one clock period):

``operands`` (stream in): ``op`` (:class:`VectorOp`), ``last`` (ends a reduction run),
    ``a``, ``b`` (``lanes`` x signed 32-bit lanes; the Q8.8 ops read their low 16 bits, ``b``
    only for add/sub/mul/max and requant's / rescale's multiplier), ``s`` (``lanes`` x 6 bits: their
    shift).
``results`` (stream out): ``data`` (``lanes`` x signed 32-bit) and ``last``.

Timing contract: the unit is a 4-stage pipeline (:data:`LATENCY`) that moves only when its output
register is empty or is being taken (``operands.ready = ~results.valid | results.ready``), so it
accepts one beat per cycle while the consumer keeps ``results.ready`` high. An elementwise beat
accepted at cycle t appears on ``results`` at cycle t + LATENCY (counting only cycles the
pipeline moves). A reduction is a run of consecutive beats with the same reduction op; the beat
with ``last`` produces one result beat (the reduced value in every lane) LATENCY moving cycles
later; the other beats of the run produce no output. The next reduction beat after a ``last``
starts a new accumulation.
"""

from __future__ import annotations

import hashlib
import math

from amaranth import Array, Const, Module, Mux, Signal, signed
from amaranth.back import verilog
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import (REQUANT_SHIFT_BITS, VECTOR_OPCODES, VECTOR_REDUCTIONS,
                                         field_slices)
from tilewright.rtl.emit import write_verilog

__all__ = ["VectorOp", "VectorUnit", "LATENCY", "VECTOR_GENERATOR_VERSION", "VECTOR_TOP_NAME",
           "generate_vector_verilog", "write_vector_rtl", "OP_NAMES", "operand_layout",
           "result_layout", "vector_lanes"]

#: cycles from an accepted operand beat to its result beat (pipeline moving every cycle)
LATENCY = 4
#: bump when the generated unit's behaviour or ports change; it ends in a fingerprint of the
#: opcode table (which lives in the compiler, outside the build cache's vector_unit.py key)
VECTOR_GENERATOR_VERSION = "0.2.0-op" + hashlib.sha256(
    repr(sorted(VECTOR_OPCODES.items())).encode()).hexdigest()[:8]
VECTOR_TOP_NAME = "tw_vector_unit"

_W = 16            # raw Q8.8 bits
_QMAX, _QMIN = 32767, -32768
_SEG = 6           # log2 segments of the exp / recip / rsqrt tables
_LOG2E_Q14 = round(math.log2(math.e) * 2 ** 14)
#: qshift: the magnitudes at which the int8 shift grows by one (``floor(amax / 2**k + 1/2)``
#: exceeds 127 from amax = 128 for k = 0 and from 255 * 2**(k-1) for k >= 1)
_QSHIFT_THRESHOLDS = (128,) + tuple(255 << j for j in range(8))


def _vector_op_enum() -> type:
    """:class:`VectorOp` built from the compiler's opcode table (names upper-cased, width of the
    VECTOR instruction's ``vop`` field)."""
    width = field_slices("VECTOR")["vop"][1]
    ns = enum.EnumType.__prepare__("VectorOp", (enum.Enum,), shape=width)
    ns["__module__"] = __name__
    ns["__qualname__"] = "VectorOp"
    ns["__doc__"] = ("Opcode of a beat (names as the compiler's VectorTask ops; values "
                     ":data:`tilewright.compiler.codegen.VECTOR_OPCODES`).")
    for name, code in VECTOR_OPCODES.items():
        ns[name.upper()] = code
    return enum.EnumType("VectorOp", (enum.Enum,), ns, shape=width)


VectorOp = _vector_op_enum()

#: VectorTask op name -> opcode
OP_NAMES = {name: VectorOp[name.upper()] for name in VECTOR_OPCODES}


def operand_layout(lanes: int) -> data.StructLayout:
    """Payload of ``operands``: op (bits 0-3), last (bit 4), a, b (``lanes`` x 32 bits each),
    s (``lanes`` x :data:`~tilewright.compiler.codegen.REQUANT_SHIFT_BITS` bits), lane 0 in the
    low bits of each."""
    vec = data.ArrayLayout(signed(32), lanes)
    return data.StructLayout({"op": VectorOp, "last": 1, "a": vec, "b": vec,
                              "s": data.ArrayLayout(REQUANT_SHIFT_BITS, lanes)})


def result_layout(lanes: int) -> data.StructLayout:
    """Payload of ``results``: data (``lanes`` x signed 32 bits, lane 0 low), then last."""
    return data.StructLayout({"data": data.ArrayLayout(signed(32), lanes), "last": 1})


def vector_lanes(arch: ArchSpec) -> int:
    """``arch.vector_unit.lanes`` if the RTL implements it (1 to 64), else ValueError."""
    lanes = arch.vector_unit.lanes
    if not 1 <= lanes <= 64:
        raise ValueError(f"{arch.name}: vector_unit.lanes = {lanes}: the RTL vector unit "
                         "implements 1 to 64 lanes")
    return lanes


def _rnd(v: float) -> int:
    return int(math.floor(v + 0.5))


def _tables() -> dict[str, list[int]]:
    n = 1 << _SEG
    silu = [_rnd(256 * x / (1 + math.exp(-x))) for x in (-16 + j / 8 for j in range(257))]
    soft = [_rnd(256 * math.log1p(math.exp(x))) for x in (-16 + j / 8 for j in range(257))]
    return {"exp": [_rnd(2 ** (j / n) * 2 ** 15) for j in range(n + 1)],
            "recip": [_rnd(2 ** 15 / (1 + j / n)) for j in range(n + 1)],
            "rsqrt0": [_rnd(2 ** 15 / math.sqrt(1 + j / n)) for j in range(n + 1)],
            "rsqrt1": [_rnd(2 ** 15 / math.sqrt(2 * (1 + j / n))) for j in range(n + 1)],
            "silu": silu, "softplus": soft}


def _lookup(table: list[int], index):
    return Array([Const(v, signed(18)) for v in table])[index]


class VectorUnit(wiring.Component):
    """``lanes`` Q8.8 lanes; see the module docstring for formats and the timing contract."""

    def __init__(self, *, lanes: int):
        if not isinstance(lanes, int) or isinstance(lanes, bool):
            raise TypeError(f"lanes must be an int, not {type(lanes).__name__}")
        if not 1 <= lanes <= 64:
            raise ValueError(f"lanes must be from 1 to 64, not {lanes}")
        self._lanes = lanes
        super().__init__({"operands": In(stream.Signature(operand_layout(lanes))),
                          "results": Out(stream.Signature(result_layout(lanes)))})

    @classmethod
    def from_arch(cls, arch: ArchSpec) -> "VectorUnit":
        """The unit for ``arch.vector_unit.lanes`` lanes."""
        return cls(lanes=vector_lanes(arch))

    @property
    def lanes(self) -> int:
        return self._lanes

    def elaborate(self, platform):
        m = Module()
        regs = []          # every pipeline register moves only when `advance` is high

        def reg(value, shape, name):
            r = Signal(shape, name=name)
            regs.append(r.eq(value))
            return r

        inp, res = self.operands, self.results
        advance = Signal()
        m.d.comb += [advance.eq(~res.valid | res.ready), inp.ready.eq(advance)]
        p = inp.payload

        def is_red(op):
            return sum(op == VectorOp[r.upper()] for r in VECTOR_REDUCTIONS) != 0

        # control pipeline: stage-k registers hold the beat's op / last / valid
        v1, op1 = reg(inp.valid, 1, "v1"), reg(p.op, VectorOp, "op1")
        last1 = reg(p.last, 1, "last1")
        op2, last2 = reg(op1, VectorOp, "op2"), reg(last1, 1, "last2")
        v2 = reg(v1, 1, "v2")
        op3, last3, v3 = reg(op2, VectorOp, "op3"), reg(last2, 1, "last3"), reg(v2, 1, "v3")

        # reductions: lane tree into stage 1, run accumulation from stage 1 into stage 2
        a16 = [p.a[i][:_W].as_signed() for i in range(self._lanes)]
        beat_sum = reg(sum(a16, Const(0, signed(32)))[:32].as_signed(), signed(32), "beat_sum")
        # rmax and qshift share the max tree and the run's max: qshift feeds it |a| (17 bits:
        # |-32768| = 32768), so its run's max is amax
        qs0 = p.op == VectorOp.QSHIFT
        mag17 = [Mux(qs0 & (x < 0), -x, x) for x in a16]
        bmax = mag17[0]
        for i in range(1, self._lanes):
            bmax = Mux(mag17[i] > bmax, mag17[i], bmax)
        beat_max = reg(bmax, signed(_W + 1), "beat_max")
        # argmax: a tree over the int32 lanes; the right half wins only if strictly larger, so
        # the lowest lane index wins ties
        nodes = [(p.a[i], Const(i, 6)) for i in range(self._lanes)]
        while len(nodes) > 1:
            nxt = []
            for j in range(0, len(nodes) - 1, 2):
                (lv, li), (rv, ri) = nodes[j], nodes[j + 1]
                nxt.append((Mux(rv > lv, rv, lv), Mux(rv > lv, ri, li)))
            nodes = nxt + ([nodes[-1]] if len(nodes) % 2 else [])
        beat_amax = reg(nodes[0][0], signed(32), "beat_amax")
        beat_alane = reg(nodes[0][1], 6, "beat_alane")
        acc = Signal(signed(32), name="acc")
        acc_idx = Signal(32, name="acc_idx")
        run_pos = Signal(32, name="run_pos")        # beats of the current run before this one
        fresh = Signal(1, init=1, name="fresh")
        new = Signal(signed(32), name="red_new")
        pos = Mux(fresh, 0, run_pos)
        cand_idx = Signal(32, name="cand_idx")
        m.d.comb += cand_idx.eq(pos * self._lanes + beat_alane)
        take = fresh | (beat_amax > acc)              # argmax: strictly larger, or a new run
        new_idx = Signal(32, name="red_new_idx")
        m.d.comb += new_idx.eq(Mux(take, cand_idx, acc_idx))
        m.d.comb += new.eq(Mux(op1 == VectorOp.SUM,
                               Mux(fresh, beat_sum, (acc + beat_sum)[:32].as_signed()),
                               Mux(op1 == VectorOp.ARGMAX, Mux(take, beat_amax, acc),
                                   Mux(fresh | (beat_max > acc), beat_max, acc))))
        with m.If(advance & v1 & is_red(op1)):
            m.d.sync += [acc.eq(new), fresh.eq(last1), acc_idx.eq(new_idx),
                         run_pos.eq(pos + 1)]
        red2 = reg(Mux(op1 == VectorOp.ARGMAX, new_idx, new), signed(32), "red2")
        # qshift: the shift k of the run's amax = the number of thresholds amax reaches (128,
        # then 255 * 2**j, j = 0 .. 7: rshift_round(amax, k) <= 127 fails for every k below)
        ksh = sum((red2 >= t for t in _QSHIFT_THRESHOLDS), Const(0, 4))
        red3 = reg(Mux(op2 == VectorOp.QSHIFT, ksh, red2), signed(32), "red3")
        ok2 = reg(v1 & (~is_red(op1) | last1), 1, "ok2")
        ok3 = reg(ok2, 1, "ok3")

        tabs = _tables()
        for i in range(self._lanes):
            y = self._lane(m, reg, tabs, p.op, op1, op2, op3, p.a[i], p.b[i], p.s[i], f"l{i}")
            regs.append(res.payload.data[i].eq(Mux(is_red(op3), red3, y)))
        regs += [res.valid.eq(v3 & ok3), res.payload.last.eq(last3)]
        with m.If(advance):
            m.d.sync += regs
        return m

    @staticmethod
    def _lane(m, reg, tabs, op, op1, op2, op3, a32, b32, shift, tag):
        """One lane's datapath; returns its result (Q8.8, or requant's int8) computed from the
        stage-3 registers (the caller registers it into the output stage)."""
        n = f"{tag}_"
        a, b = a32[:_W].as_signed(), b32[:_W].as_signed()
        # ---- requant: product in stage 1, rounding shift and clamp in stage 2 ----------------
        prod1 = reg(a32 * b32, signed(64), n + "rq_prod1")
        s1 = reg(shift, REQUANT_SHIFT_BITS, n + "rq_s1")
        rq_sh = Signal(signed(64), name=n + "rq_sh")
        sm1 = (s1 - 1)[:REQUANT_SHIFT_BITS]
        m.d.comb += rq_sh.eq(Mux(s1 == 0, prod1, ((prod1 >> sm1) + 1) >> 1))
        # requant clamps to int8, rescale (the same product and shift) to Q8.8: one clamp whose
        # bounds the stage-1 op picks
        rs1 = op1 == VectorOp.RESCALE
        hi, lo = Mux(rs1, _QMAX, 127), Mux(rs1, _QMIN, -128)
        rq2 = reg(Mux(rq_sh > hi, hi, Mux(rq_sh < lo, lo, rq_sh)), signed(_W), n + "rq2")
        rq3 = reg(rq2, signed(_W), n + "rq3")
        # ---- stage 1: simple ops, exp range reduction, normalisation, pwl index -------------
        s_mul = (((a * b) >> 7) + 1) >> 1
        simple = Mux(op == VectorOp.ADD, a + b, Mux(op == VectorOp.SUB, a - b,
                                                    Mux(op == VectorOp.MUL, s_mul, Mux(a > b, a, b))))
        simple_sat = Mux(simple > _QMAX, _QMAX, Mux(simple < _QMIN, _QMIN, simple))

        t = Signal(signed(32), name=n + "t")    # x * log2(e), Q.22
        m.d.comb += t.eq(a * _LOG2E_Q14)

        is_recip = op == VectorOp.RECIP
        mag = Signal(16, name=n + "mag")
        m.d.comb += mag.eq(Mux(is_recip, Mux(a < 0, -a, a), Mux(a > 0, a, 1)))
        msb_v = Const(0, 4)
        for bit in range(16):
            msb_v = Mux(mag[bit], bit, msb_v)
        msb = Signal(4, name=n + "msb")
        m.d.comb += msb.eq(msb_v)
        q = Signal(16, name=n + "q")
        m.d.comb += q.eq(mag << ~msb)   # ~msb == 15 - msb
        special = Mux(is_recip, mag == 0, a <= 0)   # recip of 0, rsqrt of <= 0: +max

        u = Signal(13, name=n + "u")
        m.d.comb += u.eq(a + 4096)
        is_pwl = (op == VectorOp.SILU) | (op == VectorOp.SOFTPLUS)

        simple1 = reg(simple_sat, signed(_W), n + "simple1")
        a1 = reg(a, signed(_W), n + "a1")
        ei1 = reg(t >> 22, signed(10), n + "ei1")
        idx1 = reg(Mux(op == VectorOp.EXP, t[16:22], Mux(is_pwl, u[5:13], q[9:15])), 8, n + "idx1")
        r1 = reg(Mux(op == VectorOp.EXP, t[0:16], Mux(is_pwl, u[0:5], q[0:9])), 16, n + "r1")
        msb1 = reg(msb, 4, n + "msb1")
        neg1 = reg(a < 0, 1, n + "neg1")
        spec1 = reg(special, 1, n + "spec1")
        thi1, tlo1 = reg(a >= 4096, 1, n + "thi1"), reg(a < -4096, 1, n + "tlo1")

        # ---- stage 2: table lookups (tables picked by op1) -----------------------------------
        par = msb1[0]
        # y0 = T[k], y1 = T[k + 1]: two tables of exactly 2**bits entries, so every case is
        # covered (k is 6 bits for exp / recip / rsqrt, 8 bits for silu / softplus)
        y0 = Signal(signed(18), name=n + "y0")
        y1 = Signal(signed(18), name=n + "y1")
        k6, k8 = idx1[:_SEG], idx1[:8]
        for dst, lo in ((y0, slice(0, -1)), (y1, slice(1, None))):
            with m.Switch(op1):
                with m.Case(VectorOp.EXP):
                    m.d.comb += dst.eq(_lookup(tabs["exp"][lo], k6))
                with m.Case(VectorOp.RECIP):
                    m.d.comb += dst.eq(_lookup(tabs["recip"][lo], k6))
                with m.Case(VectorOp.RSQRT):
                    m.d.comb += dst.eq(Mux(par, _lookup(tabs["rsqrt1"][lo], k6),
                                           _lookup(tabs["rsqrt0"][lo], k6)))
                with m.Case(VectorOp.SILU):
                    m.d.comb += dst.eq(_lookup(tabs["silu"][lo], k8))
                with m.Case(VectorOp.SOFTPLUS):
                    m.d.comb += dst.eq(_lookup(tabs["softplus"][lo], k8))
                with m.Default():
                    m.d.comb += dst.eq(0)
        y0_2 = reg(y0, signed(18), n + "y0_2")
        d2 = reg(y1 - y0, signed(18), n + "d2")
        r2 = reg(r1, 16, n + "r2")
        rest2 = [reg(s, s.shape(), f"{s.name}_2") for s in (simple1, a1, ei1, msb1, neg1, spec1,
                                                             thi1, tlo1)]

        # ---- stage 3: interpolation (shift by op2) -------------------------------------------
        dr = Signal(signed(36), name=n + "dr")
        m.d.comb += dr.eq(d2 * r2)
        interp = Mux(op2 == VectorOp.EXP, dr >> 16,
                     Mux((op2 == VectorOp.SILU) | (op2 == VectorOp.SOFTPLUS), (dr + 16) >> 5,
                         dr >> 9))
        p3 = reg(y0_2 + interp, signed(18), n + "p3")
        simple3, a3, ei3, msb3, neg3, spec3, thi3, tlo3 = [
            reg(s, s.shape(), f"{s.name[:-2]}_3") for s in rest2]

        # ---- output stage: final shift with rounding, saturation, tails (by op3) ------------
        # shift s and the operand of ((p >> (s - 1)) + 1) >> 1; s == 0 means no shift
        sm1 = Signal(5, name=n + "sm1")
        s_zero = Signal(name=n + "s_zero")
        with m.Switch(op3):
            with m.Case(VectorOp.EXP):
                m.d.comb += sm1.eq(Mux((ei3 < 7) & (ei3 > -10), 6 - ei3, 0))
            with m.Case(VectorOp.RECIP):
                m.d.comb += [sm1.eq(Mux(msb3 >= 2, msb3 - 2, 0)), s_zero.eq(msb3 < 2)]
            with m.Case(VectorOp.RSQRT):
                m.d.comb += sm1.eq(2 + (msb3 >> 1))
            with m.Default():
                m.d.comb += [sm1.eq(0), s_zero.eq(1)]
        shifted = Signal(signed(19), name=n + "shifted")
        m.d.comb += shifted.eq(Mux(s_zero, p3, ((p3 >> sm1) + 1) >> 1))
        y = Signal(signed(_W), name=n + "y")
        with m.Switch(op3):
            with m.Case(VectorOp.EXP):
                m.d.comb += y.eq(Mux(ei3 >= 7, _QMAX, Mux(ei3 <= -10, 0, shifted)))
            with m.Case(VectorOp.RECIP):
                rm = Mux(msb3 == 0, p3 << 1, shifted)
                rm_sat = Mux(rm > _QMAX, _QMAX, rm)
                m.d.comb += y.eq(Mux(spec3, _QMAX, Mux(neg3, -rm_sat, rm_sat)))
            with m.Case(VectorOp.RSQRT):
                m.d.comb += y.eq(Mux(spec3, _QMAX, shifted))
            with m.Case(VectorOp.SILU, VectorOp.SOFTPLUS):
                m.d.comb += y.eq(Mux(thi3, a3, Mux(tlo3, 0, p3)))
            with m.Case(VectorOp.REQUANT, VectorOp.RESCALE):
                m.d.comb += y.eq(rq3)
            with m.Default():
                m.d.comb += y.eq(simple3)
        return y


def generate_vector_verilog(arch: ArchSpec) -> tuple[str, VectorUnit]:
    """Elaborate the vector unit for ``arch`` and return (Verilog text, component)."""
    unit = VectorUnit.from_arch(arch)
    return verilog.convert(unit, name=VECTOR_TOP_NAME, emit_src=False), unit


def write_vector_rtl(arch: ArchSpec, out_dir) -> dict:
    """Write ``tw_vector_unit.v`` and ``manifest.json`` to ``out_dir`` (atomically); return the
    manifest (top, generator version, arch hash, lanes, latency, file hash)."""
    text, unit = generate_vector_verilog(arch)
    return write_verilog(out_dir, VECTOR_TOP_NAME, text, {
        "top": VECTOR_TOP_NAME, "generator": "tilewright.rtl.vector_unit.VectorUnit",
        "generator_version": VECTOR_GENERATOR_VERSION, "arch_hash": arch.content_hash(),
        "lanes": unit.lanes, "latency_cycles": LATENCY})
