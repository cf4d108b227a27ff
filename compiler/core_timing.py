"""Timing contract of one GEMM command on the systolic core: closed forms, numpy-vectorized.

The compiler defines the core's commands (buffer layouts in :mod:`tilewright.compiler.layout`) and,
here, how many cycles each command keeps the core ``busy``. The RTL (:mod:`tilewright.rtl`)
implements the contract and the cycle model (:mod:`tilewright.dataflow_sim.cycle`) predicts with it;
the RTL suite asserts the two agree exactly, so the contract is checked, not assumed.


Two conventions, stated with every number (docs/design.md, "Timing conventions"):

``tilewright`` (default) — what the RTL core does: cycles ``busy`` is high for one GEMM. With
R = rows, C = cols, SRAM read latency L = 1:

* WS, double-buffered weights, folds overlap: F = ceil(K/R)·ceil(N/C) folds. R cycles preload the
  first fold's weights; every fold but the last occupies a period P = max(M, 2R + C - 2) (it
  streams M activation rows while the next fold's R weight rows are shifted into the shadow
  registers, which may start only once this fold's commit wavefront has passed the last PE,
  R + C - 2 cycles into the period); the last fold takes M (rows) + L + (R + C - 1) (array
  latency) + 1 (accumulator read-modify-write) = M + R + C + 1.
  Total = R + (F - 1)·P + M + R + C + 1.
* OS, double-buffered outputs, folds overlap: F = ceil(M/R)·ceil(N/C) folds. The first fold
  streams its K operand columns (K cycles); every later fold occupies a period
  P = max(K, 2R + C): it streams its K columns while its first column's ``first`` flag
  captures the previous tile's sums into the output registers — a wavefront that passes the last
  PE L + (R + C - 2) cycles into the period — and that tile drains down the columns, one row per
  cycle for R cycles (period cycles R + C .. 2R + C - 1), before the next capture. A final flush period captures and drains the last
  tile: 2R + C cycles (L + R + C - 1 until captured everywhere, R drain cycles).
  Total = K + (F - 1)·P + 2R + C.

``scalesim`` — SCALE-Sim 3.0.0's reported compute cycles, F·P - 1 (see docs/design.md, "SCALE-Sim's convention"):
OS P = K + R + C - 2, WS P = M + 2R + C - 2, IS P = N + 2R + C - 2, for comparison with
published SCALE-Sim figures.

"""

from __future__ import annotations

import numpy as np

__all__ = ["gemm_cycles_array", "CONVENTIONS"]

CONVENTIONS = ("tilewright", "scalesim")


def _ceil_div(a, b):
    return -(-a // b)


def gemm_cycles_array(m, k, n, rows: int, cols: int, dataflow: str,
                      convention: str = "tilewright") -> tuple[np.ndarray, np.ndarray]:
    """Vectorized (cycles, folds) for arrays of M, K, N (any broadcastable int arrays)."""
    m, k, n = (np.asarray(x, dtype=np.int64) for x in (m, k, n))
    R, C = rows, cols
    if convention not in CONVENTIONS:
        raise ValueError(f"convention {convention!r}: must be one of {CONVENTIONS}")
    if dataflow == "ws" and convention == "tilewright":
        folds = _ceil_div(k, R) * _ceil_div(n, C)
        period = np.maximum(m, 2 * R + C - 2)
        return R + (folds - 1) * period + m + R + C + 1, folds
    if dataflow == "ws":
        folds = _ceil_div(k, R) * _ceil_div(n, C)
        per = m + 2 * R + C - 2
    elif dataflow == "os" and convention == "tilewright":
        folds = _ceil_div(m, R) * _ceil_div(n, C)
        period = np.maximum(k, 2 * R + C)
        return k + (folds - 1) * period + 2 * R + C, folds
    elif dataflow == "os":
        folds = _ceil_div(m, R) * _ceil_div(n, C)
        per = k + R + C - 2
    elif dataflow == "is" and convention == "scalesim":
        folds = _ceil_div(k, R) * _ceil_div(m, C)
        per = n + 2 * R + C - 2
    else:
        raise ValueError(f"dataflow {dataflow!r} under convention {convention!r}: "
                         f"accepted are 'ws', 'os' (and 'is' for 'scalesim')")
    cycles = folds * per - (1 if convention == "scalesim" else 0)
    return cycles, folds
