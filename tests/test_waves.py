"""Waveform tracing of the RTL run (``cosim.sim.run("core", ..., waves=True)``, ``tilewright sim --trace``).

Reference: the cycle model's closed form. The traced ``busy`` signal, sampled at every rising
clock edge of the VCD, must be high for exactly the predicted cycles.
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import default_arch
from tilewright.cosim import sim as cosim
from tilewright.cosim.waves import sample_vcd
from tilewright.dataflow_sim.cycle import gemm_report
from tilewright.app.flows.sim_rtl import gemm_program


def test_traced_gemm_waveform_matches_the_cycle_model(tmp_path):
    arch = default_arch()
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (11, 19), dtype=np.int8)
    b = rng.integers(-128, 128, (19, 13), dtype=np.int8)
    prog = gemm_program([(a, b)], arch, "traced")
    run = cosim.run("core", prog, arch, keep_dir=tmp_path, waves=True)
    assert np.array_equal(run.outputs["c0"], (a.astype(np.int64) @ b).astype(np.int32))
    df = sample_vcd(tmp_path / "dump.vcd", ["start", "busy", "cycles"])
    predicted = int(gemm_report(prog, arch)["cycles"].iloc[0])
    busy = df.index[df["busy"] == 1]
    assert len(busy) == predicted == run.records[0]["cycles"]
    assert (np.diff(busy) == 1).all()                       # one contiguous busy period
    assert df["start"].iloc[busy[0] - 1] == 1               # starts the cycle after start
    assert df["cycles"].iloc[-1] == predicted               # the core's own counter agrees


def test_trace_needs_keep_dir_and_cocotb():
    arch = default_arch()
    a = np.ones((2, 2), np.int8)
    prog = gemm_program([(a, a)], arch, "x")
    with pytest.raises(ValueError, match="keep_dir"):
        cosim.run("core", prog, arch, waves=True)
    with pytest.raises(ValueError, match="cocotb"):
        cosim.run("core", prog, arch, waves=True, keep_dir="/tmp/x", driver="fast")


def test_traced_accelerator_run_matches_the_accel_cycle_model(tmp_path):
    """The programmable accelerator top traced (``run("accel", ..., waves=True)``): its
    ``busy`` is high for exactly the cycles the accelerator cycle model predicts (one contiguous
    window), and the GEMM core and the DMA are busy only inside that window."""
    from tilewright.arch import ArchSpec
    from tilewright.cosim import sim as cosim
    from tilewright.dataflow_sim.accel_timing import predict_segment

    base = default_arch().model_dump(mode="json")
    base.update(name="accel-wave-4x4", memory={"scratchpad_kib": 2, "accumulator_kib": 2})
    base["tensor_engine"].update(rows=4, cols=4, dataflow="ws")
    arch = ArchSpec.from_dict(base)
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (9, 7), dtype=np.int8)
    b = rng.integers(-128, 128, (7, 6), dtype=np.int8)
    prog = gemm_program([(a, b)], arch, "traced")
    run = cosim.run("accel", prog, arch, keep_dir=tmp_path, waves=True)
    assert np.array_equal(run.outputs["c0"], (a.astype(np.int64) @ b).astype(np.int32))
    df = sample_vcd(tmp_path / "dump.vcd", ["busy", "gemm_busy", "dma_busy"])
    seg = run.isa.segment(run.records[0]["task"])
    predicted = predict_segment(run.isa, seg, arch).cycles
    busy = df.index[df["busy"] == 1]
    assert len(busy) == predicted == run.records[0]["cycles"]
    assert (np.diff(busy) == 1).all()
    inside = df.loc[busy[0]:busy[-1]]
    assert df["gemm_busy"].sum() == inside["gemm_busy"].sum() > 0     # GEMMs only while busy
    assert df["dma_busy"].sum() == inside["dma_busy"].sum() > 0
