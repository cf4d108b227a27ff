"""The tile-MAC tensor-engine families (issue 4): multiplier-adder tree, 2-D outer product, cube.

References are independent of the RTL: results against numpy's exact int64 GEMM wrapped to int32
(:func:`tilewright.dataflow_sim.functional.gemm_int8`), cycles against the closed forms of
:mod:`tilewright.compiler.engine_timing` (themselves checked against hand-computed numbers here).
Each family gets one small Verilator build (tree N=8, outer 4x4, cube 2x4x2) and one simulator
run holding random GEMMs with ragged shapes (zero-padding), a K that is an exact multiple, a 1x1x1
GEMM, and long-K corner cases (all -128 / all 127) whose sums wrap int32. Amaranth's own simulator
covers what the Verilator runs do not: an odd-width adder tree (N=5, pass-through levels) and a
cube (2x3x2) fed with idle cycles between beats.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator

from tilewright.compiler.engine_timing import (engine_gemm_beats, engine_gemm_cycles,
                                               engine_latency_cycles,
                                               engine_peak_macs_per_cycle, engine_tile_shape,
                                               engine_utilization)
from tilewright.cosim.engine_jobs import gemm_beats, unpack_tiles
from tilewright.dataflow_sim.functional import gemm_int8
from tilewright.rtl.adder_tree import AdderTreeEngine
from tilewright.rtl.cube import CubeEngine
from tilewright.rtl.engine_top import engine_shape, make_engine
from tilewright.rtl.outer_product import OuterProductEngine

ENGINES = [("adder_tree", {"n": 8}), ("outer_product", {"rows": 4, "cols": 4}),
           ("cube", {"tm": 2, "tk": 4, "tn": 2})]

#: K long enough that 127·127·K, -128·-128·K and 127·-128·K all leave the int32 range
LONG_K = 135_000


def _rand(rng, *shape) -> np.ndarray:
    return rng.integers(-128, 128, shape, dtype=np.int8)


# ---- closed forms against hand-computed numbers --------------------------------------------------
def test_closed_forms_hand_computed():
    # adder tree N=8, 5x19x3: 5·3 outputs x ceil(19/8)=3 beats = 45; latency 2 + log2 8 = 5
    assert engine_gemm_cycles("adder_tree", {"n": 8}, 5, 19, 3) == 50
    # outer 4x4, 5x19x3: ceil(5/4)·ceil(3/4)=2 tiles x 19 beats = 38; latency 2 (no tree)
    assert engine_gemm_cycles("outer_product", {"rows": 4, "cols": 4}, 5, 19, 3) == 40
    # cube 2x4x2, 5x19x3: 3·2 tiles x 5 beats = 30; latency 2 + 2
    assert engine_gemm_cycles("cube", {"tm": 2, "tk": 4, "tn": 2}, 5, 19, 3) == 34
    # odd tree: N=5 -> 3 levels
    assert engine_latency_cycles("adder_tree", {"n": 5}) == 5
    assert engine_peak_macs_per_cycle("cube", {"tm": 2, "tk": 4, "tn": 2}) == 16
    # a perfectly shaped large GEMM approaches full utilization: 64^3 / ((64·64·64/16 + 4)·16)
    u = engine_utilization("cube", {"tm": 2, "tk": 4, "tn": 2}, 64, 64, 64)
    assert u == pytest.approx(16384 / 16388)
    np.testing.assert_array_equal(
        engine_gemm_beats("adder_tree", {"n": 4}, np.array([1, 4]), np.array([4, 9]), 2),
        [1 * 2 * 1, 4 * 2 * 3])


def test_validation_errors_name_the_field():
    with pytest.raises(ValueError, match="n must be from 1 to 64, not 0"):
        AdderTreeEngine(n=0)
    with pytest.raises(TypeError, match="cols must be an int"):
        OuterProductEngine(rows=4, cols=4.0)
    with pytest.raises(ValueError, match="tk must be from 1 to 64, not 65"):
        CubeEngine(tm=1, tk=65, tn=1)
    with pytest.raises(ValueError, match="engine kind 'systolic': accepted: adder_tree"):
        make_engine("systolic", {"rows": 2})
    with pytest.raises(ValueError, match="accepted exactly rows, cols"):
        engine_shape("outer_product", {"n": 4})
    with pytest.raises(ValueError, match="engine kind 'tree'"):
        engine_tile_shape("tree", {"n": 4})
    with pytest.raises(ValueError, match="k = 0: must be >= 1"):
        engine_gemm_cycles("adder_tree", {"n": 4}, 1, 0, 1)
    with pytest.raises(ValueError, match="A dtype int16: accepted: int8"):
        gemm_beats((1, 4, 1), np.zeros((2, 3), np.int16), np.zeros((3, 2), np.int8))
    with pytest.raises(ValueError, match="A must be M x K and B K x N"):
        gemm_beats((1, 4, 1), np.zeros((2, 3), np.int8), np.zeros((4, 2), np.int8))


def test_tile_shapes_agree_between_rtl_and_compiler():
    for kind, params in ENGINES + [("adder_tree", {"n": 5})]:
        assert engine_shape(kind, params) == engine_tile_shape(kind, params)
        assert make_engine(kind, params).latency == engine_latency_cycles(kind, params)


# ---- Amaranth simulator: odd widths and input gaps ----------------------------------------------
def _pysim(dut, stream: list[int | None], cycles: int) -> list[tuple[int, int]]:
    """Drive ``stream`` (a payload or None = valid low, per cycle); return (cycle, c_out) pairs."""
    seen: list[tuple[int, int]] = []

    async def bench(ctx):
        for cycle in range(cycles):
            word = stream[cycle] if cycle < len(stream) else None
            ctx.set(dut.ops_in.valid, int(word is not None))
            if word is not None:
                ctx.set(dut.ops_in.payload.as_value(), word)
            if ctx.get(dut.c_out.valid):
                seen.append((cycle, ctx.get(dut.c_out.payload.as_value())))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen


def test_amaranth_sim_odd_adder_tree_bit_exact_and_timed():
    rng = np.random.default_rng(5)
    a, b = _rand(rng, 3, 12), _rand(rng, 12, 2)
    a[0], b[:, 0] = -128, -128
    dut = AdderTreeEngine(n=5)
    total = engine_gemm_cycles("adder_tree", {"n": 5}, 3, 12, 2)
    seen = _pysim(dut, gemm_beats(dut.dims, a, b), total + 3)
    np.testing.assert_array_equal(unpack_tiles(dut.dims, [w for _, w in seen], 3, 2),
                                  gemm_int8(a, b))
    kt = 3                                              # ceil(12/5) beats per output
    assert [c for c, _ in seen] == [(i + 1) * kt - 1 + dut.latency for i in range(6)]
    assert seen[-1][0] + 1 == total


def test_amaranth_sim_cube_with_input_gaps():
    rng = np.random.default_rng(6)
    a, b = _rand(rng, 3, 7), _rand(rng, 7, 5)
    dut = CubeEngine(tm=2, tk=3, tn=2)
    beats = gemm_beats(dut.dims, a, b)
    stream: list[int | None] = []
    last_cycle = []                                     # cycle of each tile's last beat
    for i, w in enumerate(beats):
        stream += [None] * (i % 3) + [w]                # 0, 1 or 2 idle cycles before each beat
        if i % 3 == 2:                                  # kt = ceil(7/3) = 3 beats per tile
            last_cycle.append(len(stream) - 1)
    seen = _pysim(dut, stream, len(stream) + dut.latency + 3)
    np.testing.assert_array_equal(unpack_tiles(dut.dims, [w for _, w in seen], 3, 5),
                                  gemm_int8(a, b))
    assert [c for c, _ in seen] == [c + engine_latency_cycles("cube", {"tm": 2, "tk": 3,
                                                                       "tn": 2})
                                    for c in last_cycle]


# ---- Verilator + cocotb: one build and one simulator run per family ------------------------------
def _gemm_set(rng) -> list[tuple[np.ndarray, np.ndarray]]:
    shapes = [(5, 19, 3), (7, 8, 9), (4, 16, 4), (1, 1, 1), (3, 33, 6)]
    gemms = [(_rand(rng, m, k), _rand(rng, k, n)) for m, k, n in shapes]
    a = np.empty((2, LONG_K), np.int8)
    a[0], a[1] = -128, 127
    b = np.empty((LONG_K, 2), np.int8)
    b[:, 0], b[:, 1] = -128, 127
    gemms.append((a, b))
    return gemms


@pytest.mark.parametrize("kind,params", ENGINES, ids=[k for k, _ in ENGINES])
def test_rtl_engine_bit_exact_and_cycle_exact(kind, params):
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.engine_jobs import EngineParams
    rng = np.random.default_rng(len(kind))
    gemms = _gemm_set(rng)
    runs = cosim.run("engine", gemms, EngineParams.of(kind, params)).records
    tm, tk, tn = engine_tile_shape(kind, params)
    lat = engine_latency_cycles(kind, params)
    for (a, b), run in zip(gemms, runs):
        (m, k), n = a.shape, b.shape[1]
        ref = gemm_int8(a, b)
        np.testing.assert_array_equal(run.c, ref, err_msg=f"{kind} {m}x{k}x{n}")
        assert run.cycles == engine_gemm_cycles(kind, params, m, k, n), f"{kind} {m}x{k}x{n}"
        kt = -(-k // tk)
        tiles = -(-m // tm) * -(-n // tn)
        assert list(run.out_cycles) == [(i + 1) * kt - 1 + lat for i in range(tiles)]
    # the long-K corner really wrapped: the exact sums leave int32 and the RTL matched the wrap
    exact = np.array([[16384, -16256], [-16256, 16129]], np.int64) * LONG_K
    assert np.all(np.abs(exact) > 2**31)
    np.testing.assert_array_equal(runs[-1].c, ((exact + 2**31) % 2**32 - 2**31).astype(np.int32))


def test_rtl_engines_lint_clean_with_the_documented_waivers():
    from tilewright.cosim.build import build
    from tilewright.cosim.engine_jobs import EngineParams
    from tilewright.cosim.verilator import lint
    for kind, params in ENGINES:                        # the builds the tests above made
        ok, out = lint(build("engine", EngineParams.of(kind, params)))
        assert ok, f"{kind}: {out[-2000:]}"
