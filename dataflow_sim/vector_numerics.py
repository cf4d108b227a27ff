"""Bit-exact numpy reference of the RTL vector unit (:mod:`tilewright.rtl.vector_unit`).

Everything here is integer arithmetic on numpy ``int64`` arrays; it computes exactly what the
hardware computes, bit for bit. The RTL derives its own tables from the same written rules (the
``rtl`` and ``dataflow_sim`` layers never import each other), and the co-simulation tests check
that the two agree.

Number format
-------------
Every element operand and every elementwise result is **signed Q8.8**: a 16-bit two's
complement integer ``raw`` standing for ``raw / 256`` (range [-128, 128 - 2**-8], resolution
2**-8 = one LSB). Results that leave the range **saturate** to -32768 / +32767 raw.
The RTL's output lanes are 32 bits wide: elementwise results are sign-extended Q8.8; ``sum``
gives a signed Q24.8 int32 (raw sum of the raw inputs, wrapping modulo 2**32).

Rounding: ``rshift_round(p, s)`` = floor((p + 2**(s-1)) / 2**s) (round half up), computed as
``((p >> (s - 1)) + 1) >> 1`` for s >= 1 (identical value); ``>>`` is an arithmetic (floor) shift.

Operations (the op names of the compiler's VectorTask)
------------------------------------------------------
``add``   sat(a + b).   ``mul``  sat(rshift_round(a * b, 8)).   ``max``  max(a, b).
``sub``   sat(a - b) (opcode 13): exact inside the Q8.8 range, saturating like ``add`` — e.g.
          (-128.0) - 2**-8 -> -32768 raw, 127.99 - (-128.0) -> 32767 raw; not ``add`` of a
          negation, which would saturate -(-32768) to 32767 first (-1 - (-32768) raw would
          give 32766, not 32767).
``square`` (a kernel, not an opcode: ``mul`` with ``b`` reading ``a``'s words, :func:`square`)
          ``min(floor((a**2 + 128) / 256), 32767)``: x ** 2 rounded half up; it saturates for
          |a| >= 2897 raw (|x| > 11.3125 + 2**-8, since 2896**2 + 128 < 2**23 <= 2897**2 + 128).
``neg``   (a kernel, not an opcode: ``mul`` by the -1.0 word, -256 raw, :func:`neg`)
          ``min(-a, 32767)``: ``a * -256`` is a multiple of 256, so the rounding never acts and
          the result is exactly -x for every code but -32768 (-128.0), whose negation +128.0 is
          outside Q8.8 and saturates to 32767 (128 - 2**-8) — where numpy's int16 negation
          wraps to -32768. ``sub`` from a zero word gives the same codes (sat(0 - a)) but needs
          a zero operand word per word of ``a`` (``a`` always steps; only ``b`` broadcasts).
``sum``   wrapping int32 sum of every element of a run of beats ending with ``last``.
``rmax``  max of every element of a run of beats ending with ``last`` (Q8.8).
``argmax`` the index ``beat * lanes + lane`` (beat counted from the run's first) of the largest
          **signed 32-bit lane** of a run of beats ending with ``last``; on ties the lowest index
          (as ``torch.argmax``). It reads whole int32 lanes: int32 accumulators (logits) as they
          are, and Q8.8 results, which every op writes sign-extended, in the same order.
``requant`` int32 accumulator -> int8 (gemmlowp/TFLite-style fixed-point requantization with one
          rounding): per lane, ``x`` (signed 32-bit lane), multiplier ``m`` (signed 32-bit lane)
          and shift ``s`` (0..63): ``clamp(rshift_round(x * m, s), -128, 127)`` — round half up
          (toward +inf), exactly the functional model's ``requantize`` with bias 0 and no ReLU
          (``dataflow_sim.functional``); the product is exact (|x * m| <= 2**62).
``rescale`` int32 -> Q8.8 with the same three lanes and the same rounding as ``requant``, clamped to
          the Q8.8 range instead: ``clamp(rshift_round(x * m, s), -32768, 32767)``. A row mean
          is ``sum`` then ``rescale`` by
          :func:`~tilewright.compiler.vector_codegen.mean_params` (the parameters the code
          generator writes).
``qshift`` (opcode 14, a reduction) the int8 quantization shift of a run: with ``amax`` the
          largest ``|x|`` of its Q8.8 elements (0..32768; the run's elements, as ``rmax``),
          the smallest ``k >= 0`` with ``rshift_round(amax, k) <= 127`` (k in 0..9; the RTL
          counts the thresholds 128, 255, 510, ..., 255 * 2**7 that ``amax`` reaches, since for
          k >= 1 ``rshift_round(amax, k) <= 127`` iff ``amax < 255 * 2**(k-1)``), in every lane.

Per-tensor int8 quantize (``qshift``, then ``requant`` with ``m`` = 1 and ``s`` = ``k``,
:func:`quantize_tensor`): codes ``c = rshift_round(x, k)`` of raw Q8.8 ``x``, scale ``2**(k-8)``
(a code times the scale is the value: ``x / 256 ~ c * 2**k / 256``). Every ``|x| <= amax``, so
``-127 <= c <= 127`` and requant's int8 clamp never acts (``-amax + 2**(k-1) > -127 * 2**k``);
``|c * 2**k - x| <= 2**(k-1)`` raw: half a step, round half up, exact (c = x) for ``amax <= 127``
(|x| < 0.5). For k >= 1 the step ``2**k`` is less than twice ``amax / 127`` (the fp32
absmax scale of :func:`tilewright.formats.quantize`): ``amax >= 255 * 2**(k-2)`` for k >= 2,
``amax >= 128`` for k = 1; for k = 0 the step is Q8.8's own LSB.

Row mean (``sum`` then ``rescale``, :func:`mean`): the sum ``S`` of a row's ``n`` raw Q8.8
elements is exact (|S| <= n * 2**15 < 2**31 for n < 2**16); with ``s = 30 + floor(log2 n)`` and
``m = ceil(2**s / n)`` (so 2**29 < m <= 2**30, one int32 lane), ``S * m / 2**s`` exceeds ``S / n``
by ``e = S * (m - 2**s / n) / 2**s``: 0 <= e < S / 2**s <= n * 2**15 / (2**30 * n / 2) = 2**-14
raw LSB when S >= 0 (``m`` exact and e = 0 when n is a power of two; -2**-14 < e <= 0 when S < 0).
``S / n + 1/2`` is a multiple of ``1 / (2n)``, so for n < 2**13 shifting it by |e| < 1 / (2n)
never crosses an integer unless it is one: the result is
exactly ``floor(S / n + 1/2)`` (the mean rounded half up) for every S >= 0 (a mean of squares)
and for every S when n is a power of two; for S < 0 and n not a power of two it is that or one
LSB below it (only at an exact tie). Against the exact mean of fp32 inputs ``x`` (each rounded to
Q8.8 by :func:`to_fixed`, error <= 2**-9 while |x| <= 128 - 2**-9): |mean - mean(x)| <= 2**-9
(the inputs' rounding, averaged) + 2**-9 (the final rounding) = 2**-8, plus 2**-8 for a negative
tie.

Every error bound below is derived, not fitted: the relative error of the interpolated table
value p (entry rounding, half a Q1.15 LSB; the floor of the interpolation, < one Q1.15 LSB;
linear interpolation over a segment of width h, <= h**2 / 8 * max|f''|, divided by min |f|)
times the exact value, plus half an output LSB (2**-9) for the final rounding. Exhaustive
checks over all 65536 inputs are in tests/test_vector_unit_rtl.py.

``exp`` (range reduction, 2**f by a piecewise-linear table):
  t = a * C (C = round(log2(e) * 2**14) = 23637, so t is Q.22); i = t >> 22 (floor),
  f = t mod 2**22; k = f >> 16 (6 bits, :data:`SEG_BITS`), r = f mod 2**16;
  p = E[k] + (((E[k+1] - E[k]) * r) >> 16) with E[j] = round(2**(j/64) * 2**15) (65 entries,
  Q1.15, p in [2**15, 2**16)); result = 32767 if i >= 7, 0 if 7 - i >= 17, else
  rshift_round(p, 7 - i). Error bound (x the exact Q8.8 input, reference clipped to the Q8.8
  range): |err| <= e**x * ((1 + eps) * 2**(|x| * 2**-15) - 1) + 2**-9, with
  eps = 2**-16 (table rounding) + 2**-15 (interpolation floor) + (1/64)**2 / 8 * 2 * ln(2)**2
  (linear interpolation of 2**f on [0, 1)) and 2**(|x| 2**-15) from |C/2**14 - log2 e| <= 2**-15.

``recip`` (normalisation + table): m = |a| (0 gives +32767); n = floor(log2 m) (0..15);
  q = m << (15 - n) (bit 15 set); k = (q >> 9) mod 64, r = q mod 2**9;
  p = R[k] + (((R[k+1] - R[k]) * r) >> 9) with R[j] = round(2**15 / (1 + j/64));
  result = sign(a) * min(32767, p * 2 if n == 0 else rshift_round(p, n - 1)).
  Bound: |err| <= |1/x| * (2**-15 + 2**-14 + (1/64)**2 / 4) + 2**-9 (reference clipped;
  relative interpolation error of 1/m is h**2 / 8 * (2 / m**3) * m <= h**2 / 4).

``rsqrt``: a <= 0 gives +32767 (documented: no NaN in Q8.8). n, q, k, r as for ``recip``;
  the table is chosen by the parity of n:
  S[n & 1][j] = round(2**15 / sqrt(2**(n & 1) * (1 + j/64)));
  p interpolated as above (shift 9); result = rshift_round(p, 3 + (n >> 1)).
  Bound: |err| <= x**-0.5 * (2**-15 + 2**-14 + (1/64)**2 / 8 * 0.75 * 2) + 2**-9
  (m**-0.5 has |f''| = 0.75 m**-2.5; segments are 1/64 wide on [1, 2) and 2/64 on [2, 4), both
  give a relative error <= (1/64)**2 / 8 * 0.75; the factor 2 is a margin).

``silu``, ``softplus`` (uniform piecewise-linear table with linear tails): a >= 4096 (x >= 16)
  gives a (identity tail), a < -4096 gives 0; otherwise u = a + 4096, k = u >> 5 (0..255),
  r = u mod 32, y = F[k] + rshift_round((F[k+1] - F[k]) * r, 5), F[j] = round(f(-16 + j/8) * 256)
  (257 entries, Q8.8). Bound: |err| <= (1/8)**2 / 8 * max|f''| + 2**-9 (entries) + 2**-9
  (interpolation rounding) + tail error, max|silu''| = 1/2, max|softplus''| = 1/4,
  tail <= 16 * e**-16 < 2**-18.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tilewright.compiler.codegen import (REQUANT_SHIFT_BITS, VECTOR_INT32_OPS, VECTOR_OPCODES,
                                         VECTOR_REDUCTIONS)
from tilewright.compiler.vector_codegen import MEAN_MAX_ROW, mean_params

__all__ = ["FRAC_BITS", "SEG_BITS", "Q_MAX", "Q_MIN", "OPS", "ELEMENTWISE_OPS", "REDUCTION_OPS",
           "UNARY_OPS", "INT32_OPS", "requant", "argmax", "to_fixed", "from_fixed", "order_keys",
           "elementwise",
           "reduce", "run_beats",
           "apply_float", "error_bound", "exp2_table", "recip_table", "rsqrt_table",
           "pwl_table", "LOG2E_Q14", "rescale", "mean", "square", "neg", "qshift",
           "quantize_tensor",
           "QSHIFT_MAX"]

FRAC_BITS = 8            #: fractional bits of Q8.8
SEG_BITS = 6             #: log2(segments) of the exp / recip / rsqrt tables
Q_MAX, Q_MIN = 32767, -32768
LOG2E_Q14 = 23637        #: round(log2(e) * 2**14)
PWL_LO = -16 * 256       #: silu/softplus table start (raw Q8.8)
PWL_SHIFT = 5            #: silu/softplus segment width 2**5 LSB = 1/8

#: every op of the unit, in opcode order (the compiler's table,
#: :data:`tilewright.compiler.codegen.VECTOR_OPCODES`)
OPS = tuple(VECTOR_OPCODES)
REDUCTION_OPS = tuple(VECTOR_REDUCTIONS)
ELEMENTWISE_OPS = tuple(op for op in OPS if op not in REDUCTION_OPS)
#: the ops on whole signed 32-bit lanes (argmax, requant); the others take Q8.8
INT32_OPS = tuple(VECTOR_INT32_OPS)
BINARY_OPS = ("add", "sub", "mul", "max")
UNARY_OPS = tuple(op for op in ELEMENTWISE_OPS if op not in BINARY_OPS + INT32_OPS)
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I8_MIN, I8_MAX = -128, 127
SHIFT_MAX = (1 << REQUANT_SHIFT_BITS) - 1   #: largest requant shift (63)

_FUNCS = {"silu": lambda x: x / (1.0 + math.exp(-x)),
          "softplus": lambda x: math.log1p(math.exp(x))}


def _round(v: float) -> int:
    return int(math.floor(v + 0.5))


def exp2_table() -> np.ndarray:
    """E[j] = round(2**(j/64) * 2**15), j = 0..64 (Q1.15)."""
    n = 1 << SEG_BITS
    return np.array([_round(2.0 ** (j / n) * 2 ** 15) for j in range(n + 1)], np.int64)


def recip_table() -> np.ndarray:
    """R[j] = round(2**15 / (1 + j/64)), j = 0..64 (Q1.15)."""
    n = 1 << SEG_BITS
    return np.array([_round(2 ** 15 / (1 + j / n)) for j in range(n + 1)], np.int64)


def rsqrt_table() -> np.ndarray:
    """S[parity, j] = round(2**15 / sqrt(2**parity * (1 + j/64))), shape (2, 65) (Q1.15)."""
    n = 1 << SEG_BITS
    return np.array([[_round(2 ** 15 / math.sqrt(2 ** par * (1 + j / n))) for j in range(n + 1)]
                     for par in (0, 1)], np.int64)


def pwl_table(op: str) -> np.ndarray:
    """F[j] = round(f(-16 + j/8) * 256), j = 0..256 (Q8.8) for ``silu`` / ``softplus``."""
    f = _FUNCS[op]
    return np.array([_round(f(-16 + j / 8) * 256) for j in range(257)], np.int64)


def to_fixed(x) -> np.ndarray:
    """Float -> Q8.8 raw int64: round half to even (numpy ``rint``), saturating."""
    return np.clip(np.rint(np.asarray(x, np.float64) * 256), Q_MIN, Q_MAX).astype(np.int64)


def order_keys(x) -> np.ndarray:
    """fp32 values -> int32 lanes (int64 array) whose signed order is the values' order, for
    ``argmax`` over fp32 data (e.g. a model's logits): the IEEE-754 bits read as sign-magnitude
    and written as two's complement (``bits`` for a positive sign, ``-(bits & 0x7fffffff)`` for
    a negative one). Equal values give equal keys (+0 and -0 both 0), so the unit's lowest-index
    tie rule is ``torch.argmax``'s; every key lies in [-(2**31 - 2**23), 2**31 - 2**23] (the
    infinities at the ends), above the padding's -2**31. NaN has no place in the order: refused.
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"order_keys: fp32 values expected, not {x.dtype}")
    if np.isnan(x).any():
        raise ValueError("order_keys: NaN has no order (argmax over NaN is refused)")
    bits = x.view(np.int32).astype(np.int64)
    return np.where(bits >= 0, bits, -(bits & 0x7FFFFFFF))


def from_fixed(raw) -> np.ndarray:
    """Q8.8 (or Q24.8) raw -> float64."""
    return np.asarray(raw, np.int64) / 256.0


def _sat(v: np.ndarray) -> np.ndarray:
    return np.clip(v, Q_MIN, Q_MAX)


def rshift_round(p: np.ndarray, s) -> np.ndarray:
    """floor((p + 2**(s-1)) / 2**s) for s >= 1, p for s == 0 (elementwise shifts)."""
    p = np.asarray(p, np.int64)
    s = np.broadcast_to(np.asarray(s, np.int64), p.shape)
    sm1 = np.maximum(s - 1, 0)
    return np.where(s == 0, p, ((p >> sm1) + 1) >> 1)


def _msb(m: np.ndarray) -> np.ndarray:
    """floor(log2(m)) of positive ints (m >= 1)."""
    n = np.zeros(m.shape, np.int64)
    for b in range(16, -1, -1):
        n = np.where((n == 0) & (m >> b > 0), b, n)
    return n


def _normalise(m: np.ndarray):
    n = _msb(np.maximum(m, 1))
    q = np.maximum(m, 1) << (15 - n)
    return n, (q >> 9) & 63, q & 511


def _exp(a: np.ndarray) -> np.ndarray:
    t = a * LOG2E_Q14
    i = t >> 22
    f = t & ((1 << 22) - 1)
    k, r = f >> 16, f & 0xFFFF
    e = exp2_table()
    p = e[k] + (((e[k + 1] - e[k]) * r) >> 16)
    s = np.clip(7 - i, 1, 17)
    y = rshift_round(p, s)
    return np.where(i >= 7, Q_MAX, np.where(7 - i >= 17, 0, y))


def _recip(a: np.ndarray) -> np.ndarray:
    m = np.abs(a)
    n, k, r = _normalise(m)
    t = recip_table()
    p = t[k] + (((t[k + 1] - t[k]) * r) >> 9)
    mag = np.minimum(Q_MAX, np.where(n == 0, p * 2, rshift_round(p, np.maximum(n - 1, 0))))
    return np.where(m == 0, Q_MAX, np.where(a < 0, -mag, mag))


def _rsqrt(a: np.ndarray) -> np.ndarray:
    n, k, r = _normalise(np.maximum(a, 1))
    t = rsqrt_table()
    par = n & 1
    p = t[par, k] + (((t[par, k + 1] - t[par, k]) * r) >> 9)
    return np.where(a <= 0, Q_MAX, rshift_round(p, 3 + (n >> 1)))


def _pwl(op: str, a: np.ndarray) -> np.ndarray:
    t = pwl_table(op)
    u = np.clip(a - PWL_LO, 0, 8191)
    k, r = u >> PWL_SHIFT, u & 31
    y = t[k] + rshift_round((t[k + 1] - t[k]) * r, PWL_SHIFT)
    return np.where(a >= -PWL_LO, a, np.where(a < PWL_LO, 0, y))


def _check_lanes(name: str, v, kind: str, lo: int, hi: int) -> np.ndarray:
    """Operand ``name`` as int64, its values integers (TypeError) of ``kind`` within
    ``[lo, hi]`` (ValueError)."""
    arr = np.asarray(v)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"vector unit operand {name}: {kind} integers expected, not {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < lo or arr.max() > hi):
        raise ValueError(f"vector unit operand {name}: {kind} values lie in [{lo}, {hi}]")
    return arr


def _check_raw(name: str, v) -> np.ndarray:
    return _check_lanes(name, v, "raw Q8.8", Q_MIN, Q_MAX)


def _check_int32(name: str, v) -> np.ndarray:
    return _check_lanes(name, v, "int32", I32_MIN, I32_MAX)


def requant(x, m, s) -> np.ndarray:
    """``clamp(floor((x * m + 2**(s-1)) / 2**s), -128, 127)`` per element (``s`` = 0: no shift)
    of int32 ``x`` and ``m`` and shifts ``s`` in 0..63 (broadcast like numpy); int64 result."""
    x, m = _check_int32("x", x), _check_int32("m", m)
    s = np.asarray(s)
    if s.dtype.kind not in "iu" or (s.size and (s.min() < 0 or s.max() > SHIFT_MAX)):
        raise ValueError(f"vector unit requant: shifts are integers 0..{SHIFT_MAX}")
    p = x * m                                     # |p| <= 2**62: exact in int64
    return np.clip(rshift_round(p, s.astype(np.int64)), I8_MIN, I8_MAX)


def rescale(x, m, s) -> np.ndarray:
    """``clamp(floor((x * m + 2**(s-1)) / 2**s), -32768, 32767)`` per element (``s`` = 0: no
    shift) of int32 ``x`` and ``m`` and shifts ``s`` in 0..63: ``requant`` clamped to Q8.8 raw
    instead of int8; int64 result."""
    x, m = _check_int32("x", x), _check_int32("m", m)
    s = np.asarray(s)
    if s.dtype.kind not in "iu" or (s.size and (s.min() < 0 or s.max() > SHIFT_MAX)):
        raise ValueError(f"vector unit rescale: shifts are integers 0..{SHIFT_MAX}")
    return _sat(rshift_round(x * m, s.astype(np.int64)))


def mean(x) -> np.ndarray:
    """Row means of raw Q8.8 ``x`` ``[rows, n]`` as the unit computes them (``sum`` then
    ``rescale`` by :func:`~tilewright.compiler.vector_codegen.mean_params`): raw Q8.8 int64
    ``[rows]``."""
    x = _check_raw("x", x)
    if x.ndim != 2:
        raise ValueError(f"vector unit mean: rows [rows, n] expected, not shape {x.shape}")
    mult, shift = mean_params(x.shape[1])
    return rescale(x.sum(axis=1), np.int64(mult), np.int64(shift))


def square(x) -> np.ndarray:
    """``x ** 2`` of raw Q8.8 ``x`` as the unit computes it (``mul`` of ``x`` by itself, the
    ``square`` kernel): raw Q8.8 int64, rounded half up, saturating at 32767."""
    x = _check_raw("x", x)
    return elementwise("mul", x, x)


#: the largest ``qshift`` (amax = 32768, the magnitude of -32768 raw)
QSHIFT_MAX = 9


def qshift(amax: int) -> int:
    """The int8 quantization shift of the magnitude ``amax`` (raw Q8.8, 0..32768): the smallest
    ``k >= 0`` with ``rshift_round(amax, k) <= 127``."""
    amax = int(amax)
    if not 0 <= amax <= 1 << 15:
        raise ValueError(f"vector unit qshift: amax {amax} outside 0..32768")
    k = 0
    while (amax if k == 0 else (amax + (1 << (k - 1))) >> k) > I8_MAX:   # rshift_round
        k += 1
    return k


def quantize_tensor(x) -> tuple[np.ndarray, int]:
    """Per-tensor int8 quantize of raw Q8.8 ``x`` as the unit computes it (``qshift`` over all of
    ``x``, then ``requant`` by 1 and that shift): (codes int64 of ``x``'s shape, in -127..127;
    shift ``k``) — the value of code ``c`` is ``c * 2**(k - 8)``."""
    x = _check_raw("x", x)
    k = reduce("qshift", x)
    return requant(x, np.int64(1), np.int64(k)), k


def neg(x) -> np.ndarray:
    """``-x`` of raw Q8.8 ``x`` as the unit computes it (``mul`` of ``x`` by -1.0, the ``neg``
    kernel): raw Q8.8 int64, exact but for -32768, which saturates to 32767."""
    x = _check_raw("x", x)
    return elementwise("mul", x, np.full_like(x, -(1 << FRAC_BITS)))


def argmax(x) -> int:
    """Index of the largest element of int32 ``x`` (flattened, row-major), the lowest on ties."""
    x = _check_int32("x", x).reshape(-1)
    if not x.size:
        raise ValueError("vector unit argmax of no elements")
    return int(np.argmax(x))


def _low16(x: np.ndarray) -> np.ndarray:
    """The low 16 bits of int32 lanes as signed Q8.8 (what the Q8.8 ops read)."""
    lo = np.asarray(x, np.int64) & 0xFFFF
    return np.where(lo >= 1 << 15, lo - (1 << 16), lo)


def elementwise(op: str, a, b=None) -> np.ndarray:
    """Elementwise op on raw Q8.8 arrays (``b`` only for add/sub/mul/max); returns raw int64 Q8.8."""
    if op not in ELEMENTWISE_OPS or op in INT32_OPS:
        ok = [o for o in ELEMENTWISE_OPS if o not in INT32_OPS]
        raise ValueError(f"vector op {op!r}: elementwise Q8.8 ops are {', '.join(ok)} "
                         "(requant, rescale: vector_numerics.requant / rescale)")
    a = _check_raw("a", a)
    if op in BINARY_OPS:
        if b is None:
            raise ValueError(f"vector op {op!r} needs a second operand b")
        b = _check_raw("b", b)
        if op == "add":
            return _sat(a + b)
        if op == "sub":
            return _sat(a - b)
        if op == "mul":
            return _sat(rshift_round(a * b, 8))
        return np.maximum(a, b)
    if op == "exp":
        return _exp(a)
    if op == "recip":
        return _recip(a)
    if op == "rsqrt":
        return _rsqrt(a)
    return _pwl(op, a)


def reduce(op: str, a) -> int:
    """``sum`` (int32 wrapping, Q24.8 raw), ``rmax`` (Q8.8 raw) or ``qshift`` (the int8 shift
    of the largest magnitude) of all elements of ``a``, or
    ``argmax`` (int32 elements: the lowest index of the largest)."""
    if op not in REDUCTION_OPS:
        raise ValueError(f"vector op {op!r}: reductions are {', '.join(REDUCTION_OPS)}")
    if op == "argmax":
        return argmax(a)
    a = _check_raw("a", a)
    if op == "sum":
        return int(np.int64(a.sum()).astype(np.uint32).astype(np.int32))
    if op == "qshift":
        return qshift(int(np.abs(a).max()) if a.size else 0)
    return int(a.max()) if a.size else Q_MIN


def run_beats(ops: Sequence[str], a, b, last: Sequence[bool], s=None) -> list[list[int]]:
    """The RTL's output beats for input beats (``a``, ``b``: (beats, lanes) signed 32-bit lanes;
    the Q8.8 ops read their low 16 bits; ``s``: (beats, lanes) requant shifts, only needed when
    a beat is ``requant``; ``ops`` and ``last`` per beat). Elementwise beats give one output beat
    each; a reduction gives one output beat (the result in every lane) at its beat with ``last``
    set. A reduction run is the reduction beats from one ``last`` (or the start) to the next, all
    of one op; elementwise beats may be interleaved and do not touch it. A run mixing reductions
    is a ValueError."""
    a, b = _check_int32("a", a), _check_int32("b", b)
    a16, b16 = _low16(a), _low16(b)
    out, acc, run_op, i = [], [], None, 0
    while i < len(ops):
        op = ops[i]
        if op in ELEMENTWISE_OPS:        # a run of one elementwise op: one vectorised call
            j = i
            while j < len(ops) and ops[j] == op:
                j += 1
            if op in ("requant", "rescale"):
                if s is None:
                    raise ValueError(f"vector beat {i}: {op} needs shifts s")
                fn = requant if op == "requant" else rescale
                out += fn(a[i:j], b[i:j], np.asarray(s)[i:j]).tolist()
            else:
                out += elementwise(op, a16[i:j], b16[i:j]).tolist()
            i = j
            continue
        if op not in REDUCTION_OPS:
            raise ValueError(f"vector beat {i}: op {op!r}; accepted: {', '.join(OPS)}")
        if run_op not in (None, op):
            raise ValueError(f"vector beat {i}: {op} inside a {run_op} run (end a reduction "
                             "run with last before starting another)")
        acc.append(a[i] if op in INT32_OPS else a16[i])
        run_op = op
        if last[i]:
            out.append([reduce(op, np.concatenate(acc))] * a.shape[1])
            acc, run_op = [], None
        i += 1
    return out


def apply_float(op: str, x, y=None):
    """Quantize float inputs to Q8.8, run ``op`` (elementwise or reduction), return floats.
    The int32 ops (argmax, requant) take integers: call :func:`argmax` / :func:`requant`."""
    if op in INT32_OPS:
        raise ValueError(f"vector op {op!r} takes int32 lanes, not floats (vector_numerics.{op})")
    if op == "qshift":
        raise ValueError("vector op 'qshift' gives a shift, not a value (vector_numerics."
                         "quantize_tensor)")
    a = to_fixed(x)
    if op in REDUCTION_OPS:
        return from_fixed(reduce(op, a))
    return from_fixed(elementwise(op, a, None if y is None else to_fixed(y)))


def error_bound(op: str, x: np.ndarray) -> np.ndarray:
    """The documented bound on |hardware - exact| for unary ``op`` at exact inputs ``x`` (floats
    representable in Q8.8), against the exact value clipped to the Q8.8 range."""
    x = np.asarray(x, np.float64)
    lsb_half = 2.0 ** -9
    h = 1.0 / (1 << SEG_BITS)
    if op == "exp":
        eps = 2.0 ** -16 + 2.0 ** -15 + h * h / 8 * 2 * math.log(2) ** 2
        return np.exp(np.minimum(x, 5.0)) * ((1 + eps) * 2.0 ** (np.abs(x) * 2.0 ** -15) - 1) \
            + lsb_half
    if op == "recip":
        with np.errstate(divide="ignore"):
            return np.abs(1.0 / x) * (2.0 ** -15 + 2.0 ** -14 + h * h / 4) + lsb_half
    if op == "rsqrt":
        with np.errstate(divide="ignore", invalid="ignore"):
            return x ** -0.5 * (2.0 ** -15 + 2.0 ** -14 + h * h / 8 * 0.75 * 2) + lsb_half
    if op in ("silu", "softplus"):
        f2 = 0.5 if op == "silu" else 0.25
        return np.full(x.shape, (1 / 8) ** 2 / 8 * f2 + 2 * lsb_half + 2.0 ** -18)
    raise ValueError(f"error_bound: unary ops are {', '.join(UNARY_OPS)}")
