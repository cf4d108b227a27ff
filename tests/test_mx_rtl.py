"""MX (MXINT8, MXFP8, MXFP8-E5M2) WS core (rtl/mx_core.py) against the functional model.

Reference: ``numerics.gemm(qa, qb, fmt, acc="fp32", k_block=32)`` of
:mod:`tilewright.dataflow_sim.numerics` on QTensors from :func:`tilewright.formats.quantize`
(ml_dtypes elements), compared bit for bit on fp32 patterns (NaN as "is a NaN"); cycles against
the cycle model on an MX WS ArchSpec. :class:`Pow2Scale` against numpy's ``ldexp`` on float32.
Corner cases: E8M0 scale extremes (codes 0 and 254: products scaled into fp32 subnormals / to
inf), a partial last block, fp8 subnormal and saturated element codes, e5m2 inf/NaN codes.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.pysim_harness import assert_same_fp32_bits, run_core_gemms, simulate
from tilewright.arch import ArchSpec, load_arch
from tilewright.cosim.float_core_jobs import c_from_acc_words
from tilewright.cosim.mx_jobs import MxParams, mx_gemm_words, prepare_mx
from tilewright.dataflow_sim import numerics
from tilewright.dataflow_sim.cycle import gemm_cycles
from tilewright.formats import QTensor, quantize
from tilewright.rtl.mx_core import MxGemmCore, Pow2Scale


@pytest.mark.parametrize("integer", [False, True])
def test_pow2_scale_matches_numpy_ldexp(integer):
    rng = np.random.default_rng(4)
    if integer:
        x = rng.integers(-2**24, 2**24, 600).astype(np.int32)
        x[:4] = [0, -1, 2**24 - 1, -(2**24)]
        xv = x.astype(np.float32)                       # exact: |x| <= 2**24
    else:
        x = rng.integers(0, 2**32, 600, dtype=np.uint64).astype(np.uint32)
        x[:3] = np.array([0x80000000, 0x7F800000, 0x00000001], np.uint32)   # -0, inf, subnormal
        xv = x.view(np.float32)
    e = rng.integers(-280, 260, x.size)
    e[:40] = rng.integers(-160, -120, 40)               # results around fp32's subnormal range
    out = []
    dut = Pow2Scale(integer=integer)

    async def bench(ctx):
        for xi, ei in zip(x.view(np.uint32).tolist(), e.tolist()):
            ctx.set(dut.x, xi)
            ctx.set(dut.e, ei)
            await ctx.delay(1e-9)
            out.append(ctx.get(dut.out))
    simulate(dut, bench, clock=False)
    with np.errstate(all="ignore"):
        ref = np.ldexp(xv, e.astype(np.int32)).astype(np.float32)
    assert_same_fp32_bits(np.array(out, np.uint32).view(np.float32), ref, f"integer={integer}")


def test_core_validates():
    with pytest.raises(ValueError, match="accepted: mxint8, mxfp8, mxfp8-e5m2"):
        MxGemmCore(fmt="fp8-e4m3", cols=2, a_depth=8, b_depth=8, acc_depth=8)
    with pytest.raises(ValueError, match="cols must be from 1 to 64"):
        MxGemmCore(fmt="mxint8", cols=0, a_depth=8, b_depth=8, acc_depth=8)
    q = quantize(np.ones((2, 32), np.float32), "mxfp8", axis=1)
    with pytest.raises(ValueError, match="operand A must be a mxint8 QTensor"):
        prepare_mx([(q, q)], MxParams("mxint8", 2))


def _mx_arch(fmt: str, cols: int) -> ArchSpec:
    d = load_arch("ws8x8").model_dump(mode="json")
    d["name"] = f"{fmt}-ws32x{cols}"
    d["tensor_engine"].update(rows=32, cols=cols, input_format=fmt, weight_format=fmt,
                              accumulator_format="fp32")
    return ArchSpec.model_validate(d)


def _gemm_set(rng, fmt: str) -> list[tuple[str, QTensor, QTensor]]:
    def spread(shape, lo=-30, hi=30):
        return (rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)).astype(np.float32)
    g = []
    for m, k, n in [(3, 45, 3), (5, 64, 4), (2, 7, 1)]:             # partial last blocks
        g.append((f"random {m}x{k}x{n}", quantize(spread((m, k)), fmt, axis=1),
                  quantize(spread((k, n)), fmt, axis=0)))
    # scale extremes: E8M0 codes 0 (2**-127) and 254 (2**127) on the same codes; with B's
    # code (2**-23 resp. 2**-10) the scaled block dots (about 2**15 resp. 2**2) land in fp32's
    # subnormal range
    qa, qb = quantize(spread((2, 40), -3, 3), fmt, axis=1), quantize(spread((40, 3), -3, 3),
                                                                     fmt, axis=0)
    lo_a = QTensor(fmt, qa.values, np.zeros_like(qa.scales), 1, "block")
    lo_b = QTensor(fmt, qb.values, np.full_like(qb.scales, 117 if fmt == "mxint8" else 104), 0,
                   "block")
    g.append(("scales into subnormals", lo_a, lo_b))
    hi_a = QTensor(fmt, qa.values, np.full_like(qa.scales, 254), 1, "block")
    g.append(("scales to inf", hi_a, QTensor(fmt, qb.values, np.full_like(qb.scales, 200), 0,
                                             "block")))
    if fmt == "mxfp8-e5m2":     # inf and NaN element codes (quantize never makes them)
        v = qa.values.view(np.uint8).copy()
        v[0, 3], v[1, 5] = 0x7C, 0x7E
        g.append(("inf/NaN codes", QTensor(fmt, v.view(qa.values.dtype), qa.scales, 1, "block"),
                  qb))
    return g


@pytest.mark.parametrize("fmt", ["mxint8", "mxfp8"])
def test_rtl_mx_core_bit_exact_and_cycle_exact(fmt):
    from tilewright.cosim import sim as cosim
    cols = 2
    arch = _mx_arch(fmt, cols)
    gemms = _gemm_set(np.random.default_rng(6), fmt)
    runs = cosim.run("mx-core", [(a, b) for _, a, b in gemms], MxParams(fmt, cols)).records
    assert len(runs) == len(gemms)
    for (what, a, b), run in zip(gemms, runs):
        with np.errstate(over="ignore", invalid="ignore"):
            ref = numerics.gemm(a, b, fmt, acc="fp32", k_block=32)
        assert_same_fp32_bits(run.c, ref, f"{fmt} {what}")
        (m, k), n = a.shape, b.shape[1]
        assert run.cycles == gemm_cycles(arch, m, k, n).cycles, what
    c = {what: run.c for (what, _, _), run in zip(gemms, runs)}
    sub = np.abs(c["scales into subnormals"])
    assert ((sub > 0) & (sub < 2.0**-126)).any()
    assert np.isinf(c["scales to inf"]).any()


def test_mxfp8_e5m2_core_pysim_bit_exact_with_inf_and_nan_codes():
    """The third MX format on Amaranth's simulator (32x1 core, the corner-case GEMMs)."""
    fmt, cols = "mxfp8-e5m2", 1
    g = _gemm_set(np.random.default_rng(8), fmt)
    names = [w for w, _, _ in g]
    picks = [g[names.index(w)] for w in ("random 2x7x1", "scales into subnormals",
                                         "inf/NaN codes")]
    core = MxGemmCore(fmt=fmt, cols=cols, a_depth=16, b_depth=256, acc_depth=16)
    gemms = [mx_gemm_words(cols, a, b) for _, a, b in picks]
    outs = [c_from_acc_words(lay, run.acc)
            for (lay, _, _), run in zip(gemms, run_core_gemms(core, gemms))]
    for (what, a, b), got in zip(picks, outs):
        with np.errstate(over="ignore", invalid="ignore"):
            ref = numerics.gemm(a, b, fmt, acc="fp32", k_block=32)
        assert_same_fp32_bits(got, ref, f"{fmt} {what}")
    assert np.isnan(outs[2]).any() or np.isinf(outs[2]).any()
