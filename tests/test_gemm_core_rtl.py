"""RTL ladder rung: the Verilated GEMM core vs numpy, torch and the cycle model.

For every array size x dataflow the same GEMM suite (exact tile, ragged edges, folding in K and N,
GEMV, tall M, extreme -128 values over long K) runs in Verilator driven by cocotb. Outputs must be
bit-exact against numpy and torch (independent int64 matmuls wrapped to int32), and every GEMM's
measured cycle count must equal the cycle model's prediction.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.rtl_suite import DATAFLOWS, RTL_SIZES, suite_arch
from tests.rtl_suite import _cache_dir, _tool_check  # noqa: F401  (autouse session fixtures)
from tilewright.cosim import sim as cosim
from tilewright.cosim.suites import gemm_suite, suite_shapes
from tilewright.dataflow_sim.cycle import gemm_cycles

pytestmark = [pytest.mark.verilator, pytest.mark.slow]


def _torch_int32_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """torch reference: exact int64 matmul, then two's complement wrap to int32."""
    c = torch.from_numpy(a).to(torch.int64) @ torch.from_numpy(b).to(torch.int64)
    c = torch.remainder(c + 2**31, 2**32) - 2**31
    return c.to(torch.int32).numpy()


@pytest.mark.parametrize("dataflow", DATAFLOWS)
@pytest.mark.parametrize("rows,cols", RTL_SIZES, ids=[f"{r}x{c}" for r, c in RTL_SIZES])
def test_gemm_suite_bit_and_cycle_exact(rows, cols, dataflow):
    arch = suite_arch(rows, cols, dataflow)
    program, inputs = gemm_suite(arch, seed=rows * 100 + cols)
    run = cosim.run("core", program, arch, inputs=inputs)
    assert len(run.records) == len(suite_shapes(arch))
    for task, rec in zip(program.gemms(), run.records):
        a, b = inputs[task.a], inputs[task.b]
        got = run.outputs[task.out]
        np_ref = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.uint32).astype(np.int32)
        assert got.dtype == np.int32 and got.shape == (task.m, task.n)
        np.testing.assert_array_equal(got, np_ref, err_msg=f"{task.name} vs numpy")
        np.testing.assert_array_equal(got, _torch_int32_matmul(a, b), err_msg=f"{task.name} vs torch")
        model = gemm_cycles(arch, task.m, task.k, task.n)
        assert rec["cycles"] == model.cycles, (
            f"{arch.name} {task.name} {task.m}x{task.k}x{task.n}: RTL {rec['cycles']} cycles, "
            f"cycle model {model.cycles}")


def test_extreme_values_really_reach_large_sums():
    """The 'extreme' shape accumulates -128*-128 over K=515: sums beyond int16 and int24."""
    arch = suite_arch(4, 4, "ws")
    program, inputs = gemm_suite(arch)
    task = [t for t in program.gemms() if t.name.endswith("extreme")][0]
    ref = inputs[task.a].astype(np.int64) @ inputs[task.b].astype(np.int64)
    assert ref.max() == 128 * 128 * 515 and ref.min() == -128 * 127 * 515
