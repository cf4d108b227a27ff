"""Cycle model of the systolic GEMM core: one command's cycles, numpy-vectorized over shapes.

The closed forms are the core's timing contract, stated with their derivation and both
conventions (``tilewright``: what the RTL does, exact; ``scalesim``: SCALE-Sim 3.0.0's reported
cycles) in :mod:`tilewright.compiler.core_timing`. This module applies them to an ArchSpec and to
Programs. It reads only the ArchSpec and the GEMM shape; it never looks at the RTL, and the RTL
suite (``cocotb_tests/test_gemm_core.py``) asserts that both agree for every GEMM it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler.core_timing import CONVENTIONS, gemm_cycles_array
from tilewright.compiler.program import GemmTask, Program

__all__ = ["GemmCycles", "gemm_cycles", "gemm_cycles_array", "gemm_report", "CONVENTIONS"]



@dataclass(frozen=True)
class GemmCycles:
    """Cycle-model prediction for one GEMM."""

    m: int
    k: int
    n: int
    folds: int
    cycles: int
    convention: str
    rows: int
    cols: int

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n

    @property
    def utilization(self) -> float:
        """Useful MACs / (cycles · rows · cols), in [0, 1]."""
        return self.macs / (self.cycles * self.rows * self.cols)


def gemm_cycles(arch: ArchSpec, m: int, k: int, n: int,
                convention: str = "tilewright") -> GemmCycles:
    """Predicted cycles of one M x K x N GEMM on ``arch``'s tensor engine."""
    te = arch.tensor_engine
    c, f = gemm_cycles_array(m, k, n, te.rows, te.cols, te.dataflow, convention)
    return GemmCycles(m, k, n, int(f), int(c), convention, te.rows, te.cols)


def gemm_report(program: Program, arch: ArchSpec, convention: str = "tilewright"
                   ) -> pd.DataFrame:
    """Per-GEMM-task Report rows (op, m, k, n, macs, folds, cycles, utilization, time_us)."""
    te = arch.tensor_engine
    gemms: list[GemmTask] = program.gemms()
    m = np.array([g.m for g in gemms], np.int64)
    k = np.array([g.k for g in gemms], np.int64)
    n = np.array([g.n for g in gemms], np.int64)
    cycles, folds = gemm_cycles_array(m, k, n, te.rows, te.cols, te.dataflow, convention)
    df = pd.DataFrame({"op": [g.name for g in gemms], "m": m, "k": k, "n": n, "macs": m * k * n,
                       "folds": folds, "cycles": cycles})
    df["utilization"] = df["macs"] / (df["cycles"] * te.rows * te.cols)
    df["time_us"] = df["cycles"] / arch.clock_mhz
    df.attrs["convention"] = convention
    return df
