"""Vector unit: the bit-exact reference (dataflow_sim.vector_numerics) against torch within its
documented error bounds, and the RTL (rtl.vector_unit) against the reference bit for bit.

Ladder: closed-form spot values and API errors of the reference (no simulator); the reference's
error against float64 torch over every Q8.8 input, within the bound stated in its docstring;
the Amaranth component in Amaranth's simulator (constructor validation, a short mixed stream);
then the acceptance test on one Verilator build (4 lanes): every one of the 65536 Q8.8 inputs
through each non-linear function, random and corner-case add/mul/max, reductions, the latency and
one-beat-per-cycle contract, and a run with random back-pressure.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from amaranth.sim import Simulator

from tilewright.arch import ArchSpec, load_arch
from tilewright.dataflow_sim import vector_numerics as vn
from tilewright.rtl.vector_unit import LATENCY, OP_NAMES, VectorUnit

ALL = np.arange(-32768, 32768, dtype=np.int64)           # every Q8.8 raw value
CORNERS = np.array([0, 1, -1, 2, -2, 255, 256, -256, 257, 32767, -32768, 32766, -32767, 4095,
                    4096, -4096, -4097, 1279, 1280, -1792, -2560])


def _arch(lanes: int = 4) -> ArchSpec:
    a = load_arch("configs/ws8x8.yaml")
    return ArchSpec.model_validate({**a.model_dump(), "vector_unit": {"lanes": lanes}})


# ---- reference: closed forms, API ------------------------------------------------------------

def test_reference_spot_values():
    q = vn.to_fixed
    assert vn.elementwise("exp", q([0.0, 1.0]))[0] == 256                  # e**0 = 1
    assert vn.elementwise("exp", q([10.0, -100.0])).tolist() == [32767, 0]  # saturate / flush
    assert vn.elementwise("recip", q([1.0, -2.0, 0.0])).tolist() == [256, -128, 32767]
    assert vn.elementwise("rsqrt", q([4.0, 1.0, 0.0, -1.0])).tolist() == [128, 256, 32767, 32767]
    assert vn.elementwise("silu", q([0.0, 20.0, -20.0])).tolist() == [0, 5120, 0]
    assert vn.elementwise("add", [32767, -32768, 3], [1, -1, 4]).tolist() == [32767, -32768, 7]
    # 1.5 * 1.5 = 2.25 exactly; 2**-8 * 2**-8 = 2**-16 rounds to 0; -1 * 127 = -127
    assert vn.elementwise("mul", q([1.5, 2 ** -8, -1.0]), q([1.5, 2 ** -8, 127.0])).tolist() \
        == [576, 0, -32512]
    assert vn.elementwise("mul", [128, -128], [1, 1]).tolist() == [1, 0]    # 0.5 LSB: half up
    assert vn.elementwise("max", [1, -5], [-1, -4]).tolist() == [1, -4]
    assert vn.reduce("sum", [32767] * 3) == 98301
    assert vn.reduce("rmax", [-3, -7]) == -3


def test_reference_float_convenience_quantizes_and_rounds():
    assert vn.to_fixed([0.5 / 256, 1.5 / 256, 1e9, -1e9]).tolist() == [0, 2, 32767, -32768]
    assert vn.apply_float("exp", [0.0, 1.0]).tolist() == [1.0, 696 / 256]   # e = 2.71875 Q8.8
    assert vn.apply_float("sum", [1.0, 2.5, -0.25]) == 3.25
    assert vn.apply_float("mul", [3.0], [-0.5]).tolist() == [-1.5]


def test_reference_rejects_bad_input():
    with pytest.raises(ValueError, match="elementwise ops are"):
        vn.elementwise("gelu", [1])
    with pytest.raises(ValueError, match="needs a second operand"):
        vn.elementwise("add", [1])
    with pytest.raises(TypeError, match="raw Q8.8 integers"):
        vn.elementwise("exp", np.array([0.5]))
    with pytest.raises(ValueError, match=r"\[-32768, 32767\]"):
        vn.elementwise("exp", [40000])
    with pytest.raises(ValueError, match="reductions are"):
        vn.reduce("mean", [1])
    z = np.zeros((2, 2), np.int64)
    with pytest.raises(ValueError, match="beat 1: rmax inside a sum run"):
        vn.run_beats(["sum", "rmax"], z, z, [False, True])
    with pytest.raises(ValueError, match="beat 0: op 'gelu'"):
        vn.run_beats(["gelu"], z[:1], z[:1], [True])


def test_reference_tables_are_the_documented_closed_forms():
    assert vn.exp2_table()[[0, 32, 64]].tolist() == [32768, round(2 ** 15 * 2 ** 0.5), 65536]
    assert vn.recip_table()[[0, 64]].tolist() == [32768, 16384]
    assert vn.rsqrt_table()[:, 0].tolist() == [32768, round(2 ** 15 / 2 ** 0.5)]
    assert vn.pwl_table("softplus")[128] == round(256 * np.log(2.0))


# ---- reference against torch, every Q8.8 input -----------------------------------------------

_TORCH = {"exp": torch.exp, "recip": torch.reciprocal, "rsqrt": torch.rsqrt,
          "silu": torch.nn.functional.silu, "softplus": torch.nn.functional.softplus}


@pytest.mark.parametrize("op", vn.UNARY_OPS)
def test_reference_error_against_torch_within_documented_bound(op):
    x = ALL / 256.0
    exact = _TORCH[op](torch.tensor(x, dtype=torch.float64)).numpy()
    keep = ~np.isnan(exact)                                       # rsqrt of negatives
    exact = np.clip(exact[keep], vn.Q_MIN / 256, vn.Q_MAX / 256)  # saturation is specified
    got = vn.from_fixed(vn.elementwise(op, ALL))[keep]
    err = np.abs(got - exact)
    bound = vn.error_bound(op, x[keep])
    worst = int(np.argmax(err - bound))
    assert np.all(err <= bound), (op, x[keep][worst], got[worst], exact[worst], bound[worst])
    # and the bound is not vacuous: within a few LSB where the output is O(1)
    assert np.max(bound[np.abs(exact) <= 4]) < 6 / 256
    if op == "rsqrt":                                            # negatives and 0 saturate
        assert np.all(vn.elementwise(op, ALL[ALL <= 0]) == vn.Q_MAX)


# ---- Amaranth component ----------------------------------------------------------------------

def test_constructor_validation():
    with pytest.raises(TypeError, match="lanes must be an int"):
        VectorUnit(lanes="4")
    with pytest.raises(ValueError, match="lanes must be from 1 to 64"):
        VectorUnit(lanes=0)
    with pytest.raises(ValueError, match="vector_unit.lanes = 128"):
        VectorUnit.from_arch(_arch(128))
    assert set(OP_NAMES) == set(vn.OPS)


def _mixed_stream(rng, lanes: int, per_op: int):
    ops, last, a, b = [], [], [], []
    for op in vn.ELEMENTWISE_OPS:
        for j in range(per_op):
            hi = (32768, 2048, 256)[j % 3]       # small operands too, so mul does not saturate
            ops.append(op)
            last.append(False)
            a.append(rng.integers(-hi, hi, lanes))
            b.append(rng.integers(-hi, hi, lanes))
    for op, n in (("sum", 3), ("rmax", 2), ("sum", 1), ("rmax", 4)):
        for j in range(n):
            ops.append(op)
            last.append(j == n - 1)
            a.append(rng.integers(-32768, 32768, lanes))
            b.append(np.zeros(lanes, np.int64))
    return ops, np.array(a), np.array(b), last


def test_amaranth_sim_mixed_stream_matches_reference():
    lanes = 2
    rng = np.random.default_rng(7)
    ops, a, b, last = _mixed_stream(rng, lanes, 6)
    a[:6] = CORNERS[:12].reshape(6, 2)
    want = vn.run_beats(ops, a, b, last)
    dut, got, first_out = VectorUnit(lanes=lanes), [], []

    async def bench(ctx):
        ctx.set(dut.results.ready, 1)
        cycle = 0
        while len(got) < len(want):
            if cycle < len(ops):
                ctx.set(dut.operands.valid, 1)
                ctx.set(dut.operands.payload, {"op": OP_NAMES[ops[cycle]], "last": last[cycle],
                                               "a": a[cycle].tolist(), "b": b[cycle].tolist()})
            else:
                ctx.set(dut.operands.valid, 0)
            await ctx.tick()
            cycle += 1
            if ctx.get(dut.results.valid):
                got.append([ctx.get(dut.results.payload.data[i]) for i in range(lanes)])
                first_out.append(cycle)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == want
    assert first_out[0] == LATENCY        # beat in during cycle 0 is out during cycle LATENCY


# ---- Verilator acceptance --------------------------------------------------------------------

def test_rtl_bit_exact_exhaustive_unary_and_random_binary():
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.vector_jobs import VectorBeats
    lanes, rng = 4, np.random.default_rng(11)
    ops, rows_a, rows_b, last = [], [], [], []
    for op in vn.UNARY_OPS:                                   # every Q8.8 input, each function
        blk = ALL.reshape(-1, lanes)
        ops += [op] * len(blk)
        rows_a.append(blk)
        rows_b.append(np.zeros_like(blk))
        last += [False] * len(blk)
    for op in ("add", "mul", "max"):                         # corners x corners, then random
        ca, cb = np.meshgrid(CORNERS, CORNERS)
        pa = np.concatenate([ca.ravel(), rng.integers(-32768, 32768, 2000),
                             rng.integers(-2048, 2048, 2000)])
        pb = np.concatenate([cb.ravel(), rng.integers(-32768, 32768, 2000),
                             rng.integers(-2048, 2048, 2000)])
        pad = -len(pa) % lanes
        pa, pb = np.pad(pa, (0, pad)), np.pad(pb, (0, pad))
        ops += [op] * (len(pa) // lanes)
        rows_a.append(pa.reshape(-1, lanes))
        rows_b.append(pb.reshape(-1, lanes))
        last += [False] * (len(pa) // lanes)
    for op, n in (("sum", 7), ("rmax", 5), ("sum", 1), ("rmax", 1), ("sum", 16400)):
        blk = rng.integers(-32768, 32768, (n, lanes))
        if n == 16400:
            blk[:] = 32767                            # 65600 x 32767 > 2**31 - 1: wraps
        ops += [op] * n
        rows_a.append(blk)
        rows_b.append(np.zeros_like(blk))
        last += [False] * (n - 1) + [True]
    a, b = np.concatenate(rows_a), np.concatenate(rows_b)
    want = np.array(vn.run_beats(ops, a, b, last))
    run = cosim.run("vector", VectorBeats(ops, a, b, last), _arch(lanes)).records[0]
    assert run.outputs.shape == want.shape
    bad = np.argwhere(run.outputs != want)
    assert len(bad) == 0, [(int(r), int(c), int(run.outputs[r, c]), int(want[r, c]))
                           for r, c in bad[:5]]
    # one beat per cycle in, fixed latency out (ready held high)
    assert np.all(np.diff(run.in_cycles) == 1)
    elem = [i for i, op in enumerate(ops) if op in vn.ELEMENTWISE_OPS]
    assert np.all(run.out_cycles[:len(elem)] - run.in_cycles[elem] == LATENCY)
    # the wrapping int32 sum, independently: 65600 * 32767 - 2**32
    assert run.outputs[-1].tolist() == [65600 * 32767 - 2 ** 32] * lanes


def test_rtl_back_pressure_keeps_results_and_order():
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.vector_jobs import VectorBeats
    lanes, rng = 4, np.random.default_rng(5)
    ops, a, b, last = _mixed_stream(rng, lanes, 8)
    ready = rng.integers(0, 2, 37).tolist() + [1]
    run = cosim.run("vector", VectorBeats(ops, a, b, last, ready), _arch(lanes)).records[0]
    want = vn.run_beats(ops, a, b, last)
    assert run.outputs.tolist() == want
    assert run.out_last.tolist() == [False] * (len(want) - 4) + [True] * 4
    assert run.cycles > len(ops)                                  # it did stall


def test_rtl_lints_clean_with_the_documented_waivers():
    from tilewright.cosim.build import build
    from tilewright.cosim.verilator import lint
    ok, out = lint(build("vector", _arch(4)))
    assert ok, out[-2000:]
