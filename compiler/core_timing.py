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
* Pipeline stages (``tensor_engine.pipeline``, WS only): a register after the A/B buffer reads
  and a register on each PE's product each delay the array's input or output by one cycle. The
  weight loads and the activation rows go through the same registers, so the fold period is
  unchanged; only the last fold's drain grows: total + ``pipeline_cycles`` (one per stage).
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

Several engines (``tensor_engine.count`` = E, identical, sharing the memories): the output is
split so that no partial sums cross engines. OS deals its ceil(M/R)·ceil(N/C) output tiles out to
the E engines: the busiest runs F_E = ceil(F/E) folds. WS and IS arrange the engines as G groups
of S (G·S = E, S a divisor of E): the groups share out the array-column blocks (WS the ceil(N/C)
blocks of N, IS the ceil(M/C) blocks of M) and the S engines of a group each hold the same
stationary tile and stream a 1/S share of the streamed dimension (WS M, IS N). The busiest
engine runs F_E = ceil(K/R)·ceil(blocks/G) folds of ceil(stream/S) rows, and the split with
the fewest cycles is taken (on a tie the smallest S: fewer copies of the stationary tiles, which
each of the S engines of a group loads). The GEMM takes the busiest engine's cycles: the closed
forms above with F_E folds (and the streamed dimension ceil(stream/S)). ``folds`` reported stays
F, the whole GEMM's. Under ``scalesim`` the same split gives F_E·P - 1 (SCALE-Sim itself models
one array; E = 1 is its figure).
"""

from __future__ import annotations

import numpy as np

from tilewright.arch import ArchSpecError

__all__ = ["gemm_cycles_array", "engine_split", "CONVENTIONS", "DATAFLOWS"]

CONVENTIONS = ("tilewright", "scalesim")
#: the systolic dataflows the closed forms cover
DATAFLOWS = ("ws", "os", "is")


def _ceil_div(a, b):
    return -(-a // b)


def _stream_dim(dataflow: str, m, k, n):
    return {"ws": m, "is": n, "os": k}[dataflow]


def _single_cycles(folds, stream, R: int, C: int, dataflow: str, convention: str):
    """Closed form of one engine running ``folds`` folds streaming ``stream`` rows/columns."""
    if convention == "scalesim":
        fill = {"ws": 2 * R + C - 2, "is": 2 * R + C - 2, "os": R + C - 2}[dataflow]
        return folds * (stream + fill) - 1
    if dataflow == "os":
        return stream + (folds - 1) * np.maximum(stream, 2 * R + C) + 2 * R + C
    return R + (folds - 1) * np.maximum(stream, 2 * R + C - 2) + stream + R + C + 1


def engine_split(m, k, n, rows: int, cols: int, dataflow: str, count: int = 1,
                 convention: str = "tilewright"
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(F, F_E, stream_E, S)`` of an M x K x N GEMM on ``count`` engines: the whole GEMM's
    folds, the busiest engine's folds and streamed rows/columns, and the engines per group
    sharing a stationary tile (1 for OS; module docstring); numpy-vectorized."""
    m, k, n = (np.asarray(x, dtype=np.int64) for x in (m, k, n))
    R, C, E = rows, cols, count
    if dataflow not in DATAFLOWS:
        raise ValueError(f"dataflow {dataflow!r}: accepted are {DATAFLOWS}")
    stream = _stream_dim(dataflow, m, k, n)
    if dataflow == "os":
        folds = _ceil_div(m, R) * _ceil_div(n, C)
        fe = _ceil_div(folds, E)
        return folds, fe, stream + 0 * fe, np.ones_like(fe)
    kb, blocks = _ceil_div(k, R), _ceil_div(n if dataflow == "ws" else m, C)
    folds = kb * blocks
    shape = np.broadcast(m, k, n).shape
    best = None
    for S in (s for s in range(1, E + 1) if E % s == 0):
        fe = np.broadcast_to(kb * _ceil_div(blocks, E // S), shape)
        se = np.broadcast_to(_ceil_div(stream, S), shape)
        cyc = _single_cycles(fe, se, R, C, dataflow, convention)
        if best is None:
            best = [cyc, fe, se, np.full(shape, S, np.int64)]
            continue
        better = cyc < best[0]
        for i, v in enumerate((cyc, fe, se, S)):
            best[i] = np.where(better, v, best[i])
    return np.broadcast_to(folds, shape), best[1], best[2], best[3]


def gemm_cycles_array(m, k, n, rows: int, cols: int, dataflow: str,
                      convention: str = "tilewright", count: int = 1, pipeline_cycles: int = 0
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized (cycles, folds) for arrays of M, K, N (any broadcastable int arrays) on
    ``count`` identical ``rows x cols`` arrays; ``folds`` are the whole GEMM's, ``cycles`` the
    busiest engine's (module docstring). ``pipeline_cycles`` (cycles,
    ``TensorEngineSpec.pipeline_cycles``) are the WS core's pipeline stages, added once per
    GEMM; SCALE-Sim's convention models an unpipelined array and refuses them."""
    m, k, n = (np.asarray(x, dtype=np.int64) for x in (m, k, n))
    R, C = rows, cols
    if convention not in CONVENTIONS:
        raise ValueError(f"convention {convention!r}: must be one of {CONVENTIONS}")
    if not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"count = {count!r}: must be an integer >= 1")
    if pipeline_cycles and (dataflow != "ws" or convention != "tilewright"):
        raise ArchSpecError(f"tensor_engine.pipeline ({pipeline_cycles} cycles): pipeline "
                            f"stages are modelled for "
                            f"dataflow 'ws' under the 'tilewright' convention only, not "
                            f"{dataflow!r} under {convention!r} (SCALE-Sim models an "
                            f"unpipelined array)")
    folds, fe, se, _ = engine_split(m, k, n, R, C, dataflow, count, convention)
    return _single_cycles(fe, se, R, C, dataflow, convention) + pipeline_cycles, folds
