"""bf16 (fp32-accumulate) WS systolic core (rtl/systolic_bf16.py) against the functional model.

Reference: ``numerics.gemm(a, b, "bf16", acc="fp32", k_block=rows)`` of
:mod:`tilewright.dataflow_sim.numerics` (another layer, never derived from the RTL), compared bit
for bit on the fp32 patterns (NaN compared as "is a NaN"); cycles against the closed form
:func:`bf16_gemm_cycles`, itself checked against hand-computed numbers, and against the cycle
model (:func:`tilewright.dataflow_sim.cycle.gemm_cycles` on a bf16 WS ArchSpec). One Verilator
build (4x4) runs random ragged GEMMs whose values span many binades plus corner cases (exact
cancellation, signed zeros, subnormal products and partial sums, bf16 subnormal inputs,
large/small mixes whose result depends on the k-tile order, overflow to inf and inf - inf);
Amaranth's simulator runs a 2x3 core on one ragged GEMM.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests.pysim_harness import assert_same_fp32_bits, run_core_gemms
from tilewright.arch import ArchSpec, load_arch
from tilewright.cosim.bf16_jobs import bf16_codes, bf16_gemm_words
from tilewright.cosim.float_core_jobs import c_from_acc_words
from tilewright.dataflow_sim import numerics
from tilewright.dataflow_sim.cycle import gemm_cycles
from tilewright.rtl.systolic_bf16 import (Bf16GemmCore, Bf16WeightStationaryArray,
                                          bf16_gemm_cycles)

BF = ml_dtypes.bfloat16


def _spread(rng, shape, lo: int = -40, hi: int = 40) -> np.ndarray:
    """bf16 values: normal samples times 2**e, e uniform in [lo, hi)."""
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)).astype(BF)


def _bf16_arch(rows: int, cols: int) -> ArchSpec:
    """A WS systolic ArchSpec with bf16 operands and an fp32 accumulator (for the cycle model)."""
    d = load_arch("ws8x8").model_dump(mode="json")
    d["name"] = f"bf16-ws{rows}x{cols}"
    d["tensor_engine"].update(rows=rows, cols=cols, input_format="bf16", weight_format="bf16",
                              accumulator_format="fp32")
    return ArchSpec.model_validate(d)


def _reference(a, b, rows: int) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):     # the overflow case is on purpose
        return numerics.gemm(bf16_codes(a, "A").view(BF), bf16_codes(b, "B").view(BF), "bf16",
                         acc="fp32", k_block=rows)


# ---- closed form and validation ------------------------------------------------------------------
def test_cycle_closed_form_hand_computed():
    # 4x4, 5x7x6: F = 2 k-tiles x 2 n-tiles = 4, P = max(5, 2*4 + 4 - 2) = 10:
    # 4 preload + 3 * 10 + (5 + 4 + 4 + 1) drain = 48
    assert bf16_gemm_cycles(4, 4, 5, 7, 6) == 48
    # 1x1x1: F = 1: 4 + 0 + 1 + 4 + 4 + 1 = 14;  2x3, 20x3x3: F = 2, P = 20: 2 + 20 + 20+2+3+1 = 48
    assert bf16_gemm_cycles(4, 4, 1, 1, 1) == 14
    assert bf16_gemm_cycles(2, 3, 20, 3, 3) == 48


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"rows": 0, "cols": 4, "a_depth": 8, "b_depth": 8, "acc_depth": 8}, ValueError, "rows"),
    ({"rows": 4, "cols": 4.0, "a_depth": 8, "b_depth": 8, "acc_depth": 8}, TypeError, "cols"),
    ({"rows": 4, "cols": 4, "a_depth": 0, "b_depth": 8, "acc_depth": 8}, ValueError, "a_depth"),
    ({"rows": 4, "cols": 4, "a_depth": 8, "b_depth": True, "acc_depth": 8}, TypeError, "b_depth"),
    ({"rows": 4, "cols": 4, "a_depth": 8, "b_depth": 8, "acc_depth": 2**21}, ValueError,
     "acc_depth"),
])
def test_core_validates_its_parameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Bf16GemmCore(**kwargs)


def test_array_and_operands_validate():
    with pytest.raises(ValueError, match="rows must be from 1 to 64"):
        Bf16WeightStationaryArray(rows=65, cols=2)
    with pytest.raises(ValueError, match="dtype int8: accepted: ml_dtypes.bfloat16"):
        bf16_gemm_words(2, 2, np.zeros((2, 2), np.int8), np.zeros((2, 2), BF))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        bf16_gemm_words(2, 2, np.zeros((2, 3), BF), np.zeros((2, 2), BF))


# ---- Amaranth simulator: a 2x3 core, one ragged GEMM --------------------------------------------
def test_core_pysim_bit_exact_and_cycle_exact():
    rows, cols, (m, k, n) = 2, 3, (5, 7, 4)
    rng = np.random.default_rng(3)
    a, b = _spread(rng, (m, k)), _spread(rng, (k, n))
    a[0, :2] = [1.0, -1.0]                     # a cancelling pair inside one tile
    b[:2, 0] = 3.0
    core = Bf16GemmCore(rows=rows, cols=cols, a_depth=32, b_depth=32, acc_depth=32)
    lay, a_words, b_words = bf16_gemm_words(rows, cols, a, b)
    run, = run_core_gemms(core, [(lay, a_words, b_words)])
    assert_same_fp32_bits(c_from_acc_words(lay, run.acc), _reference(a, b, rows), "pysim 2x3")
    assert run.busy == run.counter == bf16_gemm_cycles(rows, cols, m, k, n)


# ---- Verilator: a 4x4 core, random and corner-case GEMMs ----------------------------------------
def _gemm_set(rng) -> list[tuple[str, np.ndarray, np.ndarray]]:
    g = [(f"random {m}x{k}x{n}", _spread(rng, (m, k)), _spread(rng, (k, n)))
         for m, k, n in [(5, 7, 6), (9, 13, 3), (1, 1, 1), (4, 8, 4), (3, 37, 9), (12, 5, 2)]]
    # exact cancellation inside a tile and across tiles, with -0 inputs: results +0
    a = np.array([[1.0, -1.0, 2.0, -2.0, 0.5, -0.5], [-0.0, -0.0, -0.0, -0.0, -0.0, -0.0],
                  [3.0, 5.0, -3.0, -5.0, 1.0, -1.0]], BF)
    b = np.ones((6, 5), BF)
    b[:, 1] = -1.0
    b[:, 2] = -0.0
    g.append(("cancellation/signed zeros", a, b))
    # subnormal products and partial sums (2**-70 * 2**-70 ~ 2**-140), bf16 subnormal inputs
    a = _spread(rng, (6, 9), -75, -65)
    b = _spread(rng, (9, 7), -75, -65)
    a[0] = np.array(rng.integers(1, 0x80, 9), np.uint16).view(BF)     # bf16 subnormals
    b[:, 0] = np.array(rng.integers(1, 0x80, 9), np.uint16).view(BF)
    a[1] = 1.0
    g.append(("subnormals", a, b))
    # large/small mixes: order-dependent sums (see the hand-computed case below)
    a = np.array([[2.0**30, 1.0, -(2.0**30), 1.0, 1.0], [1.0, 2.0**30, 1.0, -(2.0**30), 1.0],
                  [2.0**-100, 2.0**100, 2.0**-100, -(2.0**100), 2.0**-100]], BF)
    g.append(("large/small", a, np.ones((5, 4), BF)))
    # overflow to inf in the products and in the sums; inf - inf -> NaN
    a = np.array([[2.0**127, 2.0**127, 1.0, 1.0], [2.0**100, 2.0**100, 1.0, 3.0],
                  [3.0e38, 3.0e38, 3.0e38, -1.0]], BF)
    b = np.array([[2.0**10, 2.0**100, 1.0], [2.0**10, -(2.0**100), 1.0], [1.0, 1.0, 1.0],
                  [1.0, 1.0, 1.0]], BF)
    g.append(("overflow", a, b))
    return g


def test_rtl_bf16_core_bit_exact_and_cycle_exact():
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.bf16_jobs import Bf16Params
    rows = cols = 4
    gemms = _gemm_set(np.random.default_rng(5))
    arch = _bf16_arch(rows, cols)
    # the core an ArchSpec describes (4096-word buffers from ws8x8's 64 KiB memories): the same
    # Verilog as tests/test_sim_rtl.py's bf16 layer test builds, so the two share one build
    runs = cosim.run("bf16-core", [(a, b) for _, a, b in gemms],
                     Bf16Params.for_arch(arch)).records
    for (what, a, b), run in zip(gemms, runs):
        (m, k), n = a.shape, b.shape[1]
        assert_same_fp32_bits(run.c, _reference(a, b, rows), what)
        assert run.cycles == bf16_gemm_cycles(rows, cols, m, k, n), what
        assert run.cycles == gemm_cycles(arch, m, k, n).cycles, what     # the cycle model
    c = {what: run.c for (what, _, _), run in zip(gemms, runs)}
    # hand-computed: row 0 of "large/small" is tile [2**30, 1, -2**30, 1] -> 1 (the first 1 is
    # below half an ulp of 2**30), then tile [1]: acc = 1 + 1 = 2; exact arithmetic would give 3
    assert c["large/small"][0, 0] == 2.0
    cz = c["cancellation/signed zeros"]
    assert not np.signbit(cz[:, :3]).any() and (cz[:, :3] == 0).all()   # +0, never -0
    co = c["overflow"]
    # product overflow, inf - inf, a sum of finite products overflowing; 2**111 + 1 + 3 -> 2**111
    assert np.isposinf(co[0, 0]) and np.isnan(co[1, 1]) and np.isposinf(co[0, 2])
    assert co[1, 0] == 2.0**111
    sub = np.abs(c["subnormals"])
    assert ((sub > 0) & (sub < np.float32(2.0**-126))).sum() > 5        # subnormal results


def test_rtl_bf16_core_lint_clean_with_the_documented_waivers():
    from tilewright.cosim.bf16_jobs import Bf16Params
    from tilewright.cosim.build import build
    from tilewright.cosim.verilator import lint
    ok, out = lint(build("bf16-core", Bf16Params.for_arch(_bf16_arch(4, 4))))   # the test above's
    assert ok, out[-2000:]


def test_cli_rtl_generates_the_bf16_core(tmp_path):
    """``tilewright rtl`` on a bf16 WS ArchSpec writes the bf16 core (it used to refuse it as
    "int8 only"); its buffers by hand: 2 KiB scratchpad split into A and B halves of 1 KiB,
    2-byte lanes: A words = 1024 / (2 * rows), B = 1024 / (2 * cols); 1 KiB accumulator of
    4-byte lanes: 1024 / (4 * cols)."""
    import json

    from tests.test_cli import tw
    engine = {"rows": 2, "cols": 4, "dataflow": "ws", "input_format": "bf16",
              "weight_format": "bf16", "accumulator_format": "fp32"}
    p = tmp_path / "a.yaml"
    p.write_text(ArchSpec.from_dict({"name": "t", "tensor_engine": engine, "memory": {
        "scratchpad_kib": 2, "accumulator_kib": 1}}).to_yaml())
    res = tw("rtl", "--arch", str(p), "-o", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (man["top"], man["element_format"], man["accumulator_format"]) == (
        "tw_bf16_gemm_core", "bf16", "fp32")
    assert man["buffers_words"] == {"a": 1024 // (2 * 2), "b": 1024 // (2 * 4),
                                    "acc": 1024 // (4 * 4)}
    ports = {q["name"]: q["width_bits"] for q in man["ports"]}
    assert ports["a_wr_data"] == 2 * 16 and ports["b_wr_data"] == 4 * 16
    assert ports["acc_rd_data"] == 4 * 32
    assert "module tw_bf16_gemm_core" in (tmp_path / "out" / "tw_bf16_gemm_core.v").read_text()


def test_cli_rtl_refuses_banks_the_bf16_core_does_not_build(tmp_path):
    """The bf16 core has one bank per buffer: 4 scratchpad banks are refused in one line, not
    built as one (``rtl`` and ``sim --rtl`` alike), and nothing is written."""
    from tests.test_cli import tw
    engine = {"rows": 2, "cols": 2, "dataflow": "ws", "input_format": "bf16",
              "weight_format": "bf16", "accumulator_format": "fp32"}
    p = tmp_path / "a.yaml"
    p.write_text(ArchSpec.from_dict({"name": "t", "tensor_engine": engine,
                                     "memory": {"scratchpad_banks": 4}}).to_yaml())
    for args in (("rtl", "--arch", str(p), "-o", str(tmp_path / "out")),
                 ("sim", "--model", "tiny-llama", "--arch", str(p), "--rtl")):
        res = tw(*args)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert "memory.scratchpad_banks = 4" in res.stderr and "accepted: 1 and 1" in res.stderr
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()
