"""Exact GEMM arithmetic per format vs independent references: a pure-Python scalar loop that
follows the documented order (bit-exact), torch float64 matmuls within a derived rounding bound,
exact integer results, and gemm_int8's wrapping."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from tilewright.dataflow_sim.functional import gemm_int8
from tilewright.dataflow_sim.numerics import gemm
from tilewright.formats import FORMATS, MX_BLOCK, QTensor, element_values, quantize

MX = ["mxint8", "mxfp8", "mxfp8-e5m2"]


def f32(x: float) -> float:
    """Round a Python float (double) to the nearest fp32, ties to even (C's double->float).
    Double rounding is harmless here: a sum or product of two fp32 values is exact in double,
    or (sums far apart in exponent) within a double ulp that cannot change the fp32 result."""
    return struct.unpack("f", struct.pack("f", x))[0]


def scales_1d(q: QTensor, n: int) -> list[float]:
    """Per-row (a) or per-column (b) fp32 scales as Python floats; 1.0 when unscaled."""
    if q.scales is None:
        return [1.0] * n
    return np.broadcast_to(q.scales.ravel(), (n,)).astype(np.float64).tolist()


def scalar_gemm(qa: QTensor, qb: QTensor, k_block: int, acc: str) -> np.ndarray:
    """The module docstring's rules, one output at a time, in plain Python."""
    f = qa.fmt
    (m, k), n = qa.shape, qb.shape[1]
    av = element_values(qa.values, f).astype(np.float64).tolist()
    bv = element_values(qb.values, f).astype(np.float64).tolist()
    out = np.zeros((m, n), np.int32 if acc == "int32" and qa.scales is None else np.float32)
    if f.scaling == "e8m0":
        xa, xb = qa.scale_exponents.tolist(), qb.scale_exponents.tolist()
        ca, cb = qa.values.astype(int).tolist(), qb.values.astype(int).tolist()
        for i in range(m):
            for j in range(n):
                total = 0.0
                for blk, k0 in enumerate(range(0, k, MX_BLOCK)):
                    ks = range(k0, min(k, k0 + MX_BLOCK))
                    if f.kind == "int":  # exact integer dot of codes, value = code * 2**-6
                        d = sum(ca[i][kk] * cb[kk][j] for kk in ks)
                        scaled = f32(d * 2.0 ** (xa[i][blk] + xb[blk][j] - 12))
                    else:
                        p = 0.0
                        for kk in ks:
                            p = f32(p + f32(av[i][kk] * bv[kk][j]))
                        scaled = f32(p * 2.0 ** (xa[i][blk] + xb[blk][j]))
                    total = f32(total + scaled)
                out[i, j] = total
        return out
    sa, sb = scales_1d(qa, m), scales_1d(qb, n)
    for i in range(m):
        for j in range(n):
            if acc == "int32":
                s = sum(int(qa.values[i, kk]) * int(qb.values[kk, j]) for kk in range(k))
                total = (s + 2**31) % 2**32 - 2**31
                if qa.scales is None and qb.scales is None:
                    out[i, j] = total
                    continue
                total = f32(float(total))
            else:
                total = 0.0
                for t0 in range(0, k, k_block):
                    p = 0.0
                    for kk in range(t0, min(k, t0 + k_block)):
                        p = f32(p + f32(av[i][kk] * bv[kk][j]))
                    total = f32(total + p)
            out[i, j] = f32(total * f32(sa[i] * sb[j]))
    return out


def assert_bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.dtype.itemsize}"),
                                  want.view(f"u{want.dtype.itemsize}"))


def wide_data(rng: np.random.Generator, shape: tuple[int, ...], spread: int = 12) -> np.ndarray:
    """N(0,1) times 2**U{-spread..spread}: magnitudes far apart, so summation order matters."""
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(-spread, spread + 1, shape)
            ).astype(np.float32)


def operands(name: str, a: np.ndarray, b: np.ndarray, ga: str, gb: str) -> tuple[QTensor, QTensor]:
    scaled = FORMATS[name].scaling == "fp32"
    return (quantize(a, name, axis=1, granularity=ga if scaled else None),  # type: ignore[arg-type]
            quantize(b, name, axis=0, granularity=gb if scaled else None))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ bit-exact order
@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(FORMATS)), st.integers(1, 3), st.integers(1, 80), st.integers(1, 3),
       st.integers(1, 40), st.sampled_from(["tensor", "channel"]),
       st.sampled_from(["tensor", "channel"]), st.integers(0, 2**32 - 1))
def test_gemm_equals_scalar_loop_bit_exact(name: str, m: int, k: int, n: int, kb: int, ga: str,
                                           gb: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    if name in MX:
        kb = MX_BLOCK * (1 + kb % 2)
    qa, qb = operands(name, wide_data(rng, (m, k)), wide_data(rng, (k, n)), ga, gb)
    accs = ["int32", "fp32"] if name == "int8" else ["fp32"]
    for acc in accs:
        assert_bits_equal(gemm(qa, qb, name, acc=acc, k_block=kb),  # type: ignore[arg-type]
                          scalar_gemm(qa, qb, kb, acc))


@pytest.mark.parametrize("name,big_a,big_b,small", [
    ("fp32", 1.0, 1.0, 2.0 ** -13), ("bf16", 1.0, 1.0, 2.0 ** -13),
    ("fp8-e4m3", 16.0, 8.0, 2.0 ** -9)])
def test_order_is_modelled_tiles_change_the_result(name: str, big_a: float, big_b: float,
                                                   small: float) -> None:
    """One big product then 255 small ones, each a quarter ulp of the big one: in one long tile
    every small product is absorbed (RNE), in tiles of 8 they first sum to 2 ulps and count."""
    f = FORMATS[name]
    a = np.full((1, 256), small, np.float32)
    b = np.full((256, 1), small, np.float32)
    a[0, 0], b[0, 0] = big_a, big_b
    qa, qb = QTensor(name, a.astype(f.dtype), None, 1, "none"), QTensor(name, b.astype(f.dtype),
                                                                        None, 0, "none")
    outs = {kb: gemm(qa, qb, name, k_block=kb) for kb in [1, 8, 256]}
    for kb, out in outs.items():
        assert_bits_equal(out, scalar_gemm(qa, qb, kb, "fp32"))
    assert outs[256][0, 0] == outs[1][0, 0] == big_a * big_b
    assert outs[8][0, 0] == big_a * big_b + 31 * 8 * small * small


@pytest.mark.parametrize("name", MX)
def test_mx_result_does_not_depend_on_k_block(name: str) -> None:
    rng = np.random.default_rng(6)
    qa, qb = operands(name, wide_data(rng, (3, 200)), wide_data(rng, (200, 4)), "", "")
    outs = [gemm(qa, qb, name, k_block=kb) for kb in [32, 64, 224]]
    assert_bits_equal(outs[0], scalar_gemm(qa, qb, 32, "fp32"))
    assert all(np.array_equal(outs[0], o) for o in outs)


def test_padding_of_last_tile_and_k_smaller_than_tile() -> None:
    rng = np.random.default_rng(7)
    cases = [("bf16", 5, 128), ("fp8-e5m2", 67, 16), ("mxfp8", 33, 64), ("mxint8", 1, 32)]
    for name, k, kb in cases:
        qa, qb = operands(name, wide_data(rng, (4, k)), wide_data(rng, (k, 3)), "tensor", "channel")
        assert_bits_equal(gemm(qa, qb, name, k_block=kb), scalar_gemm(qa, qb, kb, "fp32"))


# ------------------------------------------------------------------------------ vs torch float64
def rounding_bound(name: str, k: int, k_block: int) -> float:
    """gamma_n = n u / (1 - n u), u = 2**-24, with n the most fp32 roundings any one product
    goes through: (tile length - 1) psum adds + (tiles - 1) accumulator adds + 2 for the scale
    product and the final multiply + 1 for an fp32 product (products of bf16/fp8/int elements
    are exact). MX: <= 31 adds in a block, exact power-of-two scaling, (blocks - 1) adds.
    Then |gemm - exact| <= gamma_n * sum_k |a_k| |b_k| (dequantized), and gamma_n < K * 2**-24
    only needs n < K, i.e. this is tighter than the classic K * u bound."""
    tile = MX_BLOCK if name in MX else k_block
    n = tile + math.ceil(k / tile) + 1
    u = 2.0 ** -24
    return n * u / (1 - n * u)


def dequant64(q: QTensor) -> torch.Tensor:
    """Exact float64 dequantization: element value * scale (or * 2**X)."""
    v = torch.from_numpy(element_values(q.values, q.fmt).astype(np.float64))
    if q.granularity == "block":
        return v * torch.from_numpy(2.0 ** q.block_exponents().astype(np.float64))
    return v if q.scales is None else v * torch.from_numpy(q.scales.astype(np.float64))


@pytest.mark.parametrize("k_block", [16, 128])
@pytest.mark.parametrize("name,granularity", [
    (f.name, g) for f in FORMATS.values()
    for g in (["tensor", "channel"] if f.scaling == "fp32" else ["tensor"])])
def test_fp32_accumulated_gemm_within_bound_of_torch_float64(name: str, granularity: str,
                                                             k_block: int) -> None:
    rng = np.random.default_rng(8)
    m, k, n = 33, 300, 17
    qa, qb = operands(name, rng.standard_normal((m, k)).astype(np.float32),
                      rng.standard_normal((k, n)).astype(np.float32), granularity, granularity)
    da, db = dequant64(qa), dequant64(qb)
    ref = (da @ db).numpy()
    mag = (da.abs() @ db.abs()).numpy()
    out = gemm(qa, qb, name, acc="fp32", k_block=128 if name in MX else k_block)
    err = np.abs(out.astype(np.float64) - ref)
    bound = rounding_bound(name, k, 128 if name in MX else k_block) * mag
    assert np.all(err <= bound * (1 + 1e-9)), f"worst excess {np.max(err - bound)}"
    if name == "fp32":  # docs/design.md: fp32 path <= 1e-5 relative to torch's fp32 result
        t = (torch.from_numpy(qa.values) @ torch.from_numpy(qb.values)).numpy()
        assert np.linalg.norm(out - t) <= 1e-5 * np.linalg.norm(t)


# ------------------------------------------------------------------------------ exact cases
@pytest.mark.parametrize("name", list(FORMATS))
def test_small_integers_are_exact(name: str) -> None:
    rng = np.random.default_rng(9)
    ai = rng.integers(-4, 5, (9, 200))
    bi = rng.integers(-4, 5, (200, 7))
    exact = (ai @ bi).astype(np.float32)
    if name == "int8":  # amax 127 makes every per-tensor scale exactly 1
        ai[0, 0] = bi[0, 0] = 127
        exact = (ai @ bi).astype(np.float32)
    f = FORMATS[name]
    if f.scaling == "e8m0":
        a, b = ai.astype(np.float32), bi.astype(np.float32)
    else:  # raw element codes, scale 1
        a, b = ai.astype(f.dtype), bi.astype(f.dtype)
    for kb in ([32, 64] if name in MX else [1, 8, 200]):
        out = gemm(a, b, name, acc="fp32", k_block=kb)
        np.testing.assert_array_equal(out, exact)
    if name == "int8":
        q = gemm(ai.astype(np.float32), bi.astype(np.float32), name, k_block=8)  # quantized here
        np.testing.assert_array_equal(q, exact)


def test_int8_int32_accumulator_is_gemm_int8_and_wraps() -> None:
    rng = np.random.default_rng(10)
    a = rng.integers(-128, 128, (6, 50), dtype=np.int8)
    b = rng.integers(-128, 128, (50, 5), dtype=np.int8)
    out = gemm(a, b, "int8", k_block=16)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, gemm_int8(a, b))
    k = 2**17 + 3  # -128 * -128 * k > 2**31: wraps like two's complement int32
    a, b = np.full((1, k), -128, np.int8), np.full((k, 2), -128, np.int8)
    want = (k * 2**14 + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(gemm(a, b, "int8", acc="int32", k_block=128), [[want, want]])


def test_int8_scaled_int32_path_applies_scales_after_accumulation() -> None:
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((5, 40)).astype(np.float32), rng.standard_normal((40, 6))
    qa = quantize(x, "int8", axis=1, granularity="channel")
    qb = quantize(w, "int8", axis=0, granularity="channel")
    acc = torch.from_numpy(qa.values).long() @ torch.from_numpy(qb.values).long()
    s = torch.from_numpy(qa.scales) * torch.from_numpy(qb.scales)  # (5,1)*(1,6) in fp32
    want = (acc.float() * s).numpy()
    assert_bits_equal(gemm(qa, qb, "int8", k_block=8), want)


# ------------------------------------------------------------------------------ validation
def test_gemm_validates_arguments() -> None:
    a, b = np.ones((2, 64), np.float32), np.ones((64, 3), np.float32)
    with pytest.raises(ValueError, match="cannot accumulate in int32"):
        gemm(a, b, "fp8-e4m3", acc="int32", k_block=8)
    with pytest.raises(ValueError, match="cannot accumulate in int32"):
        gemm(a, b, "mxint8", acc="int32", k_block=32)
    with pytest.raises(ValueError, match="accumulator"):
        gemm(a, b, "bf16", acc="fp16", k_block=8)  # type: ignore[arg-type]
    for bad in [0, -1, True, 2.0]:
        with pytest.raises(ValueError, match="k_block"):
            gemm(a, b, "bf16", k_block=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="multiple of the MX block"):
        gemm(a, b, "mxfp8", k_block=48)
    with pytest.raises(ValueError, match="is bf16, GEMM format is int8"):
        gemm(quantize(a, "bf16"), b, "int8", k_block=8)
    with pytest.raises(ValueError, match="reduction axis 1"):
        gemm(quantize(a, "mxfp8", axis=0), b, "mxfp8", k_block=32)
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm(a, b[:5], "fp32", k_block=8)
    with pytest.raises(ValueError, match="2-D"):
        gemm(a[None], b, "fp32", k_block=8)
    with pytest.raises(TypeError, match="QTensor or np.ndarray"):
        gemm(a.tolist(), b, "fp32", k_block=8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown number format"):
        gemm(a, b, "fp4", k_block=8)
