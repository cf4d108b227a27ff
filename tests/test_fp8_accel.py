"""fp8 GEMMs on the accelerator top (ISA + DMA + the double-buffered fp8 core of
rtl/systolic_fp8.py): ``tilewright sim --rtl --top accel`` on the fp8 presets.

References: numerics' fp32 arithmetic (``sequential_fp32_matmul`` on ml_dtypes' fp8 element
values, steps 1-3 of :mod:`tilewright.dataflow_sim.numerics`), bit for bit; torch's float forward
pass (relative L2 within the measured bound); the accelerator cycle model
(:mod:`tilewright.dataflow_sim.accel_timing`) for every GEMM, DMA included.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tilewright.arch import load_arch


def test_sim_tiny_llama_e4m3_on_the_accelerator_passes_every_check():
    from tilewright.app.flows.sim_rtl import FP8_REL_L2_BOUND, simulate_model
    res = simulate_model("tiny-llama", load_arch("ws4x4-fp8"), rtl=True, top="accel")
    names = [c[0] for c in res.checks]
    assert res.ok, res.checks
    assert "RTL fp8-e4m3 GEMMs == numerics (fp32 bit patterns)" in names
    assert "layer output with RTL GEMMs == functional (bit-exact)" in names
    assert any(n.startswith("RTL cycles == accelerator cycle model") for n in names)
    assert res.gemm_rows and all(r["rtl"] == r["model"] for r in res.gemm_rows)
    assert 0 < res.rel_l2_vs_torch <= FP8_REL_L2_BOUND["fp8-e4m3"]


def test_e5m2_corner_cases_on_the_accelerator_bit_exact():
    """inf, NaN, inf - inf, subnormal codes, saturated codes through the ISA/DMA path."""
    from tilewright.app.flows.sim_rtl import gemm_program
    from tilewright.cosim.sim import run
    from tilewright.dataflow_sim.numerics import sequential_fp32_matmul
    from tilewright.formats import element_values
    spec = load_arch("ws4x4-fp8-e5m2")
    rng = np.random.default_rng(7)
    rand = [(rng.integers(0, 256, (m, k)).astype(np.uint8),
             rng.integers(0, 256, (k, n)).astype(np.uint8)) for m, k, n in [(6, 9, 5), (3, 17, 8)]]
    sub = (rng.integers(0, 4, (5, 8)) | (rng.integers(0, 2, (5, 8)) << 7)).astype(np.uint8)
    sat = np.array([[0x7B, 0xFB, 0x7B, 0x7B], [0x7C, 0x38, 0xFC, 0x38]], np.uint8)  # max, inf
    pairs = rand + [(sub, sub.T.copy()), (sat, np.full((4, 3), 0x7B, np.uint8))]
    sim = run("accel", gemm_program([(a.view(np.int8), b.view(np.int8)) for a, b in pairs],
                                    spec, "fp8-corners"), spec)
    dt = ml_dtypes.float8_e5m2
    for i, (a, b) in enumerate(pairs):
        with np.errstate(invalid="ignore", over="ignore"):
            ref = sequential_fp32_matmul(element_values(a.view(dt), "fp8-e5m2"),
                                         element_values(b.view(dt), "fp8-e5m2"), 4)
        got = np.ascontiguousarray(sim.outputs[f"c{i}"]).view(np.float32)
        rn = np.isnan(ref)
        np.testing.assert_array_equal(np.isnan(got), rn, err_msg=f"GEMM {i}: NaN positions")
        np.testing.assert_array_equal(got.view(np.uint32)[~rn], ref.view(np.uint32)[~rn],
                                      err_msg=f"GEMM {i}")
    assert np.isnan(sim.outputs["c0"].view(np.float32)).any()        # random codes hit NaN/inf
    last = np.ascontiguousarray(sim.outputs["c3"]).view(np.float32)
    assert (last[0] == 3 * 57344.0**2 - 57344.0**2).all() and np.isnan(last[1]).all()
    assert all(c["rtl_cycles"] == c["model_cycles"] for c in sim.comparison(spec))


def test_fp8_sim_on_another_top_is_refused_in_one_line():
    from tests.test_cli import tw
    res = tw("sim", "--model", "tiny-llama", "--arch", "ws4x4-fp8", "--rtl")    # --top core
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "ws4x4-fp8: an fp8-e4m3 ArchSpec runs its GEMMs on the accelerator top" in res.stderr
