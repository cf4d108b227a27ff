"""Cycle model of the tensor engine: one GEMM command's cycles, numpy-vectorized over shapes.

The closed forms are the engines' timing contracts, stated with their derivation: for the
systolic GEMM core both conventions (``tilewright``: what the RTL does, exact; ``scalesim``:
SCALE-Sim 3.0.0's reported cycles) in :mod:`tilewright.compiler.core_timing`; for the tile-MAC
kinds (``adder_tree``, ``outer_product``, ``cube``: ``tensor_engine.kind``) the ``tilewright``
convention in :mod:`tilewright.compiler.engine_timing` (``tests/test_engines_rtl.py`` checks it
against their RTL). :func:`~tilewright.compiler.engine_timing.tensor_engine_gemm_cycles` picks
the form by kind. This module applies them to an ArchSpec and to Programs. It reads only the
ArchSpec and the GEMM shape; it never looks at the RTL, and the RTL suites
(``tests/test_gemm_core_rtl.py``, ``tests/test_engines_rtl.py``) assert that both agree for
every GEMM they run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.core_timing import CONVENTIONS, gemm_cycles_array
from tilewright.compiler.engine_timing import tensor_engine_gemm_cycles

if TYPE_CHECKING:
    import pandas as pd

    from tilewright.compiler.program import GemmTask, Program

__all__ = ["GemmCycles", "gemm_cycles", "gemm_cycles_array", "gemm_report", "CONVENTIONS",
           "tensor_engine_gemm_cycles"]



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
    depth: int = 1          #: reduction elements per PE and cycle (tile-MAC kinds; 1: systolic)
    kind: str = "systolic"  #: ``tensor_engine.kind``
    count: int = 1          #: identical engines sharing the GEMM (``tensor_engine.count``)

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n

    @property
    def macs_per_cycle(self) -> int:
        """Peak MAC/cycle of all engines: count · rows · cols · depth."""
        return self.count * self.rows * self.cols * self.depth

    @property
    def utilization(self) -> float:
        """Useful MACs / (cycles · count · rows · cols · depth), in [0, 1]."""
        return self.macs / (self.cycles * self.macs_per_cycle)


def gemm_cycles(arch: ArchSpec, m: int, k: int, n: int,
                convention: str = "tilewright") -> GemmCycles:
    """Predicted cycles of one M x K x N GEMM on ``arch``'s tensor engines (any kind, any
    ``count``: cycles of the busiest engine; ``folds`` of the whole GEMM, of a tile-MAC kind =
    its output tiles)."""
    te = arch.tensor_engine
    c, f = tensor_engine_gemm_cycles(te, m, k, n, convention)
    return GemmCycles(m, k, n, int(f), int(c), convention, te.rows, te.cols, te.depth, te.kind,
                      te.count)


def gemm_report(program: Program, arch: ArchSpec, convention: str = "tilewright"
                   ) -> pd.DataFrame:
    """Per-GEMM-task Report rows (op, m, k, n, macs, folds, cycles, utilization, time_us)."""
    import pandas as pd  # noqa: PLC0415  (lazy: pandas costs ~0.4 s of CPU; `cycles` needs none)
    te = arch.tensor_engine
    gemms: list[GemmTask] = program.gemms()
    m = np.array([g.m for g in gemms], np.int64)
    k = np.array([g.k for g in gemms], np.int64)
    n = np.array([g.n for g in gemms], np.int64)
    cycles, folds = tensor_engine_gemm_cycles(te, m, k, n, convention)
    df = pd.DataFrame({"op": [g.name for g in gemms], "m": m, "k": k, "n": n, "macs": m * k * n,
                       "folds": folds, "cycles": cycles})
    df["utilization"] = df["macs"] / (df["cycles"] * te.macs_per_cycle)
    df["time_us"] = df["cycles"] / arch.clock_mhz
    df.attrs["convention"] = convention
    return df
