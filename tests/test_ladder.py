"""The test ladder: ONE GEMM suite, every level that runs a Program (in the manner of PyMTL3's
one test reused from the functional level down to RTL).

Rungs: the functional model (:func:`tilewright.dataflow_sim.functional.run_program`), the cycle
model (:func:`tilewright.dataflow_sim.cycle.gemm_report`), and every Program-running top of the
registry (:data:`tilewright.cosim.tops.TOPS`) under every driver it has — core cocotb, core fast,
accel cocotb, accel fast, axi-core, axi-accel — by parametrisation over the registry, so a new top
or driver joins the ladder by being declared. Outputs are compared with an independent numpy int64
product wrapped to int32 (never with an earlier output of the code under test); RTL cycles with the
cycle model (the GEMM core's closed form for the host-driven tops, the accelerator timing model —
DMA included, at the AXI port's latency for axi-accel — for the programmable ones).

Affordable on 2 cores: one small ArchSpec (4x4 weight-stationary) and four shapes of the suite
(one exact tile, ragged edges, folding in K and N, a GEMV).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.rtl_suite import suite_arch
from tilewright.cosim.sim import run
from tilewright.cosim.suites import gemm_suite, suite_shapes
from tilewright.cosim.tops import PROGRAM_TOPS, TOPS
from tilewright.dataflow_sim.cycle import gemm_cycles, gemm_report
from tilewright.dataflow_sim.functional import run_program

ARCH = suite_arch(4, 4, "ws")
#: the suite's shape kinds the ladder runs
KINDS = ("exact", "ragged", "fold", "gemv")
#: every (top, driver) rung of the registry that runs a Program
RTL_RUNGS = [(top, driver) for top in PROGRAM_TOPS for driver in TOPS[top].drivers]


@pytest.fixture(scope="module")
def suite():
    """The one Program and its inputs every rung runs."""
    shapes = [s for s in suite_shapes(ARCH) if s[3] in KINDS]
    assert [s[3] for s in shapes] == list(KINDS)
    return gemm_suite(ARCH, shapes, seed=7)


def _reference(program, inputs) -> dict[str, np.ndarray]:
    """numpy int64 products wrapped to int32 (two's complement), per GEMM output."""
    return {t.out: (inputs[t.a].astype(np.int64) @ inputs[t.b].astype(np.int64))
            .astype(np.uint32).astype(np.int32) for t in program.gemms()}


def _check_outputs(program, inputs, outputs) -> None:
    for name, ref in _reference(program, inputs).items():
        got = outputs[name]
        assert got.dtype == np.int32 and got.shape == ref.shape, name
        np.testing.assert_array_equal(got, ref, err_msg=name)


def test_functional_rung(suite):
    program, inputs = suite
    _check_outputs(program, inputs, run_program(program, inputs))


def test_cycle_model_rung(suite):
    """One prediction per GEMM, each the closed form and never below the ideal MAC bound."""
    program, _ = suite
    report = gemm_report(program, ARCH)
    assert list(report["op"]) == [t.name for t in program.gemms()]
    peak = ARCH.tensor_engine.macs_per_cycle
    for task, cycles in zip(program.gemms(), report["cycles"]):
        assert cycles == gemm_cycles(ARCH, task.m, task.k, task.n).cycles
        assert cycles * peak >= task.m * task.k * task.n, task.name


@pytest.mark.verilator
@pytest.mark.slow
@pytest.mark.parametrize("top,driver", RTL_RUNGS, ids=[f"{t}-{d}" for t, d in RTL_RUNGS])
def test_rtl_rung(suite, top, driver):
    program, inputs = suite
    sim = run(top, program, ARCH, driver=driver, inputs=inputs)
    assert (sim.top, sim.driver) == (top, driver)
    _check_outputs(program, inputs, sim.outputs)
    assert [r["task"] for r in sim.records] == [t.name for t in program.gemms()]
    if TOPS[top].compare is not None:          # the accelerator timing model, DMA included
        rows = sim.comparison(ARCH)
        assert all(r["equal"] for r in rows), rows
    else:                                      # the GEMM core's closed form
        for task, rec in zip(program.gemms(), sim.records):
            assert rec["cycles"] == gemm_cycles(ARCH, task.m, task.k, task.n).cycles, task.name
