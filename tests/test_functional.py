"""Functional model vs independent references: torch int64 for GEMMs, Python ints for requantize."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tilewright.compiler.program import VectorTask
from tilewright.dataflow_sim.functional import gemm_int8, run_program, run_vector


def torch_gemm_wrapped(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact int64 matmul in torch, reduced modulo 2**32 into [-2**31, 2**31)."""
    acc = torch.matmul(torch.from_numpy(a).to(torch.int64), torch.from_numpy(b).to(torch.int64))
    return (torch.remainder(acc + 2**31, 2**32) - 2**31).numpy()


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (4, 32, 64), (7, 13, 5), (16, 300, 9)])
def test_gemm_int8_random_matches_torch(m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m * 1000 + k + n)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    got = gemm_int8(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, torch_gemm_wrapped(a, b))


@pytest.mark.parametrize("k,va,vb", [
    (2**17, -128, -128),       # sum = 2**31 exactly: wraps to -2**31
    (2**17 + 3, -128, -128),   # just past the wrap
    (300_001, -128, 127),      # large negative, wraps upward
    (262_000, 127, 127),       # just below 2**32: wraps through both signs
])
def test_gemm_int8_extremes_wrap_like_int32(k: int, va: int, vb: int) -> None:
    a = np.full((2, k), va, np.int8)
    b = np.full((k, 3), vb, np.int8)
    expect = torch_gemm_wrapped(a, b)
    exact = k * va * vb  # python int, never overflows
    wrapped = (exact + 2**31) % 2**32 - 2**31
    assert (expect == wrapped).all()
    np.testing.assert_array_equal(gemm_int8(a, b), expect)


def test_gemm_int8_rejects_other_dtypes() -> None:
    with pytest.raises(TypeError, match="int8"):
        gemm_int8(np.zeros((2, 2), np.int16), np.zeros((2, 2), np.int8))


# ---- requantize ------------------------------------------------------------------------------
def py_requantize(acc: int, bias: int, mult: int, shift: int, relu: bool) -> int:
    """VECTOR_OPS['requantize'] with unbounded Python ints (>> floors, like an arithmetic shift)."""
    y = ((acc + bias) * mult + (1 << (shift - 1))) >> shift
    return max(0 if relu else -128, min(127, y))


def run_requantize(acc, bias, mult, shift, relu: bool) -> np.ndarray:
    task = VectorTask(name="rq", op="requantize", inputs=("a", "b", "m", "s"), out="y",
                      attrs={"relu": relu})
    env = {"a": np.asarray(acc, np.int32).reshape(1, -1), "b": np.asarray(bias, np.int32),
           "m": np.asarray(mult, np.int32), "s": np.asarray(shift, np.int32)}
    return run_vector(task, env)


I32_MIN, I32_MAX = -(2**31), 2**31 - 1
EDGE_CASES = [
    # (acc, bias, mult, shift): ties, shift extremes, saturation, int32 extremes
    (3, 0, 1 << 30, 31),               # 1.5 -> 2 (half up)
    (-3, 0, 1 << 30, 31),              # -1.5 -> -1 (half up, toward +inf)
    (-1, 0, 1 << 30, 31),              # -0.5 -> 0
    (1, 0, 1 << 30, 31),               # 0.5 -> 1
    (5, -2, 1, 1),                     # shift 1: 1.5 -> 2
    (-5, 2, 1, 1),                     # shift 1: -1.5 -> -1
    (12345, 678, 2**31 - 1, 63),       # largest shift
    (1000, 24, 2**31 - 1, 1),          # huge result -> 127
    (-1000, -24, 2**31 - 1, 1),        # -> -128 (or 0 with relu)
    (I32_MAX, I32_MAX, 2**31 - 1, 40),  # |acc + bias| ~ 2**32 with a large shift: no overflow
    (I32_MIN, I32_MIN, 2**31 - 1, 40),
    (I32_MAX, I32_MAX, 2**31 - 1, 63),
    (I32_MIN, I32_MIN, 2**31 - 1, 63),
    (I32_MAX, I32_MAX, 2**31 - 1, 1),
    (I32_MIN, 0, 1 << 30, 62),
    (0, 0, 2**31 - 1, 31),
]


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("acc,bias,mult,shift", EDGE_CASES)
def test_requantize_edge_cases_match_python_ints(acc, bias, mult, shift, relu) -> None:
    got = run_requantize([acc], [bias], [mult], [shift], relu)
    assert got.dtype == np.int8
    assert int(got[0, 0]) == py_requantize(acc, bias, mult, shift, relu)


def test_requantize_random_per_channel_matches_python_ints() -> None:
    rng = np.random.default_rng(7)
    n = 64
    acc = rng.integers(I32_MIN, I32_MAX, n, endpoint=True)
    acc[:16] = rng.integers(-50_000, 50_000, 16)  # the realistic range, where rounding matters
    bias = rng.integers(-(2**20), 2**20, n)
    mult = rng.integers(2**30, 2**31, n)
    shift = rng.integers(1, 64, n)
    shift[:16] = rng.integers(30, 45, 16)
    for relu in (False, True):
        got = run_requantize(acc, bias, mult, shift, relu)[0]
        expect = [py_requantize(int(a), int(b), int(m), int(s), relu)
                  for a, b, m, s in zip(acc, bias, mult, shift)]
        np.testing.assert_array_equal(got, np.array(expect, np.int8))


def test_requantize_rejects_shift_out_of_range() -> None:
    with pytest.raises(ValueError, match="shift"):
        run_requantize([1], [0], [1 << 30], [0], False)


# ---- data movement ops -----------------------------------------------------------------------
def test_slice_and_concat_round_trip() -> None:
    x = np.arange(7 * 10, dtype=np.int32).reshape(7, 10) - 35
    env = {"x": x}
    parts = []
    for axis, bounds in ((1, [(0, 4), (4, 8), (8, 10)]), (0, [(0, 3), (3, 7)])):
        names = []
        for start, stop in bounds:
            t = VectorTask(name=f"s{axis}{start}", op="slice", inputs=("x",), out=f"s{axis}{start}",
                           attrs={"axis": axis, "start": start, "stop": stop})
            env[t.out] = run_vector(t, env)
            expect = x[start:stop] if axis == 0 else x[:, start:stop]
            np.testing.assert_array_equal(env[t.out], expect)
            names.append(t.out)
        cat = VectorTask(name=f"c{axis}", op="concat", inputs=tuple(names), out=f"c{axis}",
                         attrs={"axis": axis})
        parts.append(run_vector(cat, env))
    for p in parts:
        assert p.dtype == np.int32
        np.testing.assert_array_equal(p, x)


def test_concat_rejects_mixed_formats() -> None:
    t = VectorTask(name="c", op="concat", inputs=("a", "b"), out="c", attrs={"axis": 0})
    with pytest.raises(ValueError, match="mixed"):
        run_vector(t, {"a": np.zeros((1, 2), np.int8), "b": np.zeros((1, 2), np.int32)})


def test_run_program_reports_missing_inputs() -> None:
    from tilewright.compiler.program import Program

    prog = Program(name="p", arch_hash="0", tensors={}, inputs=["x"], outputs=[], tasks=[])
    with pytest.raises(ValueError, match="missing inputs"):
        run_program(prog, {})

