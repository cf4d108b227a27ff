"""The programmable accelerator top in Verilator: ISA programs from codegen, DMA through the
cocotb external-memory model, double-buffered scratchpads.

Two small builds cover both dataflows and both DMA gearboxes: a 4x4 WS top whose memory port is
2 bytes wide (every on-chip word travels as several beats; latency 10 cycles) and a 4x4 OS top with
the default 16 GB/s port (32-byte beats wider than any word; latency 50). References are
independent of the RTL: C against numpy's exact int64 product wrapped to int32, program outputs
against the functional model, cycles against the cycle model (dataflow_sim/accel_timing.py, which
reads only the ISA, the core's closed forms and the ArchSpec).
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import ArchSpec, default_arch
from tilewright.compiler.codegen import beats_per_word
from tilewright.cosim.suites import gemm_suite
from tilewright.dataflow_sim.accel_timing import predict_segment


def _arch(df: str, bw: float, lat: float) -> ArchSpec:
    base = default_arch().model_dump(mode="json")
    base.update(name=f"accel-{df}4x4", offchip={"bandwidth_gbps": bw, "latency_ns": lat},
                memory={"scratchpad_kib": 2, "accumulator_kib": 2})
    base["tensor_engine"].update(rows=4, cols=4, dataflow=df)
    return ArchSpec.from_dict(base)


#: WS, W = 2 bytes (1 GB/s at 500 MHz), L = 10 cycles; OS, W = 32 bytes, L = 50 cycles.
#: 2 KiB memories (A/B halves of 128 words, accumulator halves of 64 words) force multi-tile GEMMs.
ARCHS = {"ws-narrow": _arch("ws", 1.0, 20.0), "os-wide": _arch("os", 16.0, 100.0)}
#: "ksplit" and "extreme" (all -128 against mixed +-: the largest sums) do not fit with all of K:
#: their K is split and the GEMMs accumulate in the accumulator (GEMM acc=1)
SHAPES = [(4, 4, 4, "exact"), (7, 9, 6, "ragged"), (1, 13, 5, "gemv"), (29, 11, 23, "random"),
          (40, 8, 30, "tiles"), (6, 300, 7, "ksplit"), (2, 515, 5, "extreme")]


def _exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


def check_gemm_segments(prog, inputs, run, arch) -> tuple[int, int]:
    """Every GEMM task of an accelerator run: C bit-exact against numpy, cycles and instructions
    retired equal to the cycle model, every beat of the image through the port (A/B in, C out).
    Returns (multi-tile segments, K-split segments)."""
    multi_tile = k_split = 0
    r = beats_per_word(arch)
    for task, rec in zip(prog.gemms(), run.records, strict=True):
        assert rec["task"] == task.name
        assert np.array_equal(run.outputs[task.out], _exact(inputs[task.a], inputs[task.b])), \
            task.name
        seg = run.isa.segment(task.name)
        pred = predict_segment(run.isa, seg, arch)
        assert (rec["cycles"], rec["retired"]) == (pred.cycles, pred.instructions), task.name
        lays = [t.layout(arch) for t in seg.tiles]
        assert rec["read_beats"] == sum(lay.a_words * r["a"] + lay.b_words * r["b"]
                                        for lay in lays)
        assert rec["write_beats"] == sum(lay.acc_words * r["c"]
                                         for lay, t in zip(lays, seg.tiles) if t.last)
        k_split += any(t.k0 > 0 for t in seg.tiles)
        multi_tile += len(seg.tiles) > 1
    return multi_tile, k_split


@pytest.mark.parametrize("name", list(ARCHS))
def test_accel_gemms_bit_exact_cycle_exact_and_overlapped(name):
    from tilewright.cosim.verilator import lint
    from tilewright.cosim import sim as cosim
    arch = ARCHS[name]
    if name == "ws-narrow":
        assert beats_per_word(arch) == {"a": 2, "b": 2, "c": 8}
    else:
        assert beats_per_word(arch) == {"a": 1, "b": 1, "c": 1}
    prog, inputs = gemm_suite(arch, SHAPES, seed=7)
    run = cosim.run("accel", prog, arch, inputs=inputs)
    multi_tile, k_split = check_gemm_segments(prog, inputs, run, arch)
    for task, rec in zip(prog.gemms(), run.records):
        seg = run.isa.segment(task.name)
        pred = predict_segment(run.isa, seg, arch)
        if len(seg.tiles) > 1:
            # double buffering: DMA and GEMM overlap, so the run beats the serial sum
            assert rec["cycles"] < pred.gemm_cycles + pred.dma_cycles, task.name
    assert multi_tile >= 2 and k_split == 2
    ok, out = lint(run.build)
    assert ok, out[-3000:]


def test_accel_runs_compiled_mlp_like_the_functional_model():
    """mlp-tiny compiled for the narrow-port WS top: its GEMMs consume vector tasks' outputs
    (requantize on the host between segments); every tensor equals the functional model."""
    from tilewright.compiler import compile_model
    from tilewright.cosim import sim as cosim
    from tilewright.dataflow_sim.functional import run_program
    from tilewright.models.configs import build
    arch = ARCHS["ws-narrow"]
    module, x = build("mlp-tiny", seed=0)
    program = compile_model(module, x, arch)
    x8 = np.clip(np.round(x.numpy() / program.meta["input_scale"]), -128, 127).astype(np.int8)
    func = run_program(program, {"x": x8})
    run = cosim.run("accel", program, arch, inputs={"x": x8})
    gemms = program.gemms()
    assert len(gemms) >= 2 and len(run.records) == len(gemms)
    for g, rec in zip(gemms, run.records):
        assert np.array_equal(run.outputs[g.out], func[g.out]), g.name
        assert rec["cycles"] == predict_segment(run.isa, run.isa.segment(g.name), arch).cycles
    out = program.outputs[0]
    assert np.array_equal(run.outputs[out], func[out])
    table = run.comparison(arch)
    assert [r["task"] for r in table] == [g.name for g in gemms] and all(r["equal"] for r in table)
