"""Banked SRAMs in the RTL (``memory.scratchpad_banks`` / ``accumulator_banks``).

The GEMM core splits each buffer into equal banks interleaved on the low address bits, every
bank with every port (``rtl.gemm_core.banked_memory``): accesses never conflict, so the cycle
counts must stay the closed form's and the results numpy's exact int32 product. References: numpy,
the GEMM-core cycle model and the accelerator cycle model (none of which know about banks).
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import ArchSpec, default_arch
from tilewright.cosim import sim as cosim
from tilewright.cosim.suites import gemm_suite
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.dataflow_sim.cycle import gemm_report
from tilewright.rtl.verilog import generate_verilog

SHAPES = [(4, 4, 4, "exact"), (7, 9, 6, "ragged"), (1, 13, 5, "gemv"), (29, 11, 23, "random"),
          (6, 300, 7, "ksplit"), (2, 515, 5, "extreme")]


def _arch(df: str, sp_banks: int, acc_banks: int, kib: int = 4, **extra) -> ArchSpec:
    base = default_arch().model_dump(mode="json")
    base.update(name=f"banked-{df}-{sp_banks}-{acc_banks}", **extra)
    base["memory"] = {"scratchpad_kib": kib, "accumulator_kib": kib,
                      "scratchpad_banks": sp_banks, "accumulator_banks": acc_banks}
    base["tensor_engine"].update(rows=4, cols=4, dataflow=df)
    return ArchSpec.from_dict(base)


def _exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


def test_verilog_has_the_banks():
    text, core = generate_verilog(_arch("ws", 4, 2))
    assert core.banks == (4, 4, 2)
    for name, n in (("mem_a", 4), ("mem_b", 4), ("mem_acc", 2)):
        assert f"{name}_bank{n - 1}" in text and f"{name}_bank{n}" not in text


@pytest.mark.parametrize("df,sp,acc", [("ws", 4, 2), ("os", 2, 8)])
def test_banked_core_bit_exact_and_cycle_exact(df, sp, acc):
    arch = _arch(df, sp, acc, kib=16)     # the core holds whole operands
    prog, inputs = gemm_suite(arch, SHAPES, seed=11)
    run = cosim.run("core", prog, arch, inputs=inputs)
    model = gemm_report(prog, arch)["cycles"].tolist()
    for i, rec in enumerate(run.records):
        np.testing.assert_array_equal(run.outputs[f"c{i}"],
                                      _exact(inputs[f"a{i}"], inputs[f"b{i}"]))
        assert rec["cycles"] == model[i], (rec, model[i])


def test_banked_accelerator_top_cycle_exact():
    arch = _arch("ws", 2, 4, offchip={"bandwidth_gbps": 2.0, "latency_ns": 20.0})
    prog, inputs = gemm_suite(arch, SHAPES[:4], seed=5)
    run = cosim.run("accel", prog, arch, inputs=inputs)
    for i, rec in enumerate(run.records):
        np.testing.assert_array_equal(run.outputs[f"c{i}"],
                                      _exact(inputs[f"a{i}"], inputs[f"b{i}"]))
        assert rec["cycles"] == predict_segment(run.isa, run.isa.segment(rec["task"]),
                                                arch).cycles
