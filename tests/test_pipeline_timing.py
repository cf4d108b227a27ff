"""Timing-closure pipeline stages (``tensor_engine.pipeline``): ArchSpec, closed form, RTL.

Each stage is one register (after the A/B buffer reads; on each PE's product) and adds exactly one
cycle per GEMM. Checked against independent references: the WS array's results against numpy
matmuls cycle by cycle (Amaranth's simulator), and the Verilated core's outputs against numpy and
its measured ``busy`` cycles against the cycle model, with the stages on.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.pysim_harness import run_core_gemms, ws_stream
from tilewright.arch import ArchSpec, ArchSpecError, default_arch
from tilewright.dataflow_sim.cycle import gemm_cycles
from tests.rtl_suite import _cache_dir, _tool_check  # noqa: F401  (session fixtures)
from tilewright.rtl.systolic import WeightStationaryArray, ws_latency_cycles


#: every stage of the core on (``host_read`` adds no GEMM cycle: the host's read takes two)
_ALL = {"sram_read": True, "pe_operand": True, "pe_product": True, "acc_read": True,
        "acc_write": True, "host_read": True}


def _arch(rows=2, cols=2, dataflow="ws", fmt="int8", **pipeline) -> ArchSpec:
    base = default_arch().model_dump(mode="json")
    te = {**base["tensor_engine"], "rows": rows, "cols": cols, "dataflow": dataflow,
          "input_format": fmt, "weight_format": fmt,
          "accumulator_format": "int32" if fmt == "int8" else "fp32"}
    if pipeline:
        te["pipeline"] = pipeline
    return ArchSpec.from_dict({**base, "name": f"pipe{rows}x{cols}", "tensor_engine": te,
                               "memory": {"scratchpad_kib": 32, "accumulator_kib": 16}})


def test_pipeline_off_keeps_yaml_and_hash():
    plain = _arch()
    off = _arch(sram_read=False, pe_product=False)
    assert off.content_hash() == plain.content_hash()
    assert "pipeline" not in plain.to_yaml()
    on = _arch(sram_read=True)
    assert on.content_hash() != plain.content_hash()
    assert ArchSpec.from_yaml(on.to_yaml()) == on
    assert (plain.tensor_engine.pipeline_cycles, on.tensor_engine.pipeline_cycles,
            _arch(sram_read=True, pe_product=True).tensor_engine.pipeline_cycles) == (0, 1, 2)
    # pe_operand off is left out of the section, so a design written before it keeps its hash
    assert "pe_operand" not in on.to_yaml() and "acc_write" not in on.to_yaml()
    assert _arch(sram_read=True, pe_operand=False).content_hash() == on.content_hash()
    op = _arch(sram_read=True, pe_operand=True)
    assert op.content_hash() != on.content_hash() and ArchSpec.from_yaml(op.to_yaml()) == op


@pytest.mark.parametrize("kw", [dict(dataflow="os"), dict(dataflow="is"),
                                dict(fmt="bf16")])
def test_pipeline_refused_where_not_built(kw):
    with pytest.raises(ArchSpecError, match=r"tensor_engine\.pipeline\.pe_product = true: "
                                            r"pipeline stages are built for kind 'systolic'"):
        _arch(pe_product=True, **kw)


def test_acc_read_refused_on_1x1():
    with pytest.raises(ArchSpecError, match=r"pipeline\.acc_read = true: needs a fold period"):
        _arch(1, 1, acc_read=True)


@pytest.mark.parametrize("rows,cols,ok", [(1, 2, False), (2, 1, True), (1, 3, True)])
def test_acc_write_needs_the_read_to_write_distance(rows, cols, ok):
    """acc_read and acc_write: the read-modify-write writes 3 cycles after its read, so the
    fold period 2R + C - 2 must be at least 3 (1x2: 2, refused; 2x1 and 1x3: 3)."""
    if ok:
        assert _arch(rows, cols, acc_read=True, acc_write=True).tensor_engine.pipeline_cycles == 2
    else:
        with pytest.raises(ArchSpecError, match=r"pipeline\.acc_write = true: needs a fold "
                                                r"period of at least 3 cycles.*2R \+ C - 2 = 2"):
            _arch(rows, cols, acc_read=True, acc_write=True)


def test_pipeline_refused_for_tile_engines():
    base = default_arch().model_dump(mode="json")
    with pytest.raises(ArchSpecError, match="pipeline.sram_read = true"):
        ArchSpec.from_dict({**base, "tensor_engine": {"kind": "cube", "rows": 2, "cols": 2,
                                                      "depth": 2,
                                                      "pipeline": {"sram_read": True}}})


@pytest.mark.parametrize("R,C", [(2, 3), (1, 1), (3, 2)])
@pytest.mark.parametrize("operand,product", [(False, True), (True, False), (True, True)])
def test_ws_array_multiply_registers_add_their_cycles(R, C, operand, product):
    """With ``pe_operand`` and/or ``pe_product`` each result row leaves rows + cols - 1 cycles
    after its activation row plus one per register, and equals numpy's A @ B."""
    rng = np.random.default_rng(7 * R + C)
    M = 4
    A = rng.integers(-128, 128, (M, R))
    B = rng.integers(-128, 128, (R, C))
    A[0, :], B[:, 0] = -128, -128
    dut = WeightStationaryArray(rows=R, cols=C, pe_product=product, pe_operand=operand)
    extra = int(operand) + int(product)
    seen = ws_stream(dut, A, B, M + R + C + 4)
    assert dut.pe_cycles == extra and ws_latency_cycles(R, C, extra) == R + C - 1 + extra
    assert [s[0] for s in seen] == [m + R + C - 1 + extra for m in range(M)]
    np.testing.assert_array_equal(np.array([s[1] for s in seen]), A @ B)


def test_ws_array_pe_product_validated():
    with pytest.raises(TypeError, match="pe_product must be a bool"):
        WeightStationaryArray(rows=2, cols=2, pe_product=1)
    with pytest.raises(TypeError, match="pe_operand must be a bool"):
        WeightStationaryArray(rows=2, cols=2, pe_operand="yes")


def test_cycle_model_adds_one_cycle_per_stage():
    """Closed form: R + (F-1)·max(M, 2R+C-2) + M + R + C + 1 + stages (docs/design.md)."""
    R, C, M, K, N = 3, 5, 7, 10, 11
    F = -(-K // R) * -(-N // C)
    closed = R + (F - 1) * max(M, 2 * R + C - 2) + M + R + C + 1
    for kw, extra in (({}, 0), ({"sram_read": True}, 1), ({"pe_product": True}, 1),
                      ({"pe_operand": True}, 1), ({"acc_read": True}, 1),
                      ({"acc_write": True}, 1),
                      ({"sram_read": True, "pe_product": True}, 2), (_ALL, 5)):
        assert gemm_cycles(_arch(R, C, **kw), M, K, N).cycles == closed + extra


@pytest.mark.verilator
@pytest.mark.slow
@pytest.mark.parametrize("rows,cols,stages", [(3, 5, _ALL)], ids=["3x5-all"])
def test_pipelined_core_bit_and_cycle_exact(rows, cols, stages, _tool_check, _cache_dir):
    """The RTL suite's GEMMs on the Verilated core with the stages on: outputs = numpy, busy
    cycles = the cycle model (which counts the stages); through both drivers, since each reads
    the accumulator with ``host_read``'s two-cycle latency its own way."""
    for driver in ("cocotb", "fast"):
        _check_gemm_suite("core", _arch(rows, cols, **stages), seed=rows * 100 + cols,
                          driver=driver)


def _check_gemm_suite(top, arch: ArchSpec, seed: int, driver: str = "cocotb") -> None:
    """The RTL suite's GEMMs on co-simulation ``top`` for ``arch``: every output = numpy's int32
    matmul, every GEMM's busy cycles = the cycle model."""
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.suites import gemm_suite, suite_shapes
    program, inputs = gemm_suite(arch, seed=seed)
    run = cosim.run(top, program, arch, inputs=inputs, driver=driver)
    assert len(run.records) == len(suite_shapes(arch))
    for task, rec in zip(program.gemms(), run.records):
        a, b = inputs[task.a], inputs[task.b]
        ref = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.uint32).astype(np.int32)
        np.testing.assert_array_equal(run.outputs[task.out], ref, err_msg=task.name)
        model = gemm_cycles(arch, task.m, task.k, task.n).cycles
        assert rec["cycles"] == model, f"{task.name}: RTL {rec['cycles']}, model {model}"


def _sim_core(arch: ArchSpec, shapes, seed: int = 0):
    """Run GEMMs of ``shapes`` on GemmCore in Amaranth's simulator; returns [(C, busy cycles)]."""
    from tilewright.compiler.layout import GemmLayout, pack_lanes, unpack_lanes
    from tilewright.rtl.gemm_core import GemmCore
    from tilewright.rtl.systolic import ACC_BITS, ELEMENT_BITS
    rng = np.random.default_rng(seed)
    dut = GemmCore(arch)
    jobs = []
    for m_, k_, n_ in shapes:
        a = rng.integers(-128, 128, (m_, k_)).astype(np.int8)
        b = rng.integers(-128, 128, (k_, n_)).astype(np.int8)
        jobs.append((a, b, GemmLayout.for_arch(arch, m_, k_, n_)))
    runs = run_core_gemms(dut, [(lay, pack_lanes(lay.a_lanes(a), ELEMENT_BITS),
                                 pack_lanes(lay.b_lanes(b), ELEMENT_BITS)) for a, b, lay in jobs])
    return [(lay.c_from_lanes(unpack_lanes(r.acc, arch.tensor_engine.cols, ACC_BITS)), r.counter,
             a, b) for r, (a, b, lay) in zip(runs, jobs)]


#: small GEMMs: one fold, folds in K and N, ragged edges, M = 1 (period bound by the array)
_SHAPES = [(1, 1, 1), (3, 2, 2), (1, 5, 3), (5, 3, 4), (2, 4, 1)]


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 2), (2, 1), (2, 2)])
@pytest.mark.parametrize("stages", [{}, {"sram_read": True}, {"pe_product": True},
                                    {"pe_operand": True}, {"acc_read": True},
                                    {"acc_write": True}, {"host_read": True}, _ALL],
                         ids=["off", "sram_read", "pe_product", "pe_operand", "acc_read",
                              "acc_write", "host_read", "all"])
def test_core_sim_bit_and_cycle_exact(rows, cols, stages):
    """Amaranth's simulator of the core (every small shape, 1x1 included, stages on and off):
    C = numpy's int32 matmul, busy cycles = the cycle model."""
    period = 2 * rows + cols - 2                       # the accumulator's stages need
    while 1 + stages.get("acc_read", 0) + stages.get("acc_write", 0) > max(period, 1) and (
            stages.get("acc_read") or stages.get("acc_write")):    # period >= 1 + stages
        stages = {**stages, ("acc_write" if stages.get("acc_write") else "acc_read"): False}
    arch = _arch(rows, cols, **stages)
    for (m_, k_, n_), (c, cyc, a, b) in zip(_SHAPES, _sim_core(arch, _SHAPES, rows * 10 + cols)):
        ref = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.uint32).astype(np.int32)
        np.testing.assert_array_equal(c, ref, err_msg=f"{m_}x{k_}x{n_}")
        assert cyc == gemm_cycles(arch, m_, k_, n_).cycles, f"{m_}x{k_}x{n_}"


@pytest.mark.parametrize("rows,cols", [(1, 1), (2, 3)])
def test_os_core_sim_bit_and_cycle_exact(rows, cols):
    """The OS core shares the run state (the fold counter ``t``) with WS: same check, no stages."""
    arch = _arch(rows, cols, "os")
    for (m_, k_, n_), (c, cyc, a, b) in zip(_SHAPES, _sim_core(arch, _SHAPES, rows + cols)):
        ref = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.uint32).astype(np.int32)
        np.testing.assert_array_equal(c, ref, err_msg=f"{m_}x{k_}x{n_}")
        assert cyc == gemm_cycles(arch, m_, k_, n_).cycles, f"{m_}x{k_}x{n_}"


@pytest.mark.verilator
@pytest.mark.slow
@pytest.mark.nightly      # one more accelerator build (12 min at load average 17); .ci/nightly
def test_pipelined_accelerator_top_bit_and_cycle_exact(_tool_check, _cache_dir):
    """The programmable accelerator (double-buffered core, K-split GEMMs accumulating onto the
    accumulator's contents) with every stage on: C = numpy, each GEMM segment's cycles and
    instructions = the accelerator cycle model (which adds the stages to every GEMM command)."""
    from tests.test_accel_rtl import SHAPES, _arch as accel_arch, check_gemm_segments
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.suites import gemm_suite
    base = accel_arch("ws", 1.0, 20.0).model_dump(mode="json")
    base["tensor_engine"]["pipeline"] = {**_ALL, "fetch": True, "issue": True}    # and the controller's
    arch = ArchSpec.from_dict({**base, "name": "accel-ws4x4-pipelined"})
    prog, inputs = gemm_suite(arch, SHAPES, seed=7)
    run = cosim.run("accel", prog, arch, inputs=inputs)
    multi_tile, k_split = check_gemm_segments(prog, inputs, run, arch)
    assert multi_tile >= 2 and k_split == 2
    base["tensor_engine"]["pipeline"]["issue"] = False       # the model blind to the stage
    blind = ArchSpec.from_dict({**base, "name": "accel-ws4x4-ecp5"})
    for task, rec in zip(prog.gemms(), run.records, strict=True):
        pred = predict_segment(run.isa, run.isa.segment(task.name), blind)
        assert rec["cycles"] > pred.cycles, task.name


def _ecp5_accel_top():
    """The "accel" co-simulation top built as the FPGA flow builds it for ECP5 (each PE's
    multiply a MULT18X18D with its own registers; A, B, the accumulator and the controller's
    instruction memory of DP16KD tiles whose output registers are the ``sram_read``,
    ``acc_read`` and ``fetch`` stages), with the primitives' behavioural models appended."""
    from dataclasses import replace
    from pathlib import Path
    from tilewright.cosim.tops import get_top
    from tilewright.rtl.accel_top import write_accel_rtl
    from tilewright.rtl.fpga_primitives import FpgaFamily, with_sim_models

    def write(arch, rtl_dir):
        vfile = Path(write_accel_rtl(arch, rtl_dir, FpgaFamily("ecp5")))
        vfile.write_text(with_sim_models(vfile.read_text()))
    return replace(get_top("accel"), name="accel-ecp5", write=write)


@pytest.mark.verilator
@pytest.mark.slow
def test_ecp5_accelerator_bit_and_cycle_exact(tmp_path, _tool_check, _cache_dir):
    """The ECP5 build of the programmable accelerator, Verilated with the primitives' models,
    every stage on (the controller's ``fetch`` and ``issue`` too): each GEMM segment's C = numpy
    (multi-tile and K-split segments), its cycles and instructions = the accelerator cycle
    model, which counts the GEMM stages in every GEMM, the fetch stage once per run and the
    issue stage once per unit instruction — and without the issue stage's cycles the model
    disagrees with every segment."""
    from tests.test_accel_rtl import SHAPES, _arch as accel_arch, check_gemm_segments
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.suites import gemm_suite
    from tilewright.dataflow_sim.accel_timing import predict_segment
    from tilewright.rtl.accel_top import ACCEL_TOP_NAME
    from tilewright.rtl.controller import PREFETCH_WORDS
    base = accel_arch("ws", 1.0, 20.0).model_dump(mode="json")
    base["tensor_engine"]["pipeline"] = {**_ALL, "fetch": True, "issue": True}
    arch = ArchSpec.from_dict({**base, "name": "accel-ws4x4-ecp5"})
    top = _ecp5_accel_top()
    top.write(arch, tmp_path)
    text = (tmp_path / f"{ACCEL_TOP_NAME}.v").read_text()
    tiles = {name: regmode for regmode, name in re.findall(
        r'^\s*DP16KD #\([^;]*?\.REGMODE_B\("(\w+)"\)[^;]*?\)\s*\\?(\w+)\s*\(', text, re.M)}
    # the instruction memory, A, B, the accumulator's engine read (r0) and host read (r1): every
    # tile reads through its output register; the instruction memory's loads every cycle
    # (OCEB high), feeding the controller's prefetch buffer (registers in the fabric)
    assert {t.split("_r")[0] + "_r" + t.split("_r")[1][0] for t in tiles} == {
        "imem_r0", "mem_a_r0", "mem_b_r0", "mem_acc_r0", "mem_acc_r1"}
    assert set(tiles.values()) == {"OUTREG"}
    ports = {p: dict(re.findall(rf"\\?(imem_r0_t\d+)\s*\([^;]*?\.{p}\(([^)]*)\)", text,
                                re.S)) for p in ("CEB", "OCEB")}
    assert len(ports["OCEB"]) == 4 and set(ports["OCEB"].values()) == {"1'h1"}
    assert ports["CEB"].keys() == ports["OCEB"].keys() and "1'h1" not in ports["CEB"].values()
    assert len(re.findall(r"reg \[\d+:0\] \\?prefetch\d\b", text)) == PREFETCH_WORDS
    assert len(re.findall(r"^\s*MULT18X18D #\(", text, re.M)) == 16
    prog, inputs = gemm_suite(arch, SHAPES, seed=7)
    run = cosim.run(top, prog, arch, inputs=inputs)
    multi_tile, k_split = check_gemm_segments(prog, inputs, run, arch)
    assert multi_tile >= 2 and k_split == 2
    base["tensor_engine"]["pipeline"]["issue"] = False       # the model blind to the stage
    blind = ArchSpec.from_dict({**base, "name": "accel-ws4x4-ecp5"})
    for task, rec in zip(prog.gemms(), run.records, strict=True):
        pred = predict_segment(run.isa, run.isa.segment(task.name), blind)
        assert rec["cycles"] > pred.cycles, task.name


@pytest.mark.parametrize("operand,product", [(True, True), (False, True), (True, False)])
def test_ecp5_build_puts_the_multiply_registers_in_the_dsp(operand, product):
    """For ECP5 every PE's multiply is one MULT18X18D whose input registers are the operand
    stage and whose output register is the product stage; the portable build has none and
    registers the same values in the fabric."""
    from tilewright.rtl.fpga_primitives import FpgaFamily, SIM_MODELS, with_sim_models
    from tilewright.rtl.verilog import generate_verilog
    R, C = 2, 3
    arch = _arch(R, C, pe_operand=operand, pe_product=product)
    ecp5, _ = generate_verilog(arch, FpgaFamily("ecp5"))
    portable, _ = generate_verilog(arch)
    insts = re.findall(r"MULT18X18D #\((.*?)\)\s*\\?mult_\d+_\d+\s+\(", ecp5, re.S)
    assert len(insts) == R * C
    want = {"REG_INPUTA_CLK": "CLK0" if operand else "NONE",
            "REG_INPUTB_CLK": "CLK0" if operand else "NONE",
            "REG_OUTPUT_CLK": "CLK0" if product else "NONE"}
    for params in insts:
        got = dict(re.findall(r"\.(REG_\w+_CLK)\(\"(\w+)\"\)", params))
        assert got == want
    assert "MULT18X18D" not in portable and ("prod_0_0 <=" in portable) == product
    assert "prod_0_0 <=" not in ecp5 and "opa_0_0 <=" not in ecp5   # no fabric copies
    assert ("opa_0_0 <=" in portable) == operand
    sim = with_sim_models(ecp5)
    assert sim.count("module MULT18X18D") == 1 and sim.startswith(ecp5)
    assert with_sim_models(portable) == portable and "module MULT18X18D" in SIM_MODELS["MULT18X18D"]
