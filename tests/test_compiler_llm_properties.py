"""Property-based tests (hypothesis): tiled functional execution == numpy, over random GEMM and
attention shapes and random array/buffer sizes.

* int8 GEMMs split by the mapper's ``plan_gemm`` and run tile by tile with ``gemm_int8``: exactly
  equal to numpy's int64 matmul wrapped to int32.
* fp32 ``bgemm`` run with the tiles of ``plan_gemm_tiles``: within fp32 rounding of numpy's float64
  matmul (bound: 8 * K * eps32 * sum|a||b|, the standard dot-product error bound, with margin),
  and the tiles respect the buffer capacities.
* the attention cascade with random blocks and causal offsets == numpy softmax attention in
  float64 within 1e-5 relative; the chunked scan == a plain float64 loop.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tilewright.arch import ArchSpec
from tilewright.compiler.lower_mlp import plan_gemm
from tilewright.compiler.llm_tiling import plan_gemm_tiles
from tilewright.dataflow_sim.functional import (attention_fp32, bgemm_fp32, gemm_int8, scan_fp32,
                                                wrap_int32)

SETTINGS = settings(max_examples=25, deadline=None)


@st.composite
def archs(draw) -> ArchSpec:
    return ArchSpec.from_dict({"name": "h", "tensor_engine": {
        "rows": draw(st.sampled_from([2, 4, 8, 16])), "cols": draw(st.sampled_from([2, 4, 8, 16])),
        "dataflow": draw(st.sampled_from(["ws", "os"]))},
        "memory": {"scratchpad_kib": draw(st.integers(1, 8)),
                   "accumulator_kib": draw(st.integers(1, 4))}})


@SETTINGS
@given(arch=archs(), m=st.integers(1, 40), k=st.integers(1, 60), n=st.integers(1, 40),
       seed=st.integers(0, 2**16))
def test_int8_tiled_gemm_equals_numpy(arch, m, k, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    try:
        tm, tn = plan_gemm(arch, m, k, n)
    except ValueError:                                       # K does not fit: nothing to run
        return
    out = np.empty((m, n), np.int32)
    for m0 in range(0, m, tm):
        for n0 in range(0, n, tn):
            out[m0:m0 + tm, n0:n0 + tn] = gemm_int8(a[m0:m0 + tm], b[:, n0:n0 + tn])
    np.testing.assert_array_equal(out, wrap_int32(a.astype(np.int64) @ b.astype(np.int64)))


@SETTINGS
@given(arch=archs(), batch=st.integers(1, 3), m=st.integers(1, 33), k=st.integers(1, 70),
       n=st.integers(1, 33), seed=st.integers(0, 2**16))
def test_fp32_tiled_bgemm_equals_numpy(arch, batch, m, k, n, seed):
    try:
        tm, tn, tk = plan_gemm_tiles(arch, m, k, n, 4)
    except ValueError:
        return
    sp, acc = arch.memory.scratchpad_bytes // 2, arch.memory.accumulator_bytes
    assert tk * tn * 4 <= sp and tm * tk * 4 <= sp and tm * tn * 4 <= acc
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    got = bgemm_fp32(a, b, tile_m=tm, tile_n=tn, tile_k=tk)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = 8 * k * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30
    assert (np.abs(got - ref) <= bound).all()


def naive_attention(q, k, v, scale, offset):
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * scale
    if offset is not None:
        i = np.arange(q.shape[-2])[:, None]
        j = np.arange(k.shape[-2])[None, :]
        s = np.where(j > i + offset, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


@SETTINGS
@given(heads=st.integers(1, 3), s=st.integers(1, 40), extra=st.integers(0, 40),
       d=st.sampled_from([1, 4, 16, 32]), bq=st.integers(1, 48), bk=st.integers(1, 48),
       causal=st.booleans(), seed=st.integers(0, 2**16))
def test_attention_cascade_equals_numpy(heads, s, extra, d, bq, bk, causal, seed):
    t = s + extra                                      # decode-like: queries are the last s keys
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((heads, s, d)).astype(np.float32)
    k = rng.standard_normal((heads, t, d)).astype(np.float32)
    v = rng.standard_normal((heads, t, d)).astype(np.float32)
    offset = extra if causal else None
    got = attention_fp32(q, k, v, scale=d ** -0.5, causal_offset=offset, block_q=bq, block_kv=bk)
    ref = naive_attention(q, k, v, d ** -0.5, offset)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@SETTINGS
@given(bt=st.integers(1, 2), length=st.integers(1, 20), di=st.integers(1, 12),
       n=st.integers(1, 6), cl=st.integers(1, 8), cd=st.integers(1, 12), seed=st.integers(0, 999))
def test_chunked_scan_equals_loop(bt, length, di, n, cl, cd, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 1.0, (bt, length, di, n)).astype(np.float32)
    b = rng.standard_normal((bt, length, di, n)).astype(np.float32)
    c = rng.standard_normal((bt, length, n)).astype(np.float32)
    h0 = rng.standard_normal((bt, di, n)).astype(np.float32)
    y, h = scan_fp32(a, b, c, h0, chunk_l=cl, chunk_d=cd)
    hr = h0.astype(np.float64)
    for t in range(length):
        hr = a[:, t] * hr + b[:, t]
        yr = (hr * c[:, t, None, :]).sum(-1)
        np.testing.assert_allclose(y[:, t], yr, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, hr, rtol=1e-5, atol=1e-5)
