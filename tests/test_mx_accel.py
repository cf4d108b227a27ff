"""MX GEMMs on the accelerator top (ISA + DMA + the double-buffered MX core of rtl/mx_core.py;
element codes and E8M0 block-scale codes travel together in the A/B words,
:mod:`tilewright.compiler.layout`): ``tilewright sim --rtl --top accel`` on the MX presets.

References: numerics' MX rule (``numerics.gemm(qa, qb, fmt, k_block=32)`` of
:mod:`tilewright.dataflow_sim.numerics`), bit for bit on fp32 patterns (NaN as "is a NaN");
torch's float forward pass (relative L2 within the measured bound); the accelerator cycle model
(:mod:`tilewright.dataflow_sim.accel_timing`) for every GEMM, DMA included. One Verilator build
(the C++ fast driver of a ws32x2 MXFP8 accelerator, :func:`_arch`) serves the corner cases and
tiny-llama; the ws32x4-mxfp8 preset itself runs tiny-llama in the nightly run.
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import ArchSpec, load_arch
from tilewright.compiler.codegen import codegen
from tilewright.compiler.layout import GemmLayout
from tilewright.formats import QTensor, quantize

FMT = "mxfp8"
SPEC = load_arch("ws32x4-mxfp8")


def _arch(cols: int = 2) -> ArchSpec:
    """The ws32x4-mxfp8 preset with ``cols`` columns (the RTL tests' MX accelerator).

    Two columns build the same generator paths as four (the fp8 WS array, one Pow2Scale and
    Fp32Add per column, the B word's per-column E8M0 lanes above its element lanes, column
    folds with a partial last fold) in about half the Verilated C++ (Verilator + g++ is
    nearly all of these tests' time); the GEMMs' N (3..9) still span several folds."""
    d = SPEC.model_dump(mode="json")
    d["name"] = f"ws32x{cols}-mxfp8"
    d["tensor_engine"]["cols"] = cols
    return ArchSpec.model_validate(d)


def _corner_gemms(rng) -> list[tuple[str, QTensor, QTensor]]:
    def spread(shape, lo=-20, hi=20):
        return (rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)).astype(np.float32)

    def q(x, axis):
        return quantize(x, FMT, axis=axis)

    def rescaled(t: QTensor, code: int) -> QTensor:
        return QTensor(FMT, t.values, np.full_like(t.scales, code), t.axis, "block")
    g = [("random, partial blocks, 5 column folds", q(spread((5, 70)), 1), q(spread((70, 9)), 0))]
    # zero blocks: A's second block and B's first block all +0 codes (any scale)
    a, b = spread((4, 96)), spread((96, 6))
    a[:, 32:64], b[:32] = 0, 0
    g.append(("zero blocks", q(a, 1), q(b, 0)))
    # scale extremes: E8M0 codes 0 (2**-127) with B's 104 (2**-23): block dots land in fp32's
    # subnormals; 254 (2**127) with 200: to inf; 255 (numerics' 2**128) in one block of A
    qa, qb = q(spread((2, 64), -3, 3), 1), q(spread((64, 3), -3, 3), 0)
    g.append(("scales into subnormals", rescaled(qa, 0), rescaled(qb, 104)))
    g.append(("scales to inf", rescaled(qa, 254), rescaled(qb, 200)))
    top = qa.scales.copy()
    top[1, 0] = 255
    g.append(("scale code 255", QTensor(FMT, qa.values, top, 1, "block"), rescaled(qb, 100)))
    # a NaN element code (E4M3 S.1111.111; quantize never makes it)
    v = qa.values.view(np.uint8).copy()
    v[0, 7] = 0x7F
    g.append(("NaN code", QTensor(FMT, v.view(qa.values.dtype), qa.scales, 1, "block"), qb))
    # K beyond one buffer half (4100 on 32x2: 2100 fits there): codegen splits K into chunks
    # of whole blocks (acc=1 steps)
    g.append(("split K", q(spread((3, 4100)), 1), q(spread((4100, 5)), 0)))
    return g


def test_mx_words_carry_their_scales():
    """The A/B word sizes of the layout table (R + 1, 2 C bytes) and the image: every A word's
    top byte is its row's block scale, every B word's top C bytes its fold's column scales."""
    from tilewright.app.flows.sim_rtl import mx_gemm_program
    assert GemmLayout.word_bytes(SPEC) == {"a": 33, "b": 8, "c": 16}
    rng = np.random.default_rng(3)
    a = quantize(rng.standard_normal((3, 40)).astype(np.float32), FMT, axis=1)
    b = quantize(rng.standard_normal((40, 6)).astype(np.float32), FMT, axis=0)
    prog = mx_gemm_program([(a, b)], SPEC, "one")
    isa = codegen(prog, SPEC)
    seg = isa.segments[0]
    image = isa.image(SPEC, seg, a.values.view(np.int8), b.values.view(np.int8), a.scales,
                      b.scales)
    (t,) = seg.tiles
    w = isa.beat_bytes                                          # 32: an A word is 2 beats
    a_words = [image[t.a_addr + 2 * i] | image[t.a_addr + 2 * i + 1] << (8 * w)
               for i in range(2 * 3)]                           # (kb, m) order, KB = 2
    assert [x >> 256 for x in a_words] == a.scales.T.reshape(-1).tolist()
    assert [x & 0xFF for x in a_words[:3]] == a.values.view(np.uint8)[:, 0].tolist()
    b_top = [image[t.b_addr + i] >> 32 for i in range(2 * 2 * 32)]   # (nb, kb, r) order
    pad = np.full((2, 8), 127)                                  # padded columns: 2**0
    pad[:, :6] = b.scales
    want = [int.from_bytes(bytes(pad[kb, nb * 4:nb * 4 + 4].tolist()), "little")
            for nb in range(2) for kb in range(2) for _ in range(32)]
    assert b_top == want
    with pytest.raises(ValueError, match="xa must be the 3x2 E8M0 block-scale codes"):
        isa.image(SPEC, seg, a.values.view(np.int8), b.values.view(np.int8))
    from tilewright.cosim.program_jobs import prepare_core   # the host-driven core has no scales
    with pytest.raises(ValueError, match="task g0 is an MX GEMM .* runs on the accelerator top"):
        prepare_core(prog, SPEC)


def test_mx_corner_cases_on_the_accelerator_bit_exact_and_cycle_exact():
    from tilewright.app.flows.sim_rtl import mx_gemm_program
    from tilewright.cosim.sim import run
    from tilewright.dataflow_sim.numerics import gemm
    spec = _arch()
    gemms = _corner_gemms(np.random.default_rng(11))
    prog = mx_gemm_program([(a, b) for _, a, b in gemms], spec, "mx-corners")
    split = codegen(prog, spec).segment("g6").tiles
    assert any(t.k0 > 0 for t in split), "the split-K case must be split"
    sim = run("accel", prog, spec, driver="fast")
    got = {}
    for i, (what, a, b) in enumerate(gemms):
        with np.errstate(over="ignore", invalid="ignore"):
            ref = gemm(a, b, FMT, k_block=32)
        got[what] = c = np.ascontiguousarray(sim.outputs[f"c{i}"]).view(np.float32)
        rn = np.isnan(ref)
        np.testing.assert_array_equal(np.isnan(c), rn, err_msg=f"{what}: NaN positions")
        np.testing.assert_array_equal(c.view(np.uint32)[~rn], ref.view(np.uint32)[~rn],
                                      err_msg=what)
    sub = np.abs(got["scales into subnormals"])
    assert ((sub > 0) & (sub < 2.0 ** -126)).any()
    assert np.isinf(got["scales to inf"]).any()
    assert np.isnan(got["NaN code"][0]).all() and not np.isnan(got["NaN code"][1]).any()
    rows = sim.comparison(spec)
    assert len(rows) == len(gemms)
    assert [(r["rtl_cycles"]) for r in rows] == [r["model_cycles"] for r in rows]


def _tiny_llama(spec: ArchSpec, driver: str):
    from tilewright.app.flows.sim_rtl import MX_REL_L2_BOUND, simulate_model
    fmt = spec.tensor_engine.input_format
    res = simulate_model("tiny-llama", spec, rtl=True, top="accel", driver=driver)
    names = [c[0] for c in res.checks]
    assert res.ok, res.checks
    assert f"RTL {fmt} GEMMs == numerics (fp32 bit patterns)" in names
    assert "layer output with RTL GEMMs == functional (bit-exact)" in names
    assert any(n.startswith("RTL cycles == accelerator cycle model") for n in names)
    assert res.gemm_rows and all(r["rtl"] == r["model"] for r in res.gemm_rows)
    assert 0 < res.rel_l2_vs_torch <= MX_REL_L2_BOUND[fmt]


def test_sim_tiny_llama_mxfp8_on_the_accelerator_passes_every_check():
    _tiny_llama(_arch(), "fast")


@pytest.mark.nightly
@pytest.mark.parametrize("arch,driver", [("ws32x4-mxint8", "fast"), ("ws32x4-mxfp8", "fast"),
                                         ("ws32x4-mxfp8", "cocotb")])
def test_sim_tiny_llama_mx_nightly(arch, driver):
    """The MX presets as shipped (4 columns), and the cocotb bench (three more Verilator
    builds; the default run's ws32x2 MXFP8 accelerator runs the same generator paths)."""
    _tiny_llama(load_arch(arch), driver)
