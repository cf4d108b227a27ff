"""``tilewright sim``: a tiny LLM layer's int8 GEMMs on the Verilated core, inside the functional
model (tilewright.app.flows.sim_rtl).

References: numpy's int64 matmul wrapped to int32 (every RTL GEMM), the functional model's own
run with numpy GEMMs (the layer output with the RTL's GEMMs must be bit-exact), the cycle model's
closed form (every RTL GEMM's cycles), torch's float forward pass (relative L2).
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import default_arch
from tilewright.compiler.layout import DoesNotFit, GemmLayout
from tilewright.dataflow_sim.functional import gemm_int8, int8_matmul, run_program
from tilewright.app.flows.sim_rtl import TORCH_REL_L2_BOUND, gemm_blocks, simulate_model

MODELS = ["tiny-llama", "tiny-moe", "tiny-mamba"]


@pytest.mark.parametrize("model", MODELS)
def test_every_int8_gemm_goes_through_the_hook(model):
    """A wrong int8 matmul changes the layer's output: the GEMMs the RTL answers are all of them."""
    from tilewright.dataflow_sim.compile_flow import compile_llm
    from tilewright.compiler.operand_formats import arch_for_format

    spec = arch_for_format(default_arch(), "int8")
    c = compile_llm(model, spec, fmt="int8")
    calls = []

    def off_by_one(a, b):
        calls.append(a.shape)
        return gemm_int8(a, b) + np.int32(1)

    with int8_matmul(off_by_one):
        bad = run_program(c.program, c.inputs)
    assert calls, "no int8 GEMM went through the hook"
    main = c.program.outputs[0]
    assert not np.array_equal(bad[main], c.outputs[main])
    again = run_program(c.program, c.inputs)          # hook removed again after the block
    assert np.array_equal(again[main], c.outputs[main])


def test_imem_batches_cover_the_gemms_in_order_and_fit_the_instruction_memory():
    """GEMMs whose code exceeds the controller's instruction memory run as several programs:
    consecutive ranges, each one's code within IMEM_WORDS, a single program when it fits."""
    from tilewright.app.flows.sim_rtl import imem_batches
    from tilewright.compiler.codegen import IMEM_WORDS, codegen_gemms
    from tests.test_accel_rtl import ARCHS

    arch = ARCHS["ws-narrow"]              # 4x4, 2 KiB buffers: many tiles per GEMM
    shapes = [(16, 64, 64), (4, 32, 128), (1, 128, 64)] * 8      # 1,648 words
    batches = imem_batches(shapes, arch)
    assert len(batches) > 1 and batches[0][0] == 0 and batches[-1][1] == len(shapes)
    assert all(a[1] == b[0] for a, b in zip(batches, batches[1:]))
    for lo, hi in batches:
        assert len(codegen_gemms(arch, shapes[lo:hi]).words) <= IMEM_WORDS
    assert imem_batches(shapes[:2], arch) == [(0, 2)]


def test_gemm_blocks_cover_the_output_and_fit():
    arch = default_arch().model_copy(update={"memory": default_arch().memory.model_copy(
        update={"scratchpad_kib": 1, "accumulator_kib": 1})})
    m, k, n = 40, 64, 100
    blocks = gemm_blocks(m, k, n, arch)
    assert len(blocks) > 1
    cover = np.zeros((m, n), int)
    for m0, m1, n0, n1 in blocks:
        cover[m0:m1, n0:n1] += 1
        GemmLayout.for_arch(arch, m1 - m0, k, n1 - n0).check_fits(arch)
    assert (cover == 1).all()
    with pytest.raises(DoesNotFit):
        gemm_blocks(8, 100_000, 8, arch)


@pytest.mark.parametrize("model", MODELS)
def test_model_gemms_on_rtl_bit_and_cycle_exact(model):
    res = simulate_model(model, default_arch(), rtl=True, driver="cocotb")
    by_name = {name: (ok, detail) for name, ok, detail in res.checks}
    assert all(ok for ok, _ in by_name.values()), res.checks
    assert res.rel_l2_vs_torch <= TORCH_REL_L2_BOUND
    assert len(res.gemm_rows) >= 4
    assert all(r["rtl"] == r["model"] > 0 for r in res.gemm_rows)


def test_cli_sim_fast_driver_and_user_errors(tmp_path):
    from tests.test_cli import tw

    arch = tmp_path / "arch.yaml"
    arch.write_text(default_arch().to_yaml())
    ok = tw("sim", "--model", "tiny-mamba", "--arch", str(arch), "--rtl", "--fast", "--gemms")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "RTL cycles == cycle model" in ok.stdout and "FAIL" not in ok.stdout
    assert "all cross-checks passed" in ok.stdout
    bad = tw("sim", "--model", "llama3-8b", "--arch", str(arch))
    assert bad.returncode == 2 and "tiny-llama" in bad.stderr and "Traceback" not in bad.stderr
    nofast = tw("sim", "--model", "tiny-mamba", "--arch", str(arch), "--fast")
    assert nofast.returncode == 2 and "--rtl" in nofast.stderr + nofast.stdout
    for extra, word in ((["--top", "axi-accel", "--fast"], "cocotb"),
                        (["--top", "axi-accel", "--trace", str(tmp_path / "w")], "--top accel"),
                        (["--top", "mesh"], "accepted: core, accel, axi-accel")):
        r = tw("sim", "--model", "tiny-mamba", "--arch", str(arch), "--rtl", *extra)
        out = r.stderr + r.stdout
        assert r.returncode == 2 and word in " ".join(out.split()) and "Traceback" not in out, out


def test_model_gemms_on_the_accelerator_top():
    """tiny-mamba's GEMMs through the ISA, the DMA and the external-memory model (the 4x4 WS
    top of tests/test_accel_rtl.py, 2-byte port: every word is several beats)."""
    from tests.test_accel_rtl import ARCHS

    res = simulate_model("tiny-mamba", ARCHS["ws-narrow"], rtl=True, top="accel")
    assert res.ok, res.checks
    assert [c[0] for c in res.checks][-1].startswith("RTL cycles == accelerator cycle model")
    assert len(res.gemm_rows) == 4 and all(r["rtl"] == r["model"] > 0 for r in res.gemm_rows)
    # the C++ fast driver of the same top: same checks, same cycles
    fast = simulate_model("tiny-mamba", ARCHS["ws-narrow"], rtl=True, top="accel", driver="fast")
    assert fast.ok, fast.checks
    assert [(r["op"], r["rtl"]) for r in fast.gemm_rows] == \
        [(r["op"], r["rtl"]) for r in res.gemm_rows]
    with pytest.raises(ValueError, match="cocotb"):
        simulate_model("tiny-mamba", ARCHS["ws-narrow"], rtl=True, top="axi-accel",
                       driver="fast")


BF16_ARCH = {"name": "bf16-ws4x4", "tensor_engine": {
    "rows": 4, "cols": 4, "dataflow": "ws", "input_format": "bf16", "weight_format": "bf16",
    "accumulator_format": "fp32"}, "memory": {"scratchpad_kib": 64, "accumulator_kib": 64}}


def test_bf16_layer_gemms_on_the_bf16_core():
    """A bf16 ArchSpec: tiny-mamba's bf16 GEMMs (fp32 accumulate) on the Verilated bf16 WS core,
    fp32 bit patterns equal to numerics, the layer replayed bit-exact, cycles = WS closed form."""
    from tilewright.arch import ArchSpec
    from tilewright.dataflow_sim.compile_flow import compile_llm
    from tilewright.dataflow_sim.functional import bf16_matmul
    from tilewright.dataflow_sim.numerics import sequential_fp32_matmul
    from tilewright.formats import element_values, get_format

    arch = ArchSpec.from_dict(BF16_ARCH)
    c = compile_llm("tiny-mamba", arch, fmt="bf16")
    f = get_format("bf16")
    seen = []

    def nudged(a, b, kb):           # the hook is live: a changed GEMM changes the layer output
        seen.append(kb)
        return sequential_fp32_matmul(element_values(a, f), element_values(b, f), kb) * 1.01

    with bf16_matmul(nudged):
        bad = run_program(c.program, c.inputs)
    out = c.program.outputs[0]
    assert seen and set(seen) == {4} and not np.array_equal(bad[out], c.outputs[out])
    res = simulate_model("tiny-mamba", arch, rtl=True)
    assert res.ok, res.checks
    assert res.checks[1][0].startswith("RTL bf16 GEMMs")
    assert all(r["rtl"] == r["model"] > 0 for r in res.gemm_rows)
