"""fp8 (e4m3, e5m2) x fp8 -> fp32 WS core (rtl/systolic_fp8.py) against independent references.

References, never derived from the RTL: ml_dtypes + numpy float32 for the units
(:class:`Fp8Mul`: every fp8 code against random partners, per format; :class:`Fp32Mul`: random
patterns and hand-picked subnormal/tie/overflow cases), and
``numerics.gemm(QTensor(a, s_a), QTensor(b, s_b), fmt, acc="fp32", k_block=rows)`` of
:mod:`tilewright.dataflow_sim.numerics` for the core, compared bit for bit on fp32 patterns (NaN
as "is a NaN"); cycles against the cycle model (:func:`tilewright.dataflow_sim.cycle.gemm_cycles`
on an fp8 WS ArchSpec). One Verilator build per format (4x4) runs random ragged GEMMs and the
corner cases: fp8 subnormals, NaN codes (e4m3's S.1111.111; e5m2's NaN and inf, inf * 0),
saturated codes (+-448, +-57344) whose sums overflow fp32 only through the scales, and scale
extremes (results pushed into fp32 subnormals and to inf by ``s_a * s_b``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests.pysim_harness import assert_same_fp32_bits, run_core_gemms, simulate
from tilewright.arch import ArchSpec, load_arch
from tilewright.cosim.float_core_jobs import c_from_acc_words
from tilewright.cosim.fp8_jobs import Fp8Gemm, fp8_gemm_words, fp32_bits, prepare_fp8, Fp8Params
from tilewright.dataflow_sim import numerics
from tilewright.dataflow_sim.cycle import gemm_cycles
from tilewright.formats import QTensor
from tilewright.rtl.fp_arith import Fp8Mul, Fp32Mul
from tilewright.rtl.systolic_bf16 import bf16_gemm_cycles
from tilewright.rtl.systolic_fp8 import Fp8GemmCore, Fp8WeightStationaryArray

DT = {"fp8-e4m3": ml_dtypes.float8_e4m3fn, "fp8-e5m2": ml_dtypes.float8_e5m2}


def _comb(dut, pairs) -> np.ndarray:
    """The combinational ``out`` of ``dut`` for each (a, b) pattern pair (Amaranth simulator)."""
    out = []

    async def bench(ctx):
        for a, b in pairs:
            ctx.set(dut.a, int(a))
            ctx.set(dut.b, int(b))
            await ctx.delay(1e-9)
            out.append(ctx.get(dut.out))
    simulate(dut, bench, clock=False)
    return np.array(out, np.uint32).view(np.float32)


# ---- units -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(DT))
def test_fp8_mul_every_code_exact(fmt):
    rng = np.random.default_rng(1)
    a = np.repeat(np.arange(256, dtype=np.uint8), 8)        # every code, 8 random partners
    b = rng.integers(0, 256, a.size).astype(np.uint8)
    with np.errstate(invalid="ignore"):
        ref = a.view(DT[fmt]).astype(np.float32) * b.view(DT[fmt]).astype(np.float32)
    assert_same_fp32_bits(_comb(Fp8Mul(fmt=fmt), zip(a, b)), ref, fmt)


def test_fp32_mul_matches_numpy():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 2**32, 1500, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, 1500, dtype=np.uint64).astype(np.uint32)
    # hand-picked: subnormal results (with ties), subnormal inputs, overflow, inf * 0, -0
    f = np.array([[2.0**-70, 2.0**-70], [1.5 * 2.0**-75, 2.0**-74], [3.0, 2.0**-149],
                  [1.4e-45, 0.5], [1.4e-45, 1.5], [1.17e-38, 0.9999999], [2.0**100, 2.0**40],
                  [np.inf, 0.0], [-0.0, 5.0], [np.nan, 1.0], [-np.inf, -2.0],
                  [1.0000001, 2.0**-126], [0.75, 2.0**-148]], np.float32)
    a = np.concatenate([a, f[:, 0].view(np.uint32)])
    b = np.concatenate([b, f[:, 1].view(np.uint32)])
    with np.errstate(all="ignore"):
        ref = a.view(np.float32) * b.view(np.float32)
    assert_same_fp32_bits(_comb(Fp32Mul(), zip(a, b)), ref, "Fp32Mul")


def test_components_validate():
    with pytest.raises(ValueError, match="accepted: fp8-e4m3, fp8-e5m2"):
        Fp8Mul(fmt="fp8-e3m4")
    with pytest.raises(ValueError, match="accepted: fp8-e4m3, fp8-e5m2"):
        Fp8WeightStationaryArray(rows=2, cols=2, fmt="int8")
    with pytest.raises(ValueError, match="rows must be from 1 to 64"):
        Fp8WeightStationaryArray(rows=0, cols=2, fmt="fp8-e4m3")
    with pytest.raises(TypeError, match="cols"):
        Fp8GemmCore(rows=2, cols=2.0, fmt="fp8-e4m3", a_depth=8, b_depth=8, acc_depth=8)
    with pytest.raises(ValueError, match="acc_depth"):
        Fp8GemmCore(rows=2, cols=2, fmt="fp8-e5m2", a_depth=8, b_depth=8, acc_depth=0)
    with pytest.raises(ValueError, match="dtype float8_e5m2: accepted: float8_e4m3fn"):
        prepare_fp8([Fp8Gemm(np.zeros((2, 2), DT["fp8-e5m2"]), np.zeros((2, 2), np.uint8))],
                    Fp8Params(2, 2, "fp8-e4m3"))
    with pytest.raises(ValueError, match="accumulator buffer needs"):
        prepare_fp8([Fp8Gemm(np.zeros((9, 2), np.uint8), np.zeros((2, 2), np.uint8))],
                    Fp8Params(2, 2, "fp8-e4m3", (64, 64, 8)))


# ---- the core --------------------------------------------------------------------------------
def _reference(g: Fp8Gemm, fmt: str, rows: int) -> np.ndarray:
    qa = QTensor(fmt, g.a.view(DT[fmt]), np.full((1, 1), g.scale_a, np.float32), 1, "tensor")
    qb = QTensor(fmt, g.b.view(DT[fmt]), np.full((1, 1), g.scale_b, np.float32), 0, "tensor")
    with np.errstate(over="ignore", invalid="ignore"):
        return numerics.gemm(qa, qb, fmt, acc="fp32", k_block=rows)


def _codes(rng, shape, fmt: str) -> np.ndarray:
    """Random finite codes of ``fmt`` (uint8), subnormals included."""
    c = rng.integers(0, 256, shape).astype(np.uint8)
    v = c.view(DT[fmt]).astype(np.float32)
    return np.where(np.isfinite(v), c, 0).astype(np.uint8)


def test_core_pysim_bit_exact_and_cycle_exact():
    fmt, rows, cols, (m, k, n) = "fp8-e4m3", 2, 3, (5, 7, 4)
    rng = np.random.default_rng(3)
    g = Fp8Gemm(_codes(rng, (m, k), fmt), _codes(rng, (k, n), fmt), 0.37, 3.1e-3)
    core = Fp8GemmCore(rows=rows, cols=cols, fmt=fmt, a_depth=32, b_depth=32, acc_depth=32)
    lay, a_words, b_words = fp8_gemm_words(rows, cols, g.a, g.b)
    run, = run_core_gemms(core, [(lay, a_words, b_words)],
                          [(fp32_bits(g.scale_a), fp32_bits(g.scale_b))])
    assert_same_fp32_bits(c_from_acc_words(lay, run.acc), _reference(g, fmt, rows), "pysim 2x3")
    assert run.busy == bf16_gemm_cycles(rows, cols, m, k, n)


def _fp8_arch(rows: int, cols: int, fmt: str) -> ArchSpec:
    d = load_arch("ws8x8").model_dump(mode="json")
    d["name"] = f"{fmt}-ws{rows}x{cols}"
    d["tensor_engine"].update(rows=rows, cols=cols, input_format=fmt, weight_format=fmt,
                              accumulator_format="fp32")
    return ArchSpec.model_validate(d)


def _gemm_set(rng, fmt: str) -> list[tuple[str, Fp8Gemm]]:
    dt, top = DT[fmt], (0x7E if fmt == "fp8-e4m3" else 0x7B)   # top: the largest finite code
    g = [(f"random {m}x{k}x{n}", Fp8Gemm(_codes(rng, (m, k), fmt), _codes(rng, (k, n), fmt),
                                          float(rng.uniform(1e-3, 2)), float(rng.uniform(1e-3, 2))))
         for m, k, n in [(5, 7, 6), (9, 13, 3), (1, 1, 1), (3, 37, 9)]]
    # subnormal codes only (mantissa field, exponent 0) and signed zeros: exact tiny sums
    sub = rng.integers(0, 8 if fmt == "fp8-e4m3" else 4, (6, 9)).astype(np.uint8)
    sub |= (rng.integers(0, 2, sub.shape) << 7).astype(np.uint8)
    g.append(("subnormals", Fp8Gemm(sub, sub.T.copy())))
    # saturated codes (+-max finite), cancelling inside a tile, summed across tiles
    sat = np.array([[top, top | 0x80, top, top | 0x80, top, top],
                    [top, top, top, top, top, top]], np.uint8)
    g.append(("saturated", Fp8Gemm(sat, np.full((6, 3), top, np.uint8))))
    # scale extremes: the same saturated sums scaled into fp32 subnormals and to inf
    # s_a * s_b = 2**-140 (e4m3) / 2**-147 (e5m2, itself an fp32 subnormal); A = +-1.0 codes:
    # sums 2 and 6 times the max finite -> results 2**-130 .. 2**-128, fp32 subnormals
    one = 0x38 if fmt == "fp8-e4m3" else 0x3C
    ones = np.where(sat == top, one, one | 0x80).astype(np.uint8)
    g.append(("scale tiny", Fp8Gemm(ones, np.full((6, 3), top, np.uint8), 2.0**-100,
                                    2.0**-40 if fmt == "fp8-e4m3" else 2.0**-47)))
    g.append(("scale huge", Fp8Gemm(sat, np.full((6, 3), top, np.uint8), 2.0**100, 2.0**20)))
    # specials: NaN codes (and for e5m2 inf, inf * 0, inf - inf)
    a = np.array([[0x38, 0x38, 0x00, 0x38], [0x38, 0x38, 0x38, 0x38]], np.uint8)
    b = np.full((4, 3), 0x38, np.uint8)
    if fmt == "fp8-e4m3":
        a[0, 1] = 0x7F                               # +NaN (S.1111.111), e4m3's only special
        a[1, 3] = 0xFF                               # -NaN
    else:
        a[0, 1] = 0x7C                               # +inf
        b[2, 1] = 0x7C                               # 0 * inf in column 1 of row 0
        a[1, 1], a[1, 2] = 0x7C, 0xFC                # inf - inf in row 1
        b[3, 2] = 0x7E                               # a NaN code
    g.append(("specials", Fp8Gemm(a, b)))
    return g


@pytest.mark.parametrize("fmt", list(DT))
def test_rtl_fp8_core_bit_exact_and_cycle_exact(fmt):
    from tilewright.cosim import sim as cosim
    rows = cols = 4
    arch = _fp8_arch(rows, cols, fmt)
    gemms = _gemm_set(np.random.default_rng(5), fmt)
    runs = cosim.run("fp8-core", [g for _, g in gemms], Fp8Params(rows, cols, fmt)).records
    assert len(runs) == len(gemms)
    for (what, g), run in zip(gemms, runs):
        (m, k), n = g.a.shape, g.b.shape[1]
        assert_same_fp32_bits(run.c, _reference(g, fmt, rows), f"{fmt} {what}")
        assert run.cycles == gemm_cycles(arch, m, k, n).cycles, what     # the cycle model
    c = {what: run.c for (what, _), run in zip(gemms, runs)}
    mx = float(np.uint8(0x7E if fmt == "fp8-e4m3" else 0x7B).view(DT[fmt]).astype(np.float32))
    np.testing.assert_array_equal(c["saturated"], [[2 * mx * mx] * 3, [6 * mx * mx] * 3])
    tiny = np.abs(c["scale tiny"])
    assert (tiny > 0).all() and (tiny < 2.0**-126).all()           # fp32 subnormal results
    assert np.isposinf(c["scale huge"]).all()
    sp = c["specials"]
    if fmt == "fp8-e4m3":
        assert np.isnan(sp).all()
    else:
        assert np.isnan(sp[0, 1]) and np.isposinf(sp[0, 0]) and np.isnan(sp[1]).all()


# ---- tilewright rtl: generated for ws, refused in one line elsewhere ---------------------------
def _yaml(tmp_path, engine: dict) -> str:
    p = tmp_path / "a.yaml"
    p.write_text(ArchSpec.from_dict({"name": "t", "tensor_engine": engine}).to_yaml())
    return str(p)


def test_cli_rtl_generates_the_fp8_core(tmp_path):
    import json

    from tests.test_cli import tw
    arch = _yaml(tmp_path, {"rows": 2, "cols": 2, "dataflow": "ws", "input_format": "fp8-e5m2",
                            "weight_format": "fp8-e5m2", "accumulator_format": "fp32"})
    res = tw("rtl", "--arch", arch, "-o", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (man["top"], man["element_format"]) == ("tw_fp8_gemm_core", "fp8-e5m2")
    ports = {p["name"]: p["width_bits"] for p in man["ports"]}
    assert ports["a_wr_data"] == 2 * 8 and ports["acc_rd_data"] == 2 * 32
    assert ports["scale_a"] == ports["scale_b"] == 32
    assert "module tw_fp8_gemm_core" in (tmp_path / "out" / "tw_fp8_gemm_core.v").read_text()


@pytest.mark.parametrize("engine,needle", [
    ({"rows": 4, "cols": 4, "dataflow": "os", "input_format": "fp8-e4m3",
      "weight_format": "fp8-e4m3", "accumulator_format": "fp32"},
     "fp8-e4m3 -> fp32 on the os systolic array (its RTL builds int8 -> int32)"),
    ({"kind": "cube", "rows": 2, "cols": 2, "depth": 2, "input_format": "fp8-e5m2",
      "weight_format": "fp8-e5m2", "accumulator_format": "fp32"},
     "fp8-e5m2 -> fp32 on the cube engine (its RTL builds int8 -> int32)"),
    ({"rows": 64, "cols": 4, "dataflow": "ws", "input_format": "mxint8",
      "weight_format": "mxint8", "accumulator_format": "fp32"},
     "tensor_engine.rows = 64 with mxint8 (the MX RTL core has 32 rows, one MX block per K "
     "tile)"),
    ({"rows": 32, "cols": 4, "dataflow": "os", "input_format": "mxfp8",
      "weight_format": "mxfp8", "accumulator_format": "fp32"},
     "mxfp8 -> fp32 on the os systolic array (its RTL builds int8 -> int32)"),
])
def test_a_format_the_rtl_cannot_build_is_refused_in_one_line(tmp_path, engine, needle):
    from tests.test_cli import tw
    arch = _yaml(tmp_path, engine)
    for args in (("rtl", "--arch", arch, "-o", str(tmp_path / "out")),
                 ("sim", "--model", "tiny-llama", "--arch", arch, "--rtl")):
        res = tw(*args)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert needle in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_rtl_fp8_core_lint_clean_with_the_documented_waivers():
    from tilewright.cosim.build import build
    from tilewright.cosim.verilator import lint
    ok, out = lint(build("fp8-core", Fp8Params(4, 4, "fp8-e4m3")))   # the build made above
    assert ok, out[-2000:]
