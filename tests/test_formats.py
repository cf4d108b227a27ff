"""Number-format registry and quantization vs independent references: torch's own casts and
torch-written quantizers, and a pure-Python MX quantizer written from the OCP MX v1.0 text."""

from __future__ import annotations

import math
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilewright.formats import (FORMATS, MX_BLOCK, QTensor, dequantize,
                                element_values, get_format, quantize, round_to_element)

FP8 = {"fp8-e4m3": torch.float8_e4m3fn, "fp8-e5m2": torch.float8_e5m2}
MX = ["mxint8", "mxfp8", "mxfp8-e5m2"]
BITS = {1: torch.uint8, 2: torch.int16}


def torch_bits(x: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Bit patterns of torch's cast of fp32 ``x`` to ``dtype``."""
    t = torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(dtype)
    return t.view(BITS[t.element_size()]).numpy().view(f"u{t.element_size()}")


def our_bits(codes: np.ndarray) -> np.ndarray:
    return codes.view(f"u{codes.dtype.itemsize}")


def assert_same_bits(ours: np.ndarray, ref_bits: np.ndarray, ref_vals: np.ndarray) -> None:
    """Equal bit patterns, except that any NaN matches any NaN (payloads may differ)."""
    nan = np.isnan(ours.astype(np.float32))
    np.testing.assert_array_equal(nan, np.isnan(ref_vals))
    np.testing.assert_array_equal(our_bits(ours)[~nan], ref_bits[~nan])


def representable(dtype) -> np.ndarray:
    """All finite non-negative values of an 8-bit float dtype, increasing (from its 256 codes)."""
    v = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    return np.unique(v[np.isfinite(v) & (v >= 0)])


def edge_values(dtype) -> np.ndarray:
    """Ties (exact midpoints), their fp32 neighbours, subnormals, max finite and beyond."""
    v = representable(dtype)
    mids = (v[:-1] + v[1:]) / 2  # exact in fp32: at most 5 significant bits
    mids32 = mids.astype(np.float32)
    near = np.concatenate([mids32, np.nextafter(mids32, np.float32(np.inf)),
                           np.nextafter(mids32, np.float32(0)), v.astype(np.float32)])
    fi = ml_dtypes.finfo(dtype)
    extra = np.array([fi.smallest_subnormal / 2, fi.smallest_subnormal / 4, float(fi.max) * 1.03,
                      float(fi.max) * 1.5, 1e30, 0.0], np.float32)
    x = np.concatenate([near, extra])
    return np.concatenate([x, -x])


def random_fp32(rng: np.random.Generator, n: int, lo: int = -30, hi: int = 30) -> np.ndarray:
    """fp32 values with uniformly random significand bits and exponents in [lo, hi]."""
    sig = rng.uniform(1, 2, n) * rng.choice([-1, 1], n)
    return np.ldexp(sig, rng.integers(lo, hi + 1, n)).astype(np.float32)


# ------------------------------------------------------------------------------ registry
def test_registry_has_the_formats_and_consistent_fields() -> None:
    for name in ["fp32", "bf16", "int8", "fp8-e4m3", "fp8-e5m2", "mxint8", "mxfp8"]:
        assert name in FORMATS and FORMATS[name].name == name
    for f in FORMATS.values():
        assert np.dtype(f.dtype).itemsize * 8 == f.bits
        assert f.rounding
        if f.kind == "float":
            assert f.max_finite == float(ml_dtypes.finfo(f.dtype).max)
        assert (f.block_size == 32) == (f.scaling == "e8m0")
    assert FORMATS["mxint8"].max_finite == 127 / 64 and FORMATS["mxint8"].emax == 0
    assert FORMATS["mxfp8"].emax == 8 and FORMATS["mxfp8-e5m2"].emax == 15  # OCP emax_elem
    assert FORMATS["int8"].default_acc == "int32"


def test_unknown_format_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="known: fp32, bf16, int8"):
        get_format("fp4")
    with pytest.raises(ValueError, match="unknown number format"):
        quantize(np.ones((2, 2)), "int4")


def test_importing_formats_does_not_import_torch() -> None:
    code = ("import sys, tilewright.formats, tilewright.dataflow_sim.numerics; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------ element casts
@pytest.mark.parametrize("name", ["fp8-e4m3", "fp8-e5m2"])
def test_fp8_all_codes_decode_like_torch(name: str) -> None:
    codes = np.arange(256, dtype=np.uint8)
    ours = codes.view(FORMATS[name].dtype).astype(np.float32)
    ref = torch.from_numpy(codes).view(FP8[name]).float().numpy()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    np.testing.assert_array_equal(ours[~np.isnan(ours)], ref[~np.isnan(ref)])


@pytest.mark.parametrize("name", ["fp8-e4m3", "fp8-e5m2"])
def test_fp8_rne_cast_matches_torch_on_edges_and_random(name: str) -> None:
    f, tdt = FORMATS[name], FP8[name]
    rng = np.random.default_rng(1)
    x = np.concatenate([edge_values(f.dtype), random_fp32(rng, 200_000, -20, 17)])
    # the saturating cast == torch's cast of the clamped input (RNE never exceeds max after clamp)
    clamped = np.clip(x, -f.max_finite, f.max_finite)
    assert_same_bits(round_to_element(x, f), torch_bits(clamped, tdt), clamped)
    # the raw ml_dtypes cast == torch's cast wherever torch's overflow policy cannot matter
    vmax = representable(f.dtype)[-1]
    ulp = vmax - representable(f.dtype)[-2]
    inside = np.abs(x) < vmax + ulp / 2
    assert_same_bits(x[inside].astype(f.dtype), torch_bits(x[inside], tdt), x[inside])


@pytest.mark.parametrize("name", ["fp8-e4m3", "fp8-e5m2"])
def test_fp8_overflow_saturates(name: str) -> None:
    f = FORMATS[name]
    x = np.array([f.max_finite * 1.01, 1e30, -1e30, np.inf, -np.inf], np.float32)
    out = round_to_element(x, f).astype(np.float32)
    np.testing.assert_array_equal(out, [f.max_finite, f.max_finite, -f.max_finite,
                                        f.max_finite, -f.max_finite])
    assert np.isnan(round_to_element(np.array([np.nan], np.float32), f).astype(np.float32)).all()


def test_bf16_rne_cast_matches_torch_including_ties_overflow_nan() -> None:
    rng = np.random.default_rng(2)
    hi = rng.integers(0, 2**16, 100_000, dtype=np.uint32) << 16
    ties = (hi | 0x8000).view(np.float32)                                # exact midpoints
    rand = rng.integers(0, 2**32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    big = np.float32(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    special = np.array([big, np.nextafter(big, np.float32(np.inf)), 3.4e38, np.inf, -np.inf, np.nan,
                        1e-40, -1e-45, 0.0, -0.0], np.float32)
    with np.errstate(invalid="ignore"):
        below = np.nextafter(ties, np.float32(0))  # NaN ties stay NaN
    for x in [ties, below, rand, special]:
        assert_same_bits(round_to_element(x, "bf16"), torch_bits(x, torch.bfloat16), x)


def test_int_element_rounding_is_rne_and_symmetric() -> None:
    v = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 126.5, 127.6, -200, 1e9], np.float32)
    np.testing.assert_array_equal(round_to_element(v, "int8"),
                                  [0, 2, 2, 0, -2, 126, 127, -127, 127])
    assert round_to_element(np.float32([1.9921875, -2.0]), "mxint8").tolist() == [127, -127]
    with pytest.raises(ValueError, match="inf/NaN"):
        round_to_element(np.float32([np.nan]), "int8")


# ------------------------------------------------------------------------------ scaled quantizers
def torch_scale(x: torch.Tensor, qmax: float, dim: int | None) -> torch.Tensor:
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    s = amax / qmax
    return torch.where(amax == 0, torch.ones_like(s), s)


@pytest.mark.parametrize("granularity,axis", [("tensor", -1), ("channel", -1), ("channel", 0)])
@pytest.mark.parametrize("name", ["int8", "fp8-e4m3", "fp8-e5m2"])
def test_scaled_quantize_matches_torch(name: str, granularity: str, axis: int) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((37, 65)) * rng.uniform(0.01, 100, (37, 1))).astype(np.float32)
    x[3] = 0.0  # an all-zero channel gets scale 1
    q = quantize(x, name, axis=axis, granularity=granularity)
    f = FORMATS[name]
    xt = torch.from_numpy(x)
    s = torch_scale(xt, f.max_finite, None if granularity == "tensor" else axis)
    np.testing.assert_array_equal(q.scales, s.reshape(q.scales.shape).numpy())
    if name == "int8":
        ref = torch.clamp(torch.round(xt / s), -127, 127).to(torch.int8).numpy()
        np.testing.assert_array_equal(q.values, ref)
    else:
        v = torch.clamp(xt / s, -f.max_finite, f.max_finite)
        assert_same_bits(q.values, torch_bits(v.numpy(), FP8[name]), v.numpy())
    deq = (torch.from_numpy(element_values(q.values, f)) * s).numpy()
    np.testing.assert_array_equal(dequantize(q), deq)


@pytest.mark.parametrize("name", ["int8", "fp8-e4m3", "fp8-e5m2"])
def test_scaled_quantize_ties_match_torch(name: str) -> None:
    """Values that land (nearly) on rounding ties after x / s: the division must be x / s in
    fp32, not x * (1/s), and ties must go to even -- exactly as torch's quantizer does."""
    f = FORMATS[name]
    amax = np.float32(3.3)
    s = np.float32(amax / np.float32(f.max_finite))
    grid = np.arange(-127, 127) + 0.5 if f.kind == "int" else \
        (lambda v: (v[:-1] + v[1:]) / 2)(representable(f.dtype))
    x = (np.float32(grid) * s).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(0)),
                        [amax]]).astype(np.float32)
    q = quantize(x, name)
    xt = torch.from_numpy(x)
    st_ = torch_scale(xt, f.max_finite, None)
    assert q.scales.item() == st_.item() == s
    if f.kind == "int":
        np.testing.assert_array_equal(q.values, torch.clamp(torch.round(xt / st_), -127, 127)
                                      .to(torch.int8).numpy())
    else:
        v = torch.clamp(xt / st_, -f.max_finite, f.max_finite)
        assert_same_bits(q.values, torch_bits(v.numpy(), FP8[name]), v.numpy())


def test_quantize_validates_input() -> None:
    x = np.ones((4, 8), np.float32)
    with pytest.raises(ValueError, match="inf/NaN"):
        quantize(np.array([[1.0, np.inf]]), "fp8-e4m3")
    with pytest.raises(ValueError, match="granularity"):
        quantize(x, "int8", granularity="row")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fixed scaling"):
        quantize(x, "mxfp8", granularity="channel")
    with pytest.raises(ValueError, match="axis"):
        quantize(x, "int8", axis=2)
    with pytest.raises(TypeError, match="values must be"):
        QTensor("int8", x, None, 0, "none")
    with pytest.raises(ValueError, match="scales must be"):
        QTensor("int8", x.astype(np.int8), np.ones((4, 8), np.float32), 1, "channel")
    assert quantize(np.array([[np.inf]]), "bf16").values.astype(np.float32)[0, 0] == np.inf


# ------------------------------------------------------------------------------ MX
def rne_float(v: float, mbits: int, emin: int, vmax: float) -> float:
    """Saturating RNE of ``v`` to a float grid with ``mbits`` fraction bits and normal exponents
    >= ``emin`` (subnormals below), written from the definition: quantum = 2**(e - mbits)."""
    if v == 0:
        return 0.0
    e = max(math.floor(math.log2(abs(v))), emin)
    quantum = 2.0 ** (e - mbits)
    q = round(v / quantum) * quantum  # Python's round() is round-half-to-even; v/quantum exact
    return max(-vmax, min(vmax, q))


def mx_reference(row: list[float], name: str) -> tuple[list[int], list[float]]:
    """OCP MX v1.0 section 6.3, one vector: per 32-block X = floor(log2(max|V|)) - emax_elem
    (clamped to the E8M0 range, -127 for an all-zero block); P_i = quantize(V_i / 2**X) with
    normal values beyond the element's max clamped to it. Returns (X per block, element values)."""
    f = FORMATS[name]
    xs, vals = [], []
    for i in range(0, len(row), MX_BLOCK):
        block = row[i:i + MX_BLOCK]
        amax = max(abs(v) for v in block)
        if amax == 0:
            x = -127
        else:
            e = math.floor(math.log2(amax))
            e -= 2.0 ** e > amax  # guard against log2 rounding up just below a power of two
            x = max(-127, min(127, e - f.emax))
        xs.append(x)
        for v in block:
            w = v / 2.0 ** x
            if f.kind == "int":
                vals.append(max(-127, min(127, round(w * 64))) / 64)
            else:
                vals.append(rne_float(w, f.mantissa_bits, f.emin, f.max_finite))
    return xs, vals


@pytest.mark.parametrize("name", MX)
def test_mx_quantize_matches_spec_reference(name: str) -> None:
    rng = np.random.default_rng(4)
    x = random_fp32(rng, 5 * 100, -40, 40).reshape(5, 100)  # wide range inside each block
    x[1, :32] = 0.0                                         # all-zero block
    x[2, 32:64] = np.float32(2.0 ** 120) * rng.standard_normal(32).astype(np.float32)
    x[3, 64:96] = np.float32(2.0 ** -130) * np.arange(32)   # fp32 subnormals -> X clamps at -127
    x[4, :32] = np.float32(1.9990234375) * np.sign(rng.standard_normal(32))  # saturating codes
    q = quantize(x, name, axis=-1)
    f = FORMATS[name]
    assert q.values.shape == x.shape and q.scales.shape == (5, 4) and q.scales.dtype == np.uint8
    for r in range(x.shape[0]):
        xs, vals = mx_reference([float(v) for v in x[r]], name)
        assert q.scale_exponents[r].tolist() == xs
        np.testing.assert_array_equal(element_values(q.values[r], f), np.float32(vals))
    # E8M0 codes decode to 2**X with ml_dtypes' own E8M0 type
    np.testing.assert_array_equal(q.scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float64),
                                  2.0 ** q.scale_exponents)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MX), st.integers(1, 70), st.integers(0, 2**32 - 1), st.integers(-60, 60))
def test_mx_quantize_property(name: str, k: int, seed: int, e: int) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((3, k)) * 2.0 ** e).astype(np.float32)
    q = quantize(x.T, name, axis=0)  # blocks along axis 0 of a (k, 3) tensor
    for c in range(3):
        xs, vals = mx_reference([float(v) for v in x[c]], name)
        assert q.scale_exponents[:, c].tolist() == xs
        expect = np.float64(vals) * 2.0 ** np.repeat(xs, MX_BLOCK)[:k]
        np.testing.assert_array_equal(dequantize(q)[:, c], expect.astype(np.float32))


def test_dequantize_is_exact_on_representable_values() -> None:
    x = np.float32([[0.5, -1.0, 3.0, 0.0, 448.0, -0.0625] * 6])
    for name in ["fp32", "bf16", "fp8-e4m3", "mxfp8", "mxfp8-e5m2"]:
        np.testing.assert_array_equal(dequantize(quantize(x, name)), x)
    ints = np.float32([[3, -7, 127, 0, -127, 64]])
    np.testing.assert_array_equal(dequantize(quantize(ints, "int8")), ints)


# ------------------------------------------------------------------------------ error bounds
def error_bound(name: str, x: np.ndarray, q: QTensor) -> np.ndarray:
    """Per-element bound on |dequantize(quantize(x)) - x| from RNE (u = 2**-24 for fp32 ops).

    Floats with m fraction bits and smallest normal exponent emin: half an ulp of v is at most
    2**-(m+1) * max(|v|, 2**emin). fp32-scaled (v = fl(x/s), deq = fl(code*s)): that times s,
    plus 3u|x| for the two fp32 roundings. int8, int16: s/2 plus the same fp32 slack
    (max_code * 2u * s: 127 or 32767).
    MX (scaling by 2**X exact): 2**X * max(half ulp, |v| - max_finite) -- the second term is the
    saturation error when |v| = |x| / 2**X in [max_finite, 2**(emax+1)).
    """
    f, u, ax = FORMATS[name], 2.0 ** -24, np.abs(x.astype(np.float64))
    if name == "fp32":
        return np.zeros_like(ax)
    if name == "bf16":
        return 2.0 ** -8 * ax
    if f.scaling == "fp32":
        s = q.scales.astype(np.float64)
        if f.kind == "int":
            return np.broadcast_to(s * (0.5 + 2 * f.max_code * u), ax.shape)
        return 2.0 ** -(f.mantissa_bits + 1) * np.maximum(ax, s * 2.0 ** f.emin) * (1 + 4 * u) \
            + 3 * u * ax
    scale = 2.0 ** q.block_exponents().astype(np.float64)
    v = ax / scale
    if f.kind == "int":
        half = np.full_like(v, 2.0 ** -7)
    else:
        half = 2.0 ** -(f.mantissa_bits + 1) * np.maximum(v, 2.0 ** f.emin)
    return scale * np.maximum(half, v - f.max_finite)


@pytest.mark.parametrize("name,granularity", [
    (f.name, g if f.scaling == "fp32" else None) for f in FORMATS.values()
    for g in (["tensor", "channel"] if f.scaling == "fp32" else [None])])
def test_quantization_error_on_normal_data_within_rne_bound(name: str, granularity: str | None
                                                            ) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    q = quantize(x, name, granularity=granularity)  # type: ignore[arg-type]
    err = np.abs(dequantize(q).astype(np.float64) - x)
    bound = error_bound(name, x, q)
    assert np.all(err <= bound), f"{name}: worst excess {np.max(err - bound)}"
    if name != "fp32":  # the bound is tight: the worst element uses a good part of it
        assert np.max(err / np.maximum(bound, 1e-300)) > 0.5
