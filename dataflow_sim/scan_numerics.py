"""Bit-exact numpy twin of the RTL scan unit (:mod:`tilewright.rtl.scan_unit`), SSM recurrence.

The scan unit computes, elementwise over ``lanes`` channels and sequentially over time ``t``::

    h[t] = a[t] * h[t-1] + b[t]        (h[-1] = h0)

in fixed point (:class:`ScanFormat`, defaults in brackets):

* ``a``: unsigned Q0.F_a code ``a_code`` in [0, 2**a_bits - 1], value ``a_code * 2**-a_bits``
  [F_a = a_bits = 16, so 0 <= a <= 1 - 2**-16]. Mamba's a = exp(delta * A) with delta > 0 and
  A < 0 lies in (0, 1); values above the largest code saturate to it.
* ``b``, ``h``, ``h0``: signed two's complement ``h_bits``-bit code with ``frac_bits`` fraction
  bits, value ``code * 2**-frac_bits`` [Q16.16 in an int32: range [-32768, 32768 - 2**-16],
  resolution 2**-16 ≈ 1.5e-5].

One step, per lane, in integers (exactly what the RTL does in one cycle):

1. ``p = a_code * h_code`` — exact signed product, ``a_bits + h_bits`` bits (no rounding).
2. ``q = rne(p / 2**a_bits)`` — round to nearest, ties to even, of the product back to the h grid
   (floor shift, then +1 when the dropped bits exceed one half, or equal one half and the floor
   is odd). Since a < 1, |q| <= |h_code| and q always fits in ``h_bits`` bits.
3. ``h_code = sat(q + b_code)`` — exact sum, then saturation to [-2**(h_bits-1),
   2**(h_bits-1) - 1] (no wrap-around).

The unit also outputs the C-projection ``y[t] = sum_i c[t, i] h[t, i]`` over its lanes
(:func:`project_codes`): c in the h format, exact products and sum, one round-to-nearest-even
to the h grid, then saturation. Its error (no saturation):
|ŷ - y| <= sum_i (|c_i| E_i + (u_h / 2) |ĥ_i|) + u_h / 2.

Float conversions (:func:`to_a_code`, :func:`to_h_code`) round to nearest even and saturate the
same way; :func:`from_h_code` is exact in float64.

Error bound against the exact real recurrence (derived here, checked in the tests). Let
u_a = 2**-a_bits and u_h = 2**-frac_bits, â, b̂, ĥ the quantised values and h the exact
(float64) recurrence on the unquantised a, b, h0. With no saturation of h or b:
|â - a| <= u_a (u_a / 2 from rounding; up to u_a when a in (1 - u_a, 1] saturates to the top
code), |b̂ - b| <= u_h / 2, |ĥ0 - h0| <= u_h / 2 and the per-step product rounding is <= u_h / 2.
With e[t] = ĥ[t] - h[t]:  e[t] = â[t] e[t-1] + (â[t] - a[t]) h[t-1] + (b̂[t] - b[t]) + ρ[t],
so |e[t]| <= E[t] with

    E[-1] = u_h / 2,   E[t] = â[t] E[t-1] + u_a |h[t-1]| + u_h          (:func:`error_bound`)

and, when every â <= ā < 1 and |h| <= H, the closed form E <= u_h / 2 + (u_a H + u_h) / (1 - ā).
Measured against the recurrence on the *dequantised* inputs instead, only the product rounding
remains (:func:`rounding_bound`): D[-1] = 0, D[t] = â[t] D[t-1] + u_h / 2 <= (u_h / 2) / (1 - ā).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ScanFormat", "DEFAULT_FORMAT", "to_a_code", "to_h_code", "from_a_code", "from_h_code",
           "scan_step", "scan_codes", "project_codes", "scan_task_fixed", "error_bound",
           "rounding_bound"]


@dataclass(frozen=True)
class ScanFormat:
    """Fixed-point formats of the scan unit (bits are counts; see the module docstring)."""

    a_bits: int = 16       #: unsigned Q0.a_bits decay factor a
    h_bits: int = 32       #: signed width of b, h and h0 codes
    frac_bits: int = 16    #: fraction bits of b, h and h0 (value = code * 2**-frac_bits)

    def __post_init__(self) -> None:
        for name in ("a_bits", "h_bits", "frac_bits"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"ScanFormat.{name} must be an int, not {type(v).__name__}")
        if not 1 <= self.a_bits <= 24:
            raise ValueError(f"ScanFormat.a_bits must be from 1 to 24, not {self.a_bits}")
        if not 2 <= self.h_bits <= 36:
            raise ValueError(f"ScanFormat.h_bits must be from 2 to 36, not {self.h_bits}")
        if not 0 <= self.frac_bits < self.h_bits:
            raise ValueError(f"ScanFormat.frac_bits must be from 0 to h_bits - 1 = "
                             f"{self.h_bits - 1}, not {self.frac_bits}")

    @property
    def a_max(self) -> int:
        """Largest a code (value 1 - 2**-a_bits)."""
        return (1 << self.a_bits) - 1

    @property
    def h_min(self) -> int:
        return -(1 << (self.h_bits - 1))

    @property
    def h_max(self) -> int:
        return (1 << (self.h_bits - 1)) - 1


DEFAULT_FORMAT = ScanFormat()


def to_a_code(a: np.ndarray, fmt: ScanFormat = DEFAULT_FORMAT) -> np.ndarray:
    """Real a (any shape) -> int64 a codes: round to nearest even, saturate to [0, a_max]."""
    x = np.rint(np.asarray(a, np.float64) * (1 << fmt.a_bits))
    return np.clip(x, 0, fmt.a_max).astype(np.int64)


def to_h_code(x: np.ndarray, fmt: ScanFormat = DEFAULT_FORMAT) -> np.ndarray:
    """Real b / h (any shape) -> int64 codes: round to nearest even, saturate to h_bits."""
    y = np.rint(np.asarray(x, np.float64) * (1 << fmt.frac_bits))
    return np.clip(y, fmt.h_min, fmt.h_max).astype(np.int64)


def from_a_code(code: np.ndarray, fmt: ScanFormat = DEFAULT_FORMAT) -> np.ndarray:
    """a codes -> float64 values (exact)."""
    return np.asarray(code, np.int64).astype(np.float64) / (1 << fmt.a_bits)


def from_h_code(code: np.ndarray, fmt: ScanFormat = DEFAULT_FORMAT) -> np.ndarray:
    """h codes -> float64 values (exact for h_bits <= 53)."""
    return np.asarray(code, np.int64).astype(np.float64) / (1 << fmt.frac_bits)


def scan_step(a_code: np.ndarray, b_code: np.ndarray, h_code: np.ndarray,
              fmt: ScanFormat = DEFAULT_FORMAT) -> np.ndarray:
    """One recurrence step on int64 codes (broadcasting): sat(rne(a * h / 2**a_bits) + b)."""
    p = np.asarray(a_code, np.int64) * np.asarray(h_code, np.int64)   # < 2**60: exact in int64
    q = _rne_shift(p, fmt.a_bits)
    return np.clip(q + np.asarray(b_code, np.int64), fmt.h_min, fmt.h_max)


def _rne_shift(x: np.ndarray, f: int, high: np.ndarray | int = 0) -> np.ndarray:
    """round_half_even(high + x / 2**f) of int64 ``x`` and integer ``high``: floor, then +1 above
    one half or at one half with an odd floor (the parity is that of the whole floor)."""
    if f == 0:
        return high + x
    q = high + (x >> f)
    rem = x & ((1 << f) - 1)
    half = 1 << (f - 1)
    return q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))


def project_codes(c_code: np.ndarray, h_code: np.ndarray,
                  fmt: ScanFormat = DEFAULT_FORMAT) -> np.ndarray:
    """The unit's ``y`` output: sat(rne(sum over the last axis of c * h / 2**frac_bits)) on codes
    (c, h: [..., lanes] -> int64 [...]), bit-exact with the RTL. The exact sum is formed without
    overflow by splitting h = h_hi * 2**F + h_lo (0 <= h_lo < 2**F, F = frac_bits):
    sum / 2**F = sum(c * h_hi) + sum(c * h_lo) / 2**F, an integer plus a fraction, rounded as a
    whole (the tie-to-even parity is that of the whole floor)."""
    c = _check_codes("c", c_code, fmt.h_min, fmt.h_max)
    h = np.asarray(h_code, np.int64)
    lanes, f, hb = h.shape[-1], fmt.frac_bits, fmt.h_bits
    if lanes * 2.0 ** (hb - 1 + f) >= 2.0 ** 62 or lanes * 2.0 ** (2 * hb - 2 - f) >= 2.0 ** 62:
        raise ValueError(f"project_codes: {lanes} lanes of {hb}-bit codes with {f} fraction "
                         f"bits overflow the int64 twin; accepted: lanes * 2**(h_bits - 1 + "
                         f"frac_bits) and lanes * 2**(2 h_bits - 2 - frac_bits) below 2**62")
    lo = h & ((1 << f) - 1)
    total = _rne_shift((c * lo).sum(-1), f, high=(c * (h >> f)).sum(-1))
    return np.clip(total, fmt.h_min, fmt.h_max)


def _check_codes(name: str, x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.integer):
        raise TypeError(f"scan codes '{name}' must be integers, not {x.dtype}")
    if x.size and (x.min() < lo or x.max() > hi):
        raise ValueError(f"scan codes '{name}' out of range: [{x.min()}, {x.max()}] not within "
                         f"[{lo}, {hi}]")
    return x.astype(np.int64)


def scan_codes(a_code: np.ndarray, b_code: np.ndarray, h0_code: np.ndarray,
               fmt: ScanFormat = DEFAULT_FORMAT) -> np.ndarray:
    """The scan unit on codes: ``a_code``, ``b_code`` of shape [L, *lanes], ``h0_code`` of shape
    [*lanes] -> int64 h codes [L, *lanes] (h[t] after step t), bit-exact with the RTL."""
    a = _check_codes("a", a_code, 0, fmt.a_max)
    b = _check_codes("b", b_code, fmt.h_min, fmt.h_max)
    h = _check_codes("h0", h0_code, fmt.h_min, fmt.h_max)
    if a.shape != b.shape or a.shape[1:] != h.shape:
        raise ValueError(f"scan shapes disagree: a {a.shape}, b {b.shape}, h0 {h.shape}; "
                         f"need a, b = [L, *lanes] and h0 = [*lanes]")
    out = np.empty(a.shape, np.int64)
    for t in range(a.shape[0]):           # the recurrence is sequential in t; lanes vectorised
        h = scan_step(a[t], b[t], h, fmt)
        out[t] = h
    return out


def scan_task_fixed(a: np.ndarray, b: np.ndarray, c: np.ndarray, h0: np.ndarray, *, chunk_l: int,
                    chunk_d: int, fmt: ScanFormat = DEFAULT_FORMAT
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Drop-in for :func:`tilewright.dataflow_sim.functional.scan_fp32` with the scan unit's
    arithmetic: the same arrays (a, b: [Bt, L, Di, N]; c: [Bt, L, N]; h0: [Bt, Di, N], real
    values), quantised with :func:`to_a_code` / :func:`to_h_code`; one lane per state element
    (a beat holds one channel's N states, as the unit's ``y`` needs), the recurrence on codes
    (:func:`scan_codes`) and ``y[t] = sum_n c[t, n] h[t, :, n]`` by :func:`project_codes`, both
    bit-exact with the RTL, then dequantised. ``chunk_l`` / ``chunk_d`` do not change the result:
    the state is carried exactly as codes across chunks. Returns ``(y [Bt, L, Di],
    h_last [Bt, Di, N])`` in fp32 like ``scan_fp32`` (the cast is exact for codes below 2**24 in
    magnitude, i.e. |value| < 256 in Q16.16, and rounds larger ones once)."""
    if chunk_l < 1 or chunk_d < 1:
        raise ValueError(f"scan chunk_l and chunk_d must be >= 1, got {chunk_l}, {chunk_d}")
    a, b, c, h0 = (np.asarray(x) for x in (a, b, c, h0))
    bt, length, di, n = a.shape
    if b.shape != a.shape or c.shape != (bt, length, n) or h0.shape != (bt, di, n):
        raise ValueError(f"scan shapes disagree: a {a.shape}, b {b.shape}, c {c.shape}, "
                         f"h0 {h0.shape}; need [Bt, L, Di, N], same, [Bt, L, N], [Bt, Di, N]")
    ac = np.moveaxis(to_a_code(a, fmt), 1, 0)           # [L, Bt, Di, N]
    bc = np.moveaxis(to_h_code(b, fmt), 1, 0)
    hc = scan_codes(ac, bc, to_h_code(h0, fmt), fmt)    # [L, Bt, Di, N]
    cc = np.moveaxis(to_h_code(c, fmt), 1, 0)[:, :, None, :]
    yc = project_codes(np.broadcast_to(cc, hc.shape), hc, fmt)      # [L, Bt, Di]
    y = np.moveaxis(from_h_code(yc, fmt), 0, 1).astype(np.float32)
    return y, from_h_code(hc[-1], fmt).astype(np.float32)


def error_bound(a: np.ndarray, h_exact_prev: np.ndarray,
                fmt: ScanFormat = DEFAULT_FORMAT) -> np.ndarray:
    """Bound E[t] on |ĥ[t] - h[t]| (module docstring) per lane: ``a`` [L, *lanes] real decay
    factors, ``h_exact_prev`` [L, *lanes] the exact h[t-1] (h0 at t = 0). Valid while no b, h0
    or h saturates. Returns float64 [L, *lanes] in h units."""
    ua, uh = 2.0 ** -fmt.a_bits, 2.0 ** -fmt.frac_bits
    ah = from_a_code(to_a_code(a, fmt), fmt)
    e = np.full(ah.shape[1:], uh / 2)
    out = np.empty(ah.shape)
    for t in range(ah.shape[0]):
        e = ah[t] * e + ua * np.abs(h_exact_prev[t]) + uh
        out[t] = e
    return out


def rounding_bound(a_code: np.ndarray, fmt: ScanFormat = DEFAULT_FORMAT) -> np.ndarray:
    """Bound D[t] on |ĥ[t] - g[t]|, g the exact recurrence on the dequantised inputs (only the
    product rounding differs): D[t] = â[t] D[t-1] + 2**-frac_bits / 2. Float64 [L, *lanes]."""
    ah = from_a_code(a_code, fmt)
    d = np.zeros(ah.shape[1:])
    out = np.empty(ah.shape)
    for t in range(ah.shape[0]):
        d = ah[t] * d + 2.0 ** -fmt.frac_bits / 2
        out[t] = d
    return out
