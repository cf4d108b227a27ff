"""Timing contract of a GEMM on the tile-MAC tensor engines: closed forms, numpy-vectorized.

The families (issue 4; RTL in :mod:`tilewright.rtl.adder_tree`, :mod:`tilewright.rtl.outer_product`
and :mod:`tilewright.rtl.cube`) each compute a Tm x Tn block of partial sums over Tk reduction
elements per beat (one beat per cycle):

=================  =======================  ==================
kind               parameters               (Tm, Tk, Tn)
=================  =======================  ==================
``adder_tree``     ``n``                    (1, n, 1)
``outer_product``  ``rows``, ``cols``       (rows, 1, cols)
``cube``           ``tm``, ``tk``, ``tn``   (tm, tk, tn)
=================  =======================  ==================

Convention ``tilewright`` (what the RTL does, checked exactly by ``tests/test_engines_rtl.py``):
C = A·B with A M x K and B K x N, zero-padded to whole tiles, streamed back to back:

* beats = ceil(M/Tm) · ceil(N/Tn) · ceil(K/Tk) (one per cycle, no gaps between output tiles: the
  accumulator restarts on the ``first`` beat of the next tile in the same cycle);
* latency = 2 + ceil(log2 Tk) cycles from the ``last`` beat of a tile to the tile on ``c_out``
  (1 product register + ceil(log2 Tk) adder-tree levels + 1 accumulator/output register);
* cycles = beats + latency, counted from the cycle of the first beat (cycle 0) to the cycle the
  last tile is on ``c_out``, inclusive. Operand delivery (SRAM reads, DMA) is not included.

Utilization = M·K·N / (cycles · Tm·Tk·Tn): the fraction of peak MACs doing useful work.

In an ArchSpec the tile-MAC kinds are ``tensor_engine.kind`` with (Tm, Tk, Tn) = (rows, depth,
cols) (:class:`tilewright.arch.TensorEngineSpec`); :func:`tensor_engine_gemm_cycles` is the one
entry point every cost model uses for any kind: the systolic closed forms of
:mod:`tilewright.compiler.core_timing` or the tile-MAC form above. A tile-MAC engine's "folds" are
its output tiles, ceil(M/Tm)·ceil(N/Tn) (one accumulation each). With ``tensor_engine.count`` =
E identical engines the output tiles are dealt out to them: the busiest engine runs
ceil(tiles/E) of them, ceil(tiles/E)·ceil(K/Tk) beats, and the GEMM takes
ceil(tiles/E)·ceil(K/Tk) + latency cycles.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tilewright.arch import ArchSpecError, TensorEngineSpec
from tilewright.compiler.core_timing import CONVENTIONS, gemm_cycles_array

__all__ = ["ENGINE_PARAMS", "engine_tile_shape", "engine_latency_cycles", "engine_gemm_beats",
           "engine_gemm_cycles", "engine_peak_macs_per_cycle", "engine_utilization",
           "engine_output_tiles", "tensor_engine_gemm_cycles", "tile_core_busy_cycles",
           "sram_bytes_per_mac"]

#: kind -> its parameter names, in order
ENGINE_PARAMS: dict[str, tuple[str, ...]] = {
    "adder_tree": ("n",),
    "outer_product": ("rows", "cols"),
    "cube": ("tm", "tk", "tn"),
}


def engine_tile_shape(kind: str, params: Mapping[str, int]) -> tuple[int, int, int]:
    """(Tm, Tk, Tn) elements per beat of engine ``kind`` with ``params`` (validated)."""
    if kind not in ENGINE_PARAMS:
        raise ValueError(f"engine kind {kind!r}: accepted: {', '.join(ENGINE_PARAMS)}")
    names = ENGINE_PARAMS[kind]
    if set(params) != set(names):
        raise ValueError(f"engine {kind}: parameters {sorted(params)}: accepted exactly "
                         f"{', '.join(names)}")
    for name in names:
        v = params[name]
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"engine {kind}: {name} = {v!r}: must be an int >= 1")
    if kind == "adder_tree":
        return 1, int(params["n"]), 1
    if kind == "outer_product":
        return int(params["rows"]), 1, int(params["cols"])
    return int(params["tm"]), int(params["tk"]), int(params["tn"])


def engine_latency_cycles(kind: str, params: Mapping[str, int]) -> int:
    """Cycles from a tile's ``last`` beat to the tile on the output: 2 + ceil(log2 Tk)."""
    tk = engine_tile_shape(kind, params)[1]
    return 2 + int(np.ceil(np.log2(tk))) if tk > 1 else 2


def engine_peak_macs_per_cycle(kind: str, params: Mapping[str, int]) -> int:
    """Peak multiply-accumulates per cycle: Tm·Tk·Tn."""
    tm, tk, tn = engine_tile_shape(kind, params)
    return tm * tk * tn


def _ceil_div(a, b):
    return -(-np.asarray(a, np.int64) // b)


def engine_gemm_beats(kind: str, params: Mapping[str, int], m, k, n) -> np.ndarray:
    """Beats (= busy cycles) of an M x K x N GEMM: ceil(M/Tm)·ceil(N/Tn)·ceil(K/Tk); arrays ok."""
    tm, tk, tn = engine_tile_shape(kind, params)
    return _ceil_div(m, tm) * _ceil_div(n, tn) * _ceil_div(k, tk)


def engine_gemm_cycles(kind: str, params: Mapping[str, int], m, k, n) -> np.ndarray:
    """Cycles of an M x K x N GEMM, first beat to last output inclusive (module docstring)."""
    for name, v in (("m", m), ("k", k), ("n", n)):
        if np.any(np.asarray(v) < 1):
            raise ValueError(f"engine GEMM: {name} = {v!r}: must be >= 1")
    return engine_gemm_beats(kind, params, m, k, n) + engine_latency_cycles(kind, params)


def engine_utilization(kind: str, params: Mapping[str, int], m, k, n) -> np.ndarray:
    """Useful MACs / (cycles · peak MAC/cycle), in [0, 1]."""
    macs = np.asarray(m, np.float64) * np.asarray(k, np.float64) * np.asarray(n, np.float64)
    return macs / (engine_gemm_cycles(kind, params, m, k, n)
                   * engine_peak_macs_per_cycle(kind, params))


def engine_output_tiles(kind: str, params: Mapping[str, int], m, n) -> np.ndarray:
    """Output tiles (accumulations) of an M x N result: ceil(M/Tm)·ceil(N/Tn); arrays ok."""
    tm, _, tn = engine_tile_shape(kind, params)
    return _ceil_div(m, tm) * _ceil_div(n, tn)


def tensor_engine_gemm_cycles(te: "TensorEngineSpec", m, k, n, convention: str = "tilewright"
                              ) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized (cycles, folds) of M x K x N GEMMs on the tensor engine ``te`` of any kind.

    ``systolic``: :func:`~tilewright.compiler.core_timing.gemm_cycles_array` (both conventions).
    Tile-MAC kinds: :func:`engine_gemm_cycles` and :func:`engine_output_tiles` (convention
    ``tilewright`` only: SCALE-Sim models systolic arrays). ``te.count`` engines share the GEMM
    (cycles of the busiest; folds of the whole GEMM; module docstring)."""
    if te.kind == "systolic":
        return gemm_cycles_array(m, k, n, te.rows, te.cols, te.dataflow, convention, te.count,
                                 te.pipeline_cycles)
    if convention not in CONVENTIONS:
        raise ValueError(f"convention {convention!r}: must be one of {CONVENTIONS}")
    if convention != "tilewright":
        raise ArchSpecError(f"convention {convention!r} with tensor_engine.kind = {te.kind!r}: "
                         f"SCALE-Sim's convention covers kind 'systolic' only; accepted: "
                         f"'tilewright'")
    m, k, n = (np.asarray(x, dtype=np.int64) for x in (m, k, n))
    params = te.engine_params
    tiles = engine_output_tiles(te.kind, params, m, n)
    if te.count == 1:
        return engine_gemm_cycles(te.kind, params, m, k, n), tiles
    engine_gemm_cycles(te.kind, params, m, k, n)            # validates m, k, n
    beats = _ceil_div(tiles, te.count) * _ceil_div(k, te.tile_shape[1])
    return beats + engine_latency_cycles(te.kind, params), tiles


def tile_core_busy_cycles(te: "TensorEngineSpec", m, k, n) -> np.ndarray:
    """Cycles ``busy`` is high for an M x K x N GEMM on the tile-MAC core of the accelerator top
    (:mod:`tilewright.rtl.tile_core`, its timing contract): one beat per cycle from the cycle
    after ``start``, then the engine's latency and the accumulator write —
    ``ceil(M/Tm)·ceil(N/Tn)·ceil(K/Tk) + latency + 1`` = :func:`engine_gemm_cycles` + 1.
    Arrays ok."""
    return engine_gemm_cycles(te.kind, te.engine_params, m, k, n) + 1


def sram_bytes_per_mac(te: "TensorEngineSpec", elem_bytes: float) -> tuple[float, float]:
    """``(operand, partial_sum)``: scratchpad bytes the engine reads per MAC for its A and B
    operands, and accumulator bytes per MAC for partial sums, from each kind's reuse (edge
    tiles ignored; ``e`` = ``elem_bytes``):

    * systolic ``ws`` (R x C): an activation enters a row and is used by the C PEs of that row
      -> ``e/C``; each output's partial sum is read and written (4 + 4 bytes) once per row fold
      of R MACs -> ``8/R``. (Weights are read once per fold and used by every streamed row:
      ``e/M`` per MAC, left out — it depends on M.)
    * systolic ``is`` (R x C; WS with A and B exchanged): a B element enters a row and is used by
      the C PEs of that row -> ``e/C``; partial sums ``8/R`` as WS.
    * systolic ``os`` (R x C): A enters a row and is used by C PEs, B a column used by R PEs ->
      ``e/C + e/R``; sums stay in the PEs (each output drained once, counted as an output) -> 0.
    * ``outer_product`` (Tm x Tn): a beat reads Tm A and Tn B elements for Tm*Tn MACs ->
      ``e/Tn + e/Tm``; the Tm x Tn sums accumulate in the engine -> 0.
    * ``cube`` (Tm x Tk x Tn): a beat reads a Tm x Tk A tile and a Tk x Tn B tile for
      Tm*Tk*Tn MACs -> ``e/Tn + e/Tm``; sums accumulate in the engine -> 0.
    * ``adder_tree`` (n): a beat reads n A and n B elements for n MACs -> ``2e``; the sum
      accumulates in the output register -> 0.
    """
    e = float(elem_bytes)
    if te.kind == "systolic":
        if te.dataflow in ("ws", "is"):
            return e / te.cols, 8.0 / te.rows
        return e / te.cols + e / te.rows, 0.0
    tm, tk, tn = te.tile_shape
    if te.kind == "adder_tree":
        return 2.0 * e, 0.0
    return e / tn + e / tm, 0.0
