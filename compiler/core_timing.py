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

* IS (input-stationary; no RTL: the analytical levels only): the A tile is held in the PEs
  (K on the R rows, M on the C columns) and B's N columns stream through — the WS core run on
  the transposed problem C^T = B^T A^T. Its cycles are WS's with M and N exchanged:
  F = ceil(K/R)·ceil(M/C), P = max(N, 2R + C - 2), total = R + (F - 1)·P + N + R + C + 1.

``scalesim`` — SCALE-Sim 3.0.0's reported compute cycles, F·P - 1 (see docs/design.md, "SCALE-Sim's convention"):
OS P = K + R + C - 2, WS P = M + 2R + C - 2, IS P = N + 2R + C - 2 (IS folds ceil(K/R)·ceil(M/C):
``scalesim/compute/systolic_compute_is.py`` holds the K x M input tile, Sr = K rows by Sc = M
columns, and streams T = N filter columns), for comparison with published SCALE-Sim figures
(``tests/test_scalesim_dataflows.py`` runs SCALE-Sim itself when it is installed).

Several engines (``tensor_engine.count`` = E, identical, sharing the memories): a GEMM's
independent output blocks are dealt out to the engines — WS the ceil(N/C) column blocks, IS the
ceil(M/C) column blocks (each engine runs every K fold of its blocks, so no partial sums cross
engines), OS all ceil(M/R)·ceil(N/C) output tiles. The busiest engine does F_E folds (WS
ceil(K/R)·ceil(ceil(N/C)/E), IS ceil(K/R)·ceil(ceil(M/C)/E), OS ceil(F/E)) and the GEMM takes that
engine's cycles: the closed forms above with F_E in place of F (they depend on the fold count and
the GEMM's M, K, N only). ``folds`` reported stays F, the whole GEMM's.
With E > 1 under ``scalesim`` the busiest engine's F_E·P - 1 is reported (SCALE-Sim itself
models one array).
"""

from __future__ import annotations

import numpy as np

__all__ = ["gemm_cycles_array", "engine_folds", "CONVENTIONS", "DATAFLOWS"]

CONVENTIONS = ("tilewright", "scalesim")
#: the systolic dataflows the closed forms cover
DATAFLOWS = ("ws", "os", "is")


def _ceil_div(a, b):
    return -(-a // b)


def engine_folds(m, k, n, rows: int, cols: int, dataflow: str, count: int = 1
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(F, F_E)``: folds of the whole M x K x N GEMM and of the busiest of ``count`` engines
    (module docstring); numpy-vectorized."""
    m, k, n = (np.asarray(x, dtype=np.int64) for x in (m, k, n))
    R, C, E = rows, cols, count
    if dataflow == "ws":
        kb, blocks = _ceil_div(k, R), _ceil_div(n, C)
        return kb * blocks, kb * _ceil_div(blocks, E)
    if dataflow == "is":
        kb, blocks = _ceil_div(k, R), _ceil_div(m, C)
        return kb * blocks, kb * _ceil_div(blocks, E)
    if dataflow == "os":
        folds = _ceil_div(m, R) * _ceil_div(n, C)
        return folds, _ceil_div(folds, E)
    raise ValueError(f"dataflow {dataflow!r}: accepted are {DATAFLOWS}")


def gemm_cycles_array(m, k, n, rows: int, cols: int, dataflow: str,
                      convention: str = "tilewright", count: int = 1
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized (cycles, folds) for arrays of M, K, N (any broadcastable int arrays) on
    ``count`` identical ``rows x cols`` arrays; ``folds`` are the whole GEMM's, ``cycles`` the
    busiest engine's (module docstring)."""
    m, k, n = (np.asarray(x, dtype=np.int64) for x in (m, k, n))
    R, C = rows, cols
    if convention not in CONVENTIONS:
        raise ValueError(f"convention {convention!r}: must be one of {CONVENTIONS}")
    if not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"count = {count!r}: must be an integer >= 1")
    folds, fe = engine_folds(m, k, n, R, C, dataflow, count)
    if convention == "scalesim":
        per = {"ws": m + 2 * R + C - 2, "os": k + R + C - 2, "is": n + 2 * R + C - 2}[dataflow]
        return fe * per - 1, folds
    if dataflow == "os":
        return k + (fe - 1) * np.maximum(k, 2 * R + C) + 2 * R + C, folds
    stream = m if dataflow == "ws" else n      # IS is WS on the transposed problem
    return R + (fe - 1) * np.maximum(stream, 2 * R + C - 2) + stream + R + C + 1, folds
