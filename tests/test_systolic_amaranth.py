"""Amaranth-level unit tests of the PE arrays (Amaranth's own simulator, small sizes).

Each array's documented timing contract is checked cycle by cycle against numpy: WS results leave
exactly rows + cols - 1 cycles after their activation row enters; OS drains bottom row first.
Constructor arguments are validated with precise errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.pysim_harness import simulate, ws_stream
from tilewright.rtl.systolic import (OutputStationaryArray, WeightStationaryArray,
                                     os_finish_cycles, ws_latency_cycles)


@pytest.mark.parametrize("R,C", [(2, 3), (3, 1), (1, 4)])
def test_ws_array_timing_and_values(R, C):
    rng = np.random.default_rng(R * 10 + C)
    M = 5
    A = rng.integers(-128, 128, (M, R))
    B = rng.integers(-128, 128, (R, C))
    A[0, :], B[:, 0] = -128, -128                      # extreme corner
    dut = WeightStationaryArray(rows=R, cols=C)
    seen = ws_stream(dut, A, B, M + R + C + 2)
    assert [s[0] for s in seen] == [m + ws_latency_cycles(R, C) for m in range(M)]
    np.testing.assert_array_equal(np.array([s[1] for s in seen]), A @ B)


@pytest.mark.parametrize("R,C", [(3, 2), (1, 1), (2, 4)])
def test_os_array_captures_on_first_and_drains_bottom_first(R, C):
    """Two tiles back to back: tile 1's `first` row captures tile 0 (drained while tile 1 is
    still accumulating); a flush row (first, not valid) captures tile 1."""
    rng = np.random.default_rng(R + C)
    K = 6
    As = [rng.integers(-128, 128, (R, K)), rng.integers(-128, 128, (R, K))]
    B = rng.integers(-128, 128, (K, C))
    dut = OutputStationaryArray(rows=R, cols=C)
    rows_out = []

    async def drain(ctx):
        got = []
        ctx.set(dut.drain, 1)
        for _ in range(R):
            assert ctx.get(dut.c_out.valid)
            got.append([ctx.get(dut.c_out.payload[j]) for j in range(C)])
            await ctx.tick()
        ctx.set(dut.drain, 0)
        rows_out.append(got[::-1])

    async def row(ctx, valid, first, k=0, tile=0):
        ctx.set(dut.ab_in.valid, valid)
        ctx.set(dut.ab_in.payload.first, first)
        for i in range(R):
            ctx.set(dut.ab_in.payload.a[i], int(As[tile][i, k]) if valid else 0)
        for j in range(C):
            ctx.set(dut.ab_in.payload.b[j], int(B[k, j]) if valid else 0)
        await ctx.tick()

    async def bench(ctx):
        for k in range(K):
            await row(ctx, 1, int(k == 0), k, 0)
        await row(ctx, 1, 1, 0, 1)                   # tile 1 starts: captures tile 0
        waited = 1
        for k in range(1, K):
            await row(ctx, 1, 0, k, 1)
            waited += 1
        await row(ctx, 0, 0)
        waited += 1
        for _ in range(os_finish_cycles(R, C) - waited):
            await ctx.tick()
        await drain(ctx)                              # tile 0
        await row(ctx, 0, 1)                          # flush: captures tile 1
        ctx.set(dut.ab_in.payload.first, 0)
        for _ in range(os_finish_cycles(R, C) - 1):
            await ctx.tick()
        await drain(ctx)                              # tile 1

    simulate(dut, bench)
    np.testing.assert_array_equal(np.array(rows_out[0]), As[0] @ B)
    np.testing.assert_array_equal(np.array(rows_out[1]), As[1] @ B)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("cls", [WeightStationaryArray, OutputStationaryArray])
def test_constructor_validation(cls):
    with pytest.raises(ValueError, match="rows must be from 1 to 64, not 0"):
        cls(rows=0, cols=2)
    with pytest.raises(ValueError, match="cols must be from 1 to 64, not 65"):
        cls(rows=2, cols=65)
    with pytest.raises(TypeError, match="rows must be an int"):
        cls(rows=2.0, cols=2)
    with pytest.raises(TypeError):
        cls(2, 2)                                       # keyword-only
