"""Buffer layouts: the vectorized packers against the docstring's address formulas, written as loops."""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import default_arch
from tilewright.compiler.layout import DoesNotFit, GemmLayout, pack_lanes, unpack_lanes


def _get(mat, i, j):
    return int(mat[i, j]) if i < mat.shape[0] and j < mat.shape[1] else 0


@pytest.mark.parametrize("dataflow", ["ws", "os"])
@pytest.mark.parametrize("R,C,m,k,n", [(3, 5, 7, 11, 13), (4, 4, 4, 4, 4), (1, 2, 3, 1, 5)])
def test_layouts_follow_the_documented_addresses(dataflow, R, C, m, k, n):
    rng = np.random.default_rng(0)
    A = rng.integers(-128, 128, (m, k), dtype=np.int8)
    B = rng.integers(-128, 128, (k, n), dtype=np.int8)
    lay = GemmLayout(R, C, dataflow, m, k, n)
    a, b = lay.a_lanes(A), lay.b_lanes(B)
    assert a.shape == (lay.a_words, R) and b.shape == (lay.b_words, C)
    if dataflow == "ws":
        for kb in range(lay.kb):
            for mm in range(m):
                assert [int(v) for v in a[kb * m + mm]] == [_get(A, mm, kb * R + i) for i in range(R)]
        for nb in range(lay.nb):
            for kb in range(lay.kb):
                for r in range(R):
                    row = b[(nb * lay.kb + kb) * R + r]
                    assert [int(v) for v in row] == [_get(B, kb * R + r, nb * C + i) for i in range(C)]
    else:
        for mb in range(lay.mb):
            for kk in range(k):
                assert [int(v) for v in a[mb * k + kk]] == [_get(A, mb * R + i, kk) for i in range(R)]
        for nb in range(lay.nb):
            for kk in range(k):
                assert [int(v) for v in b[nb * k + kk]] == [_get(B, kk, nb * C + i) for i in range(C)]
    # accumulator: build the buffer from the documented address formula, then unpack
    Cm = rng.integers(-2**31, 2**31, (m, n)).astype(np.int32)
    acc = np.zeros((lay.acc_words, C), np.int64)
    for mm in range(m):
        for nn in range(n):
            nb, c = divmod(nn, C)
            if dataflow == "ws":
                acc[nb * m + mm, c] = Cm[mm, nn]
            else:
                mb, r = divmod(mm, R)
                acc[nb * lay.mb * R + mb * R + r, c] = Cm[mm, nn]
    np.testing.assert_array_equal(lay.c_from_lanes(acc), Cm)


def test_pack_unpack_round_trip_signed_lanes():
    lanes = np.array([[-128, 127, 0, -1], [1, -2, 3, -4]], np.int64)
    words = pack_lanes(lanes, 8)
    assert words[0] == (0x80 | 0x7F << 8 | 0x00 << 16 | 0xFF << 24)
    np.testing.assert_array_equal(unpack_lanes(words, 4, 8), lanes)
    big = np.array([[-2**31, 2**31 - 1]], np.int64)
    np.testing.assert_array_equal(unpack_lanes(pack_lanes(big, 32), 2, 32), big)


def test_does_not_fit_names_buffer_and_sizes():
    arch = default_arch()           # 64 KiB scratchpad: A buffer 4096 words of 8 lanes
    GemmLayout.for_arch(arch, 256, 64, 64).check_fits(arch)   # A 2048, acc 2048 words
    with pytest.raises(DoesNotFit, match=r"A buffer needs 8200 words, has 4096.*scratchpad_kib=64"):
        GemmLayout.for_arch(arch, 1025, 64, 8).check_fits(arch)
    with pytest.raises(DoesNotFit, match="GEMM M=0"):
        GemmLayout.for_arch(arch, 0, 8, 8).check_fits(arch)
