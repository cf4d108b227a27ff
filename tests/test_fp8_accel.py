"""fp8 GEMMs on the accelerator top (ISA + DMA + the double-buffered fp8 core of
rtl/systolic_fp8.py, per-tensor scales through the SCALE instruction, per-output-channel weight
scales through SCALE_COL): ``tilewright sim --rtl
--top accel`` on the fp8 presets.

References: numerics' fp32 arithmetic (``numerics.gemm`` on the same QTensors, steps 1-4 of
:mod:`tilewright.dataflow_sim.numerics`, ml_dtypes' fp8 element values), bit for bit; torch's
float forward pass (relative L2 within the measured bound); the accelerator cycle model
(:mod:`tilewright.dataflow_sim.accel_timing`) for every GEMM, DMA included.
"""

from __future__ import annotations

import re

import numpy as np

from tilewright.arch import load_arch
from tilewright.formats import QTensor, get_format


def test_sim_tiny_llama_e4m3_on_the_accelerator_passes_every_check():
    from tilewright.app.flows.sim_rtl import FP8_REL_L2_BOUND, simulate_model
    res = simulate_model("tiny-llama", load_arch("ws4x4-fp8"), rtl=True, top="accel")
    names = [c[0] for c in res.checks]
    assert res.ok, res.checks
    assert "RTL fp8-e4m3 GEMMs == numerics (fp32 bit patterns)" in names
    assert "layer output with RTL GEMMs == functional (bit-exact)" in names
    assert any(n.startswith("RTL cycles == accelerator cycle model") for n in names)
    assert res.gemm_rows and all(r["rtl"] == r["model"] for r in res.gemm_rows)
    # every GEMM scaled by the top: attention's (per-tensor, SCALE) and the projections'
    # (per-output-channel weight scales, SCALE_COL); none by the host
    detail = {c[0]: c[2] for c in res.checks}["RTL fp8-e4m3 GEMMs == numerics (fp32 bit patterns)"]
    got = re.search(r"scales applied by the top for all (\d+) GEMMs: (\d+) per-tensor \(SCALE\), "
                    r"(\d+) per output channel \(SCALE_COL\); none on the host", detail)
    assert got and int(got[1]) == 15 == int(got[2]) + int(got[3]), detail
    assert int(got[2]) > 0 and int(got[3]) > 0, detail
    assert 0 < res.rel_l2_vs_torch <= FP8_REL_L2_BOUND["fp8-e4m3"]


def _q(codes: np.ndarray, fmt: str, axis: int, scale: float | None) -> QTensor:
    """A QTensor of raw fp8 codes with one fp32 scale (or none)."""
    dt = np.dtype(get_format(fmt).dtype)
    return QTensor(fmt, codes.view(dt), None if scale is None else
                   np.full((1, 1), scale, np.float32), axis, "none" if scale is None else "tensor")


def _qc(codes: np.ndarray, fmt: str, col_scales) -> QTensor:
    """A K x N QTensor of raw fp8 codes with one fp32 scale per output column."""
    dt = np.dtype(get_format(fmt).dtype)
    return QTensor(fmt, codes.view(dt), np.asarray(col_scales, np.float32).reshape(1, -1), 0,
                   "channel")


def _same_bits(got: np.ndarray, ref: np.ndarray) -> bool:
    """fp32 results equal bit for bit, any NaN equal to any NaN (the RTL's is canonical)."""
    rn = np.isnan(ref)
    return bool((np.isnan(got) == rn).all()
                and (got.view(np.uint32)[~rn] == ref.view(np.uint32)[~rn]).all())


def test_e5m2_corner_cases_and_scales_on_the_accelerator_bit_exact():
    """inf, NaN, inf - inf, subnormal codes, saturated codes through the ISA/DMA path (scale
    1.0: no scale); then per-tensor scales, applied by the top (SCALE) as C is stored: a power
    of two, an arbitrary pair (s_a * s_b rounded), results overflowing to inf, subnormal
    results, s_a * s_b overflowing (0 * inf = NaN) and underflowing, a NaN scale; then
    per-output-channel B scales (SCALE_COL) on N = 9 > the array's 4 columns, so each output
    tile's lanes must take their own columns' scales: inf/NaN/0 column scales, subnormal,
    underflowing and overflowing s_a * s_b[j], mixed finite columns. Reference: numerics.gemm
    (steps 1-4) on the same QTensors; one Verilator build (the preset's top)."""
    from tilewright.app.flows.sim_rtl import fp8_gemm_program
    from tilewright.cosim.sim import run
    from tilewright.dataflow_sim.numerics import gemm
    fmt = "fp8-e5m2"
    spec = load_arch("ws4x4-fp8-e5m2")
    rng = np.random.default_rng(7)
    rand = [(rng.integers(0, 256, (m, k)).astype(np.uint8),
             rng.integers(0, 256, (k, n)).astype(np.uint8)) for m, k, n in [(6, 9, 5), (3, 17, 8)]]
    sub = (rng.integers(0, 4, (5, 8)) | (rng.integers(0, 2, (5, 8)) << 7)).astype(np.uint8)
    sat = np.array([[0x7B, 0xFB, 0x7B, 0x7B], [0x7C, 0x38, 0xFC, 0x38]], np.uint8)  # max, inf
    pairs = [(a, b, None, None) for a, b in
             rand + [(sub, sub.T.copy()), (sat, np.full((4, 3), 0x7B, np.uint8))]]
    # finite codes (exponent field < 31): magnitudes 2**-16 .. 57344, both signs
    fin = [(rng.integers(0, 0x7C, (m, k)) | (rng.integers(0, 2, (m, k)) << 7)).astype(np.uint8)
           for m, k in [(5, 7), (7, 6)]]
    fin[0][0] = 0                          # a zero row: 0 * inf = NaN when s_a * s_b is inf
    big = np.full((3, 4), 0x7B, np.uint8)                                      # 57344
    scaled = [(0.125, 4.0), (0.0173, 3.7), (2.0**100, 2.0**20), (2.0**-120, 2.0**-20),
              (2.0**100, 2.0**100), (2.0**-80, 2.0**-60), (float("nan"), 1.5)]
    pairs += [(fin[0], fin[1], sa, sb) for sa, sb in scaled]
    pairs += [(big, big.T.copy(), 2.0**100, 2.0)]                 # 4 * 57344**2 * 2**101: inf
    pairs += [(fin[0], fin[1], None, None)]        # no SCALE: its run starts again at 1.0
    qs = [(_q(a, fmt, 1, sa), _q(b, fmt, 0, sb)) for a, b, sa, sb in pairs]
    # per output channel B scales (SCALE_COL), N = 9 on 4 columns: tiles of 4, 4, 1 columns;
    # an inf, a NaN and a zero column scale, s_a * s_b[j] subnormal, underflowing to 0 and
    # overflowing; A unscaled; then one on top of a per-tensor A scale of 2**127, large codes
    wide = (rng.integers(0, 0x7C, (7, 9)) | (rng.integers(0, 2, (7, 9)) << 7)).astype(np.uint8)
    cols = [3.7, np.inf, np.nan, 0.0, 2.0**-126, 2.0**100, -1.5, 2.0**-149, 0.011]
    big_cols = [2.0**100, 1.0, 2.0**-127, 0.3, 2.0**28, -2.0**27, 5.0, 2.0**-140, 1.0]
    chan = [(fin[0], wide, 2.0**-20, cols), (fin[0], wide, None, cols[::-1]),
            (np.full((2, 7), 0x7B, np.uint8), wide, 2.0**127, big_cols)]
    qs += [(_q(a, fmt, 1, sa), _qc(b, fmt, sb)) for a, b, sa, sb in chan]
    pairs += chan
    sim = run("accel", fp8_gemm_program(qs, spec, "fp8-corners"), spec)
    got = [np.ascontiguousarray(sim.outputs[f"c{i}"]).view(np.float32) for i in range(len(qs))]
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        refs = [gemm(qa, qb, fmt, acc="fp32", k_block=4) for qa, qb in qs]
    for i, (g, r) in enumerate(zip(got, refs)):
        assert _same_bits(g, r), f"GEMM {i} (scales {pairs[i][2:]}): {g} != {r}"
    assert np.isnan(got[0]).any()                                 # random codes hit NaN/inf
    assert (got[3][0] == 3 * 57344.0**2 - 57344.0**2).all() and np.isnan(got[3][1]).all()
    s = len(rand) + 2                                              # the first scaled GEMM
    assert np.isposinf(np.abs(got[s + 2])).any()                   # overflow to inf
    tiny = np.abs(got[s + 3][got[s + 3] != 0])
    assert tiny.size and (tiny < np.finfo(np.float32).tiny).any()  # subnormal results
    assert np.isnan(got[s + 4][0]).all() and np.isinf(got[s + 4][1:]).any()  # s = inf
    assert np.isnan(got[s + 6]).all()                              # a NaN scale
    c = len(pairs) - len(chan)                                     # the first per-channel GEMM
    assert np.isposinf(got[c - 2]).all()
    # mutations: one ulp off in s_a, or the scales left to the host, and the check fails
    qa, qb = qs[s + 1]
    wrong = _q(fin[0], fmt, 1, float(np.nextafter(np.float32(0.0173), np.float32(1))))
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        assert not _same_bits(got[s + 1], gemm(wrong, qb, fmt, acc="fp32", k_block=4))
        assert not _same_bits(got[s + 1], got[c - 1])
    col = got[c]
    assert np.isnan(col[:, 2]).all() and np.isnan(col[0, 1])      # NaN scale; 0 * inf
    assert np.isinf(col[1:, 1]).all() and (col[:, 3] == 0).all()  # inf, 0 scale
    tiny = np.abs(col[:, 4][col[:, 4] != 0])
    assert tiny.size and (tiny < np.finfo(np.float32).tiny).any()  # s_a * s_b[4] subnormal
    assert (col[:, 7] == 0).all()                                  # s_a * s_b[7] underflows
    assert np.isinf(got[c + 2][:, 0]).all() and np.isfinite(got[c + 2][:, 2]).all()
    # mutations: the column scales one tile off (tile 0's lanes reading tile 1's scales), or
    # the product rounded the other way (fl32(fl32(acc * s_a) * s_b[j]): acc * 2**127
    # overflows where s_a * s_b[2] = 1 keeps it finite): each fails the comparison
    off = _qc(wide, fmt, cols[4:8] + cols[:4] + cols[8:])
    big_acc = gemm(_q(chan[2][0], fmt, 1, None), _q(wide, fmt, 0, None), fmt, acc="fp32",
                   k_block=4)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        assert not _same_bits(got[c], gemm(qs[c][0], off, fmt, acc="fp32", k_block=4))
        two_step = ((big_acc * np.float32(2.0**127)).astype(np.float32)
                    * np.asarray(big_cols, np.float32)[None, :]).astype(np.float32)
    assert not _same_bits(got[c + 2], two_step)
    assert all(c["rtl_cycles"] == c["model_cycles"] for c in sim.comparison(spec))


def test_fp8_sim_on_another_top_is_refused_in_one_line():
    from tests.test_cli import tw
    res = tw("sim", "--model", "tiny-llama", "--arch", "ws4x4-fp8", "--rtl")    # --top core
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "ws4x4-fp8: an fp8-e4m3 ArchSpec runs its GEMMs on the accelerator top" in res.stderr
