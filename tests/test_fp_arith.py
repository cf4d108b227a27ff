"""Amaranth bf16 multiplier and fp32 adder (rtl/fp_arith.py) against numpy float32, bit for bit.

The reference is the CPU's IEEE float32 arithmetic through numpy (round-to-nearest-even, subnormals
kept), with bf16 inputs widened exactly by ml_dtypes. Operands: random bit patterns (every class:
zeros, subnormals, normals, inf, NaN), random values whose exponents are steered to where rounding
is delicate (close exponents for cancellation, tiny products for subnormal/underflow results, huge
ones for overflow), and hand-picked corner cases (ties to even, exact cancellation, signed zeros,
max finite + ulp). NaN results are compared as "is a NaN" (the RTL's NaN is canonical).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from tilewright.rtl.fp_arith import FP32_QNAN, Bf16Mul, Fp32Add, round_pack

F32_MAX = 0x7F7FFFFF


def _simulate(dut, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Outputs of the combinational ``dut`` for each operand pair (uint32 patterns)."""
    out: list[int] = []

    async def bench(ctx):
        for x, y in zip(a.tolist(), b.tolist()):
            ctx.set(dut.a, x)
            ctx.set(dut.b, y)
            out.append(ctx.get(dut.out))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    return np.array(out, np.uint32)


def _assert_bits_equal(got: np.ndarray, ref: np.ndarray, a, b, what: str) -> None:
    ref_nan = np.isnan(ref.view(np.float32))
    got_nan = np.isnan(got.view(np.float32))
    bad = (ref_nan != got_nan) | (~ref_nan & (got != ref))
    assert got[got_nan].tolist() == [FP32_QNAN] * int(got_nan.sum()), f"{what}: non-canonical NaN"
    if bad.any():
        rows = [f"{int(x):#x} {int(y):#x}: rtl {int(g):#010x} numpy {int(r):#010x}"
                for x, y, g, r in zip(a[bad], b[bad], got[bad], ref[bad])][:8]
        raise AssertionError(f"{what}: {int(bad.sum())} of {len(got)} differ:\n" + "\n".join(rows))


def _f32(*vals) -> np.ndarray:
    return np.array(vals, np.float32).view(np.uint32)


# ---- fp32 adder ----------------------------------------------------------------------------------
def _add_operands(rng) -> tuple[np.ndarray, np.ndarray]:
    n = 500
    u32 = lambda k: rng.integers(0, 2**32, k, dtype=np.uint64).astype(np.uint32)  # noqa: E731
    a1, b1 = u32(n), u32(n)                                  # random bit patterns
    # same or neighbouring exponents, random signs: cancellation and renormalisation
    a2 = u32(n)
    shift = rng.integers(-2, 3, n).astype(np.int64)
    exp2 = np.clip(((a2 >> 23) & 0xFF).astype(np.int64) + shift, 0, 254).astype(np.uint32)
    b2 = (u32(n) & 0x807FFFFF) | (exp2 << 23)
    # small exponents: subnormal operands and results
    a3 = (u32(n) & 0x80FFFFFF)                                # exponent field 0 or 1
    b3 = (u32(n) & 0x817FFFFF)                                # exponent field 0..2
    # exponent gaps 20..59 around and beyond the alignment span, large exponents (overflow)
    a4 = u32(n) & 0x807FFFFF | (rng.integers(200, 255, n).astype(np.uint32) << 23)
    gap = rng.integers(20, 60, n).astype(np.uint32)
    b4 = u32(n) & 0x807FFFFF | ((((a4 >> 23) & 0xFF) - gap) << 23)
    corners = [  # (a, b) as float32
        (1.0, 2.0**-24), (1.0 + 2.0**-23, 2.0**-24), (1.0, -(2.0**-25)), (1.0, 2.0**-24 + 2.0**-40),
        (1.5, -1.5), (-1.5, 1.5), (0.0, -0.0), (-0.0, -0.0), (-0.0, 0.0), (0.0, 0.0),
        (np.inf, -np.inf), (np.inf, 1.0), (-np.inf, -1e30), (np.nan, 1.0), (1.0, 2.0**-149),
        (2.0**-126, -(2.0**-149)), (2.0**-149, 2.0**-149), (-(2.0**-126), 2.0**-127),
        (3.0 * 2.0**-149, -(2.0**-149)), (1.0, -(1.0 - 2.0**-24)), (2.0**24, 1.0),
        (2.0**24 + 2.0, 1.0), (16777216.0, -0.5), (1e-45, -1e-45),
    ]
    ca, cb = _f32(*[c[0] for c in corners]), _f32(*[c[1] for c in corners])
    maxes = np.array([F32_MAX, F32_MAX, F32_MAX, F32_MAX | 0x80000000], np.uint32)
    ca = np.concatenate([ca, maxes])
    # max finite + half ulp (2**103, a tie: rounds to even = up = inf), + just under half, + ulp
    cb = np.concatenate([cb, _f32(2.0**103, 2.0**102 * 1.5, 2.0**104, -(2.0**103))])
    return (np.concatenate([a1, a2, a3, a4, ca]), np.concatenate([b1, b2, b3, b4, cb]))


def test_fp32_add_matches_numpy_bit_for_bit():
    a, b = _add_operands(np.random.default_rng(11))
    with np.errstate(all="ignore"):
        ref = (a.view(np.float32) + b.view(np.float32)).view(np.uint32)
    got = _simulate(Fp32Add(), a, b)
    _assert_bits_equal(got, ref, a, b, "Fp32Add")
    # the operand classes reached what they aim at (so the comparison above covered them)
    assert (ref == F32_MAX).any() and (ref == 0x7F800000).any()          # max finite and overflow
    assert ((ref & 0x7F800000) == 0).sum() > 100                         # many subnormal/zero sums


def test_fp32_add_closed_forms():
    # ties to even: 1 + 2**-24 -> 1 (even, down); (1 + 2**-23) + 2**-24 -> 1 + 2**-22 (up);
    # max finite + 2**103 (half an ulp) -> inf; max finite + 1.5 * 2**102 -> max finite;
    # 2**-126 - 2**-149 -> largest subnormal (exact)
    a = _f32(1.0, 1.0 + 2.0**-23, 0.0, 0.0, 2.0**-126)
    a[2:4] = F32_MAX
    b = _f32(2.0**-24, 2.0**-24, 2.0**103, 1.5 * 2.0**102, -(2.0**-149))
    got = _simulate(Fp32Add(), a, b)
    assert got.tolist() == [0x3F800000, 0x3F800002, 0x7F800000, F32_MAX, 0x007FFFFF]


def test_fp32_add_signed_zeros_ieee():
    a, b = _f32(1.5, 0.0, -0.0, -0.0), _f32(-1.5, -0.0, 0.0, -0.0)
    got = _simulate(Fp32Add(), a, b)
    assert got.tolist() == [0, 0, 0, 0x80000000]    # x + (-x) = +0; -0 + -0 = -0


# ---- bf16 multiplier -----------------------------------------------------------------------------
def _mul_operands(rng) -> tuple[np.ndarray, np.ndarray]:
    n = 700
    u16 = lambda k: rng.integers(0, 2**16, k).astype(np.uint16)  # noqa: E731
    a1, b1 = u16(n), u16(n)                                        # random bit patterns
    # exponent sums near fp32's subnormal range (2**-149 .. 2**-126) and underflow to zero
    ea = rng.integers(0, 128, n)
    eb = np.clip(127 - 126 + 127 - ea + rng.integers(-30, 6, n), 0, 254)
    a2 = (u16(n) & 0x807F) | (ea.astype(np.uint16) << 7)
    b2 = (u16(n) & 0x807F) | (eb.astype(np.uint16) << 7)
    # exponent sums near overflow (2**128)
    ea = rng.integers(127, 255, n)
    eb = np.clip(127 + 128 - (ea - 127) + rng.integers(-3, 2, n), 0, 254)
    a3 = (u16(n) & 0x807F) | (ea.astype(np.uint16) << 7)
    b3 = (u16(n) & 0x807F) | (eb.astype(np.uint16) << 7)
    corners = [(0x0001, 0x3F80), (0x0001, 0x3780), (0x0001, 0x37C0), (0x0001, 0x3740),
               (0x8001, 0x0001), (0x7F80, 0x0000), (0xFF80, 0x3F80), (0x7FC1, 0x3F80),
               (0x7F7F, 0x7F7F), (0x7F7F, 0x3F81), (0x0000, 0x8000), (0x807F, 0x4000),
               (0x3FFF, 0x3FFF), (0x0080, 0x3F00), (0x00C0, 0x3E80)]
    ca = np.array([c[0] for c in corners], np.uint16)
    cb = np.array([c[1] for c in corners], np.uint16)
    return np.concatenate([a1, a2, a3, ca]), np.concatenate([b1, b2, b3, cb])


def test_bf16_mul_matches_numpy_bit_for_bit():
    a, b = _mul_operands(np.random.default_rng(12))
    fa = a.view(ml_dtypes.bfloat16).astype(np.float32)
    fb = b.view(ml_dtypes.bfloat16).astype(np.float32)
    with np.errstate(all="ignore"):
        ref = (fa * fb).view(np.uint32)
    got = _simulate(Bf16Mul(), a, b)
    _assert_bits_equal(got, ref, a, b, "Bf16Mul")
    mag = ref & 0x7FFFFFFF
    assert ((mag > 0) & (mag < 0x00800000)).sum() > 50          # subnormal results were covered
    assert ((mag == 0) & (a & 0x7FFF != 0) & (b & 0x7FFF != 0)).sum() > 20  # underflow to zero
    assert (mag == 0x7F800000).sum() > 50                         # overflow to inf


def test_bf16_mul_closed_forms():
    # min bf16 subnormal (2**-133) * 2**-16 = 2**-149 exact; * 2**-17 = tie -> 0; * 1.5 * 2**-17
    # = 1.5 * 2**-150 -> rounds up to 2**-149; 255 * 255 (1.9921875**2 * 2**0) exact in fp32
    a = np.array([0x0001, 0x0001, 0x0001, 0x3FFF], np.uint16)
    b = np.array([0x3780, 0x3700, 0x3740, 0x3FFF], np.uint16)
    got = _simulate(Bf16Mul(), a, b)
    assert got.tolist() == [1, 0, 1, np.float32(1.9921875**2).view(np.uint32)]


def test_round_pack_rejects_a_narrow_significand():
    m = Module()
    with pytest.raises(ValueError, match="at least 26 bits"):
        round_pack(m, 0, Signal(16), Signal(8))
