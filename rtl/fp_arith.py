"""IEEE-754 float arithmetic in Amaranth: exact bf16 x bf16 -> fp32 product and fp32 RNE addition.

Amaranth has no floating-point library (shared/TOOLCHAIN.md), so the number formats are ours. Both
components are **combinational** (no clock, latency 0 cycles: the output is valid in the same
cycle as the inputs) and bit-exact with numpy float32 arithmetic on a CPU without flush-to-zero,
i.e. with the arithmetic of :mod:`tilewright.dataflow_sim.numerics`:

:class:`Bf16Mul`
    ``a``, ``b``: bf16 bit patterns (16 bit: sign, 8-bit exponent, 7-bit fraction), ``p``: the
    fp32 bit pattern of ``fl32(a * b)``. The 8-bit significands give an exact 16-bit product, so
    the result is exact unless it leaves fp32's normal range: below 2**-126 it is rounded
    (round-to-nearest-even) to an fp32 subnormal or to a signed zero, from 2**128 up (after
    rounding) it is +-inf. Subnormal bf16 inputs are honoured (no flush).
:class:`Fp32Add`
    ``a``, ``b``, ``s``: fp32 bit patterns, ``s = fl32(a + b)`` with one round-to-nearest-even,
    full subnormal support, overflow to +-inf, IEEE signed zeros (an exact zero sum is +0 unless
    both operands are -0).

Additions for the fp8 engine (:mod:`tilewright.rtl.systolic_fp8`):

:class:`Fp8Mul`
    ``a``, ``b``: fp8 bit patterns of one format (``fp8-e4m3`` = ml_dtypes ``float8_e4m3fn``:
    bias 7, no inf, NaN = S.1111.111; ``fp8-e5m2`` = ``float8_e5m2``: bias 15, IEEE inf/NaN at
    exponent 31), ``out``: the fp32 pattern of ``fl32(a * b)``. Always **exact**: the 4- (3-) bit
    significands give an 8- (6-) bit product and every product lies between 2**-32 (e5m2's
    smallest subnormal squared) and 57344**2 < 2**32, well inside fp32's normal range.
    Subnormal inputs are honoured.
:class:`Fp32Mul`
    ``a``, ``b``, ``out``: fp32 patterns, ``out = fl32(a * b)`` (RNE, subnormal inputs and
    results, overflow to +-inf): the output scaling ``fl32(acc * fl32(s_a * s_b))`` of numerics
    step 4.

Special values: inf * 0, inf - inf and any NaN operand give the **canonical quiet NaN**
``0x7FC00000`` (numpy propagates the NaN operand's payload and sign instead; tests compare NaN as
"is a NaN"). inf * finite-nonzero and inf + finite are the signed inf, as IEEE requires.

Both share one rounder (:func:`round_pack`): an exact unsigned integer significand ``S`` with a
power-of-two exponent is normalised with a logarithmic leading-zero shifter, shifted right (with a
sticky bit) when the result is subnormal, rounded to nearest-even on the packed bit pattern (a
carry out of the fraction increments the exponent field, which also turns the largest subnormal
into the smallest normal and the largest finite into inf) and clamped to inf on overflow.
The adder aligns the smaller operand exactly up to 26 bits below the larger one's LSB and jams
the bits shifted out beyond that into the lowest bit (a sticky bit), which keeps the round and
sticky information exact: jamming happens only for exponent gaps of 27 or more, where at most one
bit of left normalisation can follow a subtraction and the jammed bit lies far below the guard.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Bf16Mul", "Fp8Mul", "Fp32Mul", "Fp32Add", "round_pack", "FP8_FIELDS", "FP32_QNAN",
           "FP32_INF"]

FP32_QNAN = 0x7FC00000   #: canonical quiet NaN produced for every NaN result
FP32_INF = 0x7F800000    #: +inf bit pattern (sign bit 31 gives -inf)
_FRAC = 23               #: fp32 fraction bits
_BIAS = 127              #: fp32 / bf16 exponent bias
_EXP_BITS = 12           #: width of the signed exponent arithmetic inside the rounder


def _leading_zeros(m: Module, s: Signal, name: str) -> tuple[Signal, Signal]:
    """(``s`` shifted left until its MSB is set, the shift amount): a log-depth normaliser.

    For ``s == 0`` the shifted value is 0 and the count is meaningless (callers test zero)."""
    width = len(s)
    stages = []
    step = 1
    while step < width:
        stages.append(step)
        step *= 2
    cur = s
    bits = []
    for st in reversed(stages):
        nxt = Signal(width, name=f"{name}_n{st}")
        top_zero = Signal(name=f"{name}_z{st}")
        m.d.comb += top_zero.eq(cur[width - st:] == 0)
        m.d.comb += nxt.eq(Mux(top_zero, (cur << st)[:width], cur))
        bits.append(top_zero)
        cur = nxt
    lz = Signal(max(1, len(stages)), name=f"{name}_lz")
    m.d.comb += lz.eq(Cat(*reversed(bits)) if bits else 0)
    return cur, lz


def round_pack(m: Module, sign, s: Signal, e_top, name: str = "rp") -> Signal:
    """fp32 bit pattern of ``(-1)**sign * s * 2**(e_top - 127 - (len(s) - 1))``, rounded RNE.

    ``s``: unsigned exact significand of at least 26 bits (``s == 0`` gives a signed zero);
    ``e_top``: signed biased exponent the result would have if the MSB of ``s`` were set.
    Subnormal results are rounded at the 2**-149 position; overflow gives signed inf.
    Returns a 32-bit combinational signal.
    """
    width = len(s)
    if width < 26:
        raise ValueError(f"round_pack needs a significand of at least 26 bits, got {width}")
    norm, lz = _leading_zeros(m, s, name)
    be = Signal(signed(_EXP_BITS), name=f"{name}_be")        # biased exponent of the MSB
    m.d.comb += be.eq(e_top - lz)
    # subnormal: shift right by 1 - be (clamped so everything lands in the sticky bit)
    sh = Signal(range(width + 2), name=f"{name}_sh")
    m.d.comb += sh.eq(Mux(be >= 1, 0, Mux(be < 1 - width, width + 1, 1 - be)))
    shifted = Signal(width, name=f"{name}_shd")
    m.d.comb += shifted.eq(norm >> sh)
    lost = Signal(name=f"{name}_lost")                       # any 1 shifted out
    m.d.comb += lost.eq((shifted << sh)[:width] != norm)
    sig = shifted[width - 24:]                               # 24 bits incl. the hidden bit
    guard = shifted[width - 25]
    sticky = Signal(name=f"{name}_sticky")
    m.d.comb += sticky.eq((shifted[:width - 25] != 0) | lost)
    round_up = guard & (sticky | sig[0])
    exp_base = Signal(_EXP_BITS, name=f"{name}_eb")          # exponent field minus the hidden 1
    m.d.comb += exp_base.eq(Mux(be >= 1, be - 1, 0))
    packed = Signal(_EXP_BITS + _FRAC + 1, name=f"{name}_pk")
    m.d.comb += packed.eq((exp_base << _FRAC) + sig + round_up)
    out = Signal(32, name=f"{name}_out")
    m.d.comb += out.eq(Cat(Mux(packed >= FP32_INF, FP32_INF, packed)[:31], sign))
    with m.If(s == 0):
        m.d.comb += out.eq(Cat(Const(0, 31), sign))
    return out


class _Binary(wiring.Component):
    """Two operands in, one result out, all combinational."""

    def __init__(self, in_bits: int):
        super().__init__({"a": In(in_bits), "b": In(in_bits), "out": Out(32)})


class Bf16Mul(_Binary):
    """``out = fl32(a * b)`` for bf16 ``a``, ``b`` (combinational; see module docstring).

    Ports: ``a``, ``b`` (16-bit bf16 patterns, in), ``out`` (32-bit fp32 pattern, out).
    """

    def __init__(self):
        super().__init__(16)

    def elaborate(self, platform):
        m = Module()
        fields = []
        for name, x in (("a", self.a), ("b", self.b)):
            e, f = x[7:15], x[:7]
            sig = Cat(f, e != 0)                              # 8-bit significand
            emin = Mux(e == 0, 1, e)                          # subnormal: exponent 1, no hidden 1
            fields.append((e, f, sig, emin, x[15]))
        (ea, fa, sa, xa, _), (eb, fb, sb, xb, _) = fields
        sign = self.a[15] ^ self.b[15]
        prod = Signal(16)
        m.d.comb += prod.eq(sa * sb)
        # value = prod * 2**(xa - 127 - 7 + xb - 127 - 7); pad prod to 26 bits (<< 10):
        # msb-position exponent (biased) = xa + xb - 127 - 14 + 15
        e_top = Signal(signed(_EXP_BITS))
        m.d.comb += e_top.eq(xa + xb - _BIAS - 14 + 15)
        s = Signal(26)
        m.d.comb += s.eq(prod << 10)
        rounded = round_pack(m, sign, s, e_top, "mul")
        a_nan, b_nan = (ea == 255) & (fa != 0), (eb == 255) & (fb != 0)
        a_inf, b_inf = (ea == 255) & (fa == 0), (eb == 255) & (fb == 0)
        a_zero, b_zero = self.a[:15] == 0, self.b[:15] == 0
        with m.If(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)):
            m.d.comb += self.out.eq(FP32_QNAN)
        with m.Elif(a_inf | b_inf):
            m.d.comb += self.out.eq(Cat(Const(FP32_INF, 31), sign))
        with m.Else():
            m.d.comb += self.out.eq(rounded)
        return m


#: fp8 format name -> (exponent bits, mantissa bits, bias, has inf) as ml_dtypes defines them
FP8_FIELDS = {"fp8-e4m3": (4, 3, 7, False), "fp8-e5m2": (5, 2, 15, True)}


def _special_product(m: Module, out, a_nan, b_nan, a_inf, b_inf, a_zero, b_zero, sign,
                     rounded) -> None:
    """IEEE rules of a product: NaN operand or inf * 0 -> canonical NaN; inf -> signed inf."""
    with m.If(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)):
        m.d.comb += out.eq(FP32_QNAN)
    with m.Elif(a_inf | b_inf):
        m.d.comb += out.eq(Cat(Const(FP32_INF, 31), sign))
    with m.Else():
        m.d.comb += out.eq(rounded)


class Fp8Mul(_Binary):
    """``out = fl32(a * b)`` (exact) for fp8 ``a``, ``b`` of ``fmt`` (combinational; module
    docstring).

    Parameter (keyword-only): ``fmt``, ``"fp8-e4m3"`` or ``"fp8-e5m2"``.
    Ports: ``a``, ``b`` (8-bit fp8 patterns, in), ``out`` (32-bit fp32 pattern, out).
    """

    def __init__(self, *, fmt: str):
        if fmt not in FP8_FIELDS:
            raise ValueError(f"Fp8Mul fmt {fmt!r}: accepted: {', '.join(FP8_FIELDS)}")
        self._fmt = fmt
        super().__init__(8)

    @property
    def fmt(self) -> str:
        return self._fmt

    def elaborate(self, platform):
        m = Module()
        ebits, mbits, bias, has_inf = FP8_FIELDS[self._fmt]
        emax = (1 << ebits) - 1
        fields = []
        for x in (self.a, self.b):
            e, f = x[mbits:7], x[:mbits]
            sig = Cat(f, e != 0)                              # mbits + 1 significand bits
            xe = Mux(e == 0, 1, e)                            # subnormal: exponent 1, no hidden 1
            if has_inf:                                       # e5m2: IEEE specials at e = 31
                nan, inf = (e == emax) & (f != 0), (e == emax) & (f == 0)
            else:                                             # e4m3fn: only S.1111.111 is NaN
                nan, inf = (e == emax) & (f == (1 << mbits) - 1), Const(0)
            fields.append((sig, xe, nan, inf, x[:7] == 0))
        (sa, xa, a_nan, a_inf, a_zero), (sb, xb, b_nan, b_inf, b_zero) = fields
        sign = self.a[7] ^ self.b[7]
        pbits = 2 * (mbits + 1)
        prod = Signal(pbits)
        m.d.comb += prod.eq(sa * sb)
        # value = prod * 2**(xa + xb - 2*bias - 2*mbits); s = prod << (26 - pbits) has its MSB
        # (bit 25) at 2**(xa + xb - 2*bias - 2*mbits + pbits - 1), i.e. biased fp32 exponent
        # e_top = xa + xb - 2*bias - 2*mbits + pbits - 1 + 127
        e_top = Signal(signed(_EXP_BITS))
        m.d.comb += e_top.eq(xa + xb + (_BIAS - 2 * bias - 2 * mbits + pbits - 1))
        s = Signal(26)
        m.d.comb += s.eq(prod << (26 - pbits))
        rounded = round_pack(m, sign, s, e_top, "mul8")       # exact: never rounds
        _special_product(m, self.out, a_nan, b_nan, a_inf, b_inf, a_zero, b_zero, sign,
                         rounded)
        return m


class Fp32Mul(_Binary):
    """``out = fl32(a * b)`` for fp32 ``a``, ``b`` (RNE; combinational; see module docstring).

    Ports: ``a``, ``b`` (32-bit fp32 patterns, in), ``out`` (32-bit fp32 pattern, out).
    """

    def __init__(self):
        super().__init__(32)

    def elaborate(self, platform):
        m = Module()
        fields = []
        for x in (self.a, self.b):
            e, f = x[23:31], x[:23]
            fields.append((Cat(f, e != 0), Mux(e == 0, 1, e), (e == 255) & (f != 0),
                           (e == 255) & (f == 0), x[:31] == 0))
        (sa, xa, a_nan, a_inf, a_zero), (sb, xb, b_nan, b_inf, b_zero) = fields
        sign = self.a[31] ^ self.b[31]
        prod = Signal(48)
        m.d.comb += prod.eq(sa * sb)
        # value = prod * 2**(xa + xb - 254 - 46); the MSB of the 48-bit prod (bit 47) has
        # biased exponent xa + xb - 254 - 46 + 47 + 127 = xa + xb - 126
        e_top = Signal(signed(_EXP_BITS))
        m.d.comb += e_top.eq(xa + xb - 126)
        rounded = round_pack(m, sign, prod, e_top, "mul32")
        _special_product(m, self.out, a_nan, b_nan, a_inf, b_inf, a_zero, b_zero, sign,
                         rounded)
        return m


class Fp32Add(_Binary):
    """``out = fl32(a + b)`` for fp32 ``a``, ``b`` (combinational; see module docstring).

    Ports: ``a``, ``b`` (32-bit fp32 patterns, in), ``out`` (32-bit fp32 pattern, out).
    """

    #: exact alignment span below the larger operand's LSB (bits); beyond it: jammed sticky
    ALIGN = 26

    def __init__(self):
        super().__init__(32)

    def elaborate(self, platform):
        m = Module()
        a, b = self.a, self.b
        # order by magnitude: x is the operand with the larger |value| (bits 0..30 compare)
        swap = Signal()
        m.d.comb += swap.eq(b[:31] > a[:31])
        x, y = Signal(32), Signal(32)
        m.d.comb += [x.eq(Mux(swap, b, a)), y.eq(Mux(swap, a, b))]
        ex, ey = x[23:31], y[23:31]
        sx = Cat(x[:23], ex != 0)                             # 24-bit significands
        sy = Cat(y[:23], ey != 0)
        xe = Mux(ex == 0, 1, ex)
        ye = Mux(ey == 0, 1, ey)
        d = Signal(9)
        m.d.comb += d.eq(xe - ye)
        w = 24 + self.ALIGN + 1                               # one carry bit on top
        big = Signal(w)
        small_full = Signal(w)
        m.d.comb += [big.eq(sx << self.ALIGN), small_full.eq(sy << self.ALIGN)]
        dcl = Signal(range(w + 1))                            # w or more: y shifts out entirely
        m.d.comb += dcl.eq(Mux(d > w, w, d))
        small = Signal(w)
        m.d.comb += small.eq(small_full >> dcl)
        jam = Signal()                                        # bits of y shifted out
        m.d.comb += jam.eq((small << dcl)[:w] != small_full)
        small_j = Cat(small[0] | jam, small[1:])
        subtract = x[31] ^ y[31]
        s = Signal(w)
        m.d.comb += s.eq(Mux(subtract, big - small_j, big + small_j))
        # value = s * 2**(xe - 127 - 23 - ALIGN); the MSB (bit w-1) has biased exponent xe + 1
        e_top = Signal(signed(_EXP_BITS))
        m.d.comb += e_top.eq(xe + 1)
        rounded = round_pack(m, x[31], s, e_top, "add")
        x_nan = (ex == 255) & (x[:23] != 0)
        y_nan = (ey == 255) & (y[:23] != 0)
        x_inf, y_inf = (ex == 255) & (x[:23] == 0), (ey == 255) & (y[:23] == 0)
        with m.If(x_nan | y_nan | (x_inf & y_inf & subtract)):
            m.d.comb += self.out.eq(FP32_QNAN)
        with m.Elif(x_inf):                                   # |x| >= |y|: x is the inf
            m.d.comb += self.out.eq(x)
        with m.Elif(s == 0):                                  # exact zero: -0 only for -0 + -0
            m.d.comb += self.out.eq(Cat(Const(0, 31), x[31] & y[31]))
        with m.Else():
            m.d.comb += self.out.eq(rounded)
        return m
