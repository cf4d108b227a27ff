"""Cycle model of the systolic GEMM core: closed form per fold, numpy-vectorized over shapes.

Two conventions, stated with every number (DESIGN.md, "count cycles honestly"):

``tilewright`` (default) — what the RTL core does: cycles ``busy`` is high for one GEMM. Folds do
not overlap; every fold has the same length. With R = rows, C = cols, SRAM read latency L = 1:

* WS: folds = ceil(K/R)·ceil(N/C); per fold = R (weight reads) + L + M (activation rows)
  + (R + C - 1) (array latency) + 1 (accumulator read-modify-write) = M + 2R + C + 1.
* OS: folds = ceil(M/R)·ceil(N/C); per fold = K (operand reads) + L + (R + C - 1) (until the last
  PE finishes) + R (drain, one row per cycle) - 1 (the first drain cycle is the finish cycle)
  = K + 2R + C - 1.

``scalesim`` — SCALE-Sim 3.0.0's reported compute cycles, F·P - 1 (see DESIGN.md's table):
OS P = K + R + C - 2, WS P = M + 2R + C - 2, IS P = N + 2R + C - 2, for comparison with
published SCALE-Sim figures.

The model reads only the ArchSpec and the GEMM shape; it never looks at the RTL.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler.program import GemmTask, Program

__all__ = ["GemmCycles", "gemm_cycles", "gemm_cycles_array", "program_report", "CONVENTIONS"]

CONVENTIONS = ("tilewright", "scalesim")
SRAM_READ_LATENCY = 1   # cycles; ArchSpec.memory.read_latency_cycles is fixed at 1 today


def _ceil_div(a, b):
    return -(-a // b)


def gemm_cycles_array(m, k, n, rows: int, cols: int, dataflow: str,
                      convention: str = "tilewright") -> tuple[np.ndarray, np.ndarray]:
    """Vectorized (cycles, folds) for arrays of M, K, N (any broadcastable int arrays)."""
    m, k, n = (np.asarray(x, dtype=np.int64) for x in (m, k, n))
    R, C = rows, cols
    if convention not in CONVENTIONS:
        raise ValueError(f"convention {convention!r}: must be one of {CONVENTIONS}")
    if dataflow == "ws":
        folds = _ceil_div(k, R) * _ceil_div(n, C)
        per = m + 2 * R + C + 1 if convention == "tilewright" else m + 2 * R + C - 2
    elif dataflow == "os":
        folds = _ceil_div(m, R) * _ceil_div(n, C)
        per = k + 2 * R + C - 1 if convention == "tilewright" else k + R + C - 2
    elif dataflow == "is" and convention == "scalesim":
        folds = _ceil_div(k, R) * _ceil_div(m, C)
        per = n + 2 * R + C - 2
    else:
        raise ValueError(f"dataflow {dataflow!r} under convention {convention!r}: "
                         f"accepted are 'ws', 'os' (and 'is' for 'scalesim')")
    cycles = folds * per - (1 if convention == "scalesim" else 0)
    return cycles, folds


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


def program_report(program: Program, arch: ArchSpec, convention: str = "tilewright"
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
