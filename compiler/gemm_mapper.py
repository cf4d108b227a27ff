"""Analytical mapper: tiling, loop order and dataflow of one GEMM-like op on one ArchSpec.

An op is ``batch`` independent GEMMs ``C[M, N] = A[M, K] @ B[K, N]`` (:class:`GemmOp`). A
:class:`Mapping` splits it into tile commands of ``m_t x k_t x n_t`` elements (edge tiles are
smaller), visits the tiles in a loop ``order`` (outer -> inner, a permutation of ``"mkn"``; the
batch loop is outermost) and runs each tile as one GEMM command on the core
(:mod:`tilewright.dataflow_sim.cycle`). Tile sizes along the dimensions the array folds are
multiples of the array size (WS: K by rows, N by cols; OS: M by rows, N by cols; IS: K by rows,
M by cols) or the whole extent; the streamed dimension (WS: M, OS: K, IS: N) takes any size.

Input-stationary (``is``, WS on the transposed problem; no RTL layout): capacity counts elements
padded to whole array tiles — the stationary A tile ``ceil(k_t/R)*R x ceil(m_t/C)*C`` and the
streamed B ``ceil(k_t/R)*R x n_t`` each in half the scratchpad, the int32
``ceil(m_t/C)*C x n_t`` partial sums in the accumulator; scratchpad reads and accumulator traffic
are WS's with A and B, M and N exchanged.

Several engines (``tensor_engine.count`` = E, sharing the scratchpad, accumulator and DMA): a tile
command is split over the engines without partial sums crossing them and takes the busiest
engine's cycles (:func:`~tilewright.compiler.core_timing.engine_split`); ``stream_cycles`` are
the busiest engine's too. Scratchpad and DRAM traffic are the whole command's, through the shared
ports and DMA engine (so with a bank width set, E engines are bounded by the one scratchpad's
bytes per cycle).

Capacity (the rules of :mod:`tilewright.compiler.layout`; see :func:`buffer_words`): a tile's A, B
and accumulator words must fit the buffer depths of :meth:`GemmLayout.depths`; an element of ``e``
bytes takes ``e`` int8 lanes' worth of A/B storage; with double buffering every buffer holds two
tiles (``2 * words <= depth``).

Data reuse: an operand buffer of capacity ``P_cap`` tiles (:func:`tile_capacity`) keeps
``P = P_cap - (slots - 1)`` tiles resident (:func:`resident_tiles`; with double buffering one slot
stays free for the prefetch). Each operand has one irrelevant loop d (A: n, B: m, C: k); one
iteration of d visits ``W`` tiles of the operand (:func:`working_sets`: the product of the trips
of its own loops nested inside d). If ``W <= P`` the whole working set stays resident and every
tile is fetched once; otherwise the buffer thrashes (tiles are visited cyclically, so an LRU
cache of P < W tiles hits only on consecutive reuse) and the operand is re-fetched at every
iteration of d. Over the loop nest (tile counts ``Tm, Tk, Tn``) that gives the re-fetch factors
``r_A = Tn if W_A > P_A``, ``r_B = Tm if W_B > P_B``, ``r_C = Tk if W_C > P_C``, else 1
(with ``P = 1`` this is the one-tile cache: ``r_A = Tn`` iff the n loop is outside a loop of A
with more than one tile, and so on). A resident C keeps its partial sums in the accumulator
(written once, final). ``tests/test_mapper.py`` checks the bytes against a literal LRU walk.
``compulsory_bytes`` = ``batch * (M*K*e + K*N*e + M*N*out_bytes)``: each operand moved once.

DRAM bytes (per batch element): A ``r_A*M*K*e``, B ``r_B*K*N*e``; C is written ``r_C`` times
(``r_C - 1`` int32 partial sums, then the result in ``out_bytes``) and partial sums are read back
``r_C - 1`` times (int32). Splitting K over several commands (``split_k``) assumes the command can
accumulate into the accumulator tile (today's RTL core clears it; ``split_k=False`` restricts the
mapper to ``k_t = K``). Transfers: one per operand tile fetched, one per partial-sum read, one per
C write-back.

Cost model (cycles at ``arch.clock_mhz``; ``bw`` = bytes/cycle = ``bandwidth_gbps*1e3/clock_mhz``,
``lat`` = ``latency_ns*clock_mhz/1e3`` cycles):

* core cycles ``T_core`` = sum over tile commands of the RTL-exact closed form of
  :func:`~tilewright.compiler.core_timing.gemm_cycles_array` (exact: full and edge tiles counted)
  or, when ``memory.bank_width_bytes`` is set and the scratchpad cannot deliver the operands
  that fast, the command's SRAM cycles (:func:`command_cycles`: A and B buffers each deliver
  ``scratchpad_banks * bank_width_bytes`` bytes per cycle; the RTL presets set no bank width,
  the RTL's ports feeding one word per cycle, so there the closed form stands). The closed form
  is split into ``stream_cycles`` (WS folds*m, OS folds*k, tile-MAC beats) and ``fill_cycles``
  (the rest: weight loading into a WS array, fill, drain);
* DMA cycles ``T_dma`` = DRAM bytes / ``bw`` + transfers * ``lat`` (one DMA engine, serial);
* double buffered: ``T = max(max(L_0 + T_core, T_dma - W_last + c_last) + W_last, T_burst)``,
  where ``L_0`` is the first tile's load (A and B), ``c_last`` the last tile's command cycles and
  ``W_last`` its write-back: compute cannot start before the first load nor end after the last
  write-back starts; the DMA engine must finish every other transfer before the last write-back,
  and the last command runs between the last load and that write-back. ``T_burst`` accounts for
  bursty traffic that two buffer slots cannot smooth: with T3 tiles in a run of the innermost
  loop that has more than one tile, ``T_burst = runs * ((T3-1)*max(c, d_in) + max(c, d_in +
  d_out))`` where ``c`` = core cycles per tile, ``d_in`` = DMA cycles per tile of the operands
  that loop indexes (they change every tile) and ``d_out`` = DMA cycles per run of the others
  (averages over the op's exact totals; a resident operand's traffic is put in one of the
  ``T_d`` passes of its loop d; see ``_burst_cycles``);
* single buffered: ``T = T_core + T_dma`` (nothing overlaps).

It is checked against the tile-by-tile pipeline of :mod:`tilewright.dataflow_sim.tiled` (same
traffic and command cycles, exact timing of every transfer and command). On 70 GEMMs from
llama3-8b/70b, mixtral-8x7b, deepseek-v3 and mamba-130m/2.8b (prefill 2048 tokens, decode 1-64,
routed expert token counts) x 4 ArchSpecs (ws16x16, os16x16, ws32x32 and a bandwidth-starved
os32x32-lp), the best mapping's cycles are within 7.7 % of the tiled cycle model (mean 0.09 %;
ws16x16, os16x16 and ws32x32 within 0.001 %), 810 random feasible mappings within 10.4 % (mean
0.17 %; the averaged burst model is weakest where DMA and core time are close, as it was
before residency); the analytical model mostly errs low (it overestimates by at most 2.7 % on
the best mappings, 0.33 % on the random ones) — measured by
``python benchmarks/mapper_vs_cycle_model.py --samples 3 --quiet``.

Tile-MAC engines (``tensor_engine.kind`` adder_tree / outer_product / cube, (Tm, Tk, Tn) =
(rows, depth, cols)): the mapping's ``dataflow`` is the kind's name; tile sizes step by Tm, Tk, Tn
(or the whole extent); capacity counts elements padded to whole engine tiles — A ``m_t x k_t`` and
B ``k_t x n_t`` each in half the scratchpad, the int32 ``m_t x n_t`` result in the accumulator
(``slots`` copies each); command cycles are :func:`~tilewright.compiler.engine_timing.
engine_gemm_cycles`; each beat reads an A and a B engine tile from the scratchpad
(``(Tm*Tk + Tk*Tn) * e`` bytes) and each output tile is written once to the accumulator
(``Tm*Tn`` int32). Utilization and the ridge point use the engine's peak MAC/cycle
(``tensor_engine.macs_per_cycle`` = rows·cols·depth).

Search: every candidate tiling (even splits per dimension, at most ``max_candidates`` each, that
fit the buffers; and each candidate ``(m_t, n_t)`` with the largest K tile that fits beside it)
in every loop order. ``map_gemm(prune=True)`` and :func:`map_gemms` (several ops
in one vectorized pass, the lowering's path) skip, exactly, the tilings whose lower bound on
cycles (first load + core + last write-back; DRAM bytes of a single pass) exceeds the best cycles
of a small probe by more than the tie tolerance: same choice and cost, a fraction of the work.

Reported per mapping (:class:`MappingCost`): cycles, MACs, utilization, bytes per memory level
(DRAM, scratchpad, accumulator), compulsory DRAM bytes, arithmetic intensity (2*MACs per DRAM
byte), the core's stream/fill/SRAM cycles and whether the mapped op is compute- or
bandwidth-bound (``T_core >= T_dma``) next to the ideal roofline's verdict (intensity vs. ridge
point ``2 * tensor_engine.macs_per_cycle / bw``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Literal, Sequence

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler.layout import MAX_GEMM_DIM, GemmLayout, ab_buffer_bytes
from tilewright.compiler.core_timing import DATAFLOWS as CORE_DATAFLOWS
from tilewright.compiler.core_timing import engine_split, gemm_cycles_array
from tilewright.compiler.engine_timing import (engine_gemm_beats, engine_output_tiles,
                                               tensor_engine_gemm_cycles)

__all__ = ["GemmOp", "Mapping", "MappingCost", "MappingSpace", "MapperResult", "LOOP_ORDERS",
           "DATAFLOWS", "ENGINE_DATAFLOWS", "ACC_BYTES", "native_dataflow", "accepted_dataflows",
           "map_gemm", "best_index", "enumerate_mappings", "evaluate_mappings",
           "cost_of", "buffer_words", "refetch_factors", "working_sets", "tile_capacity",
           "resident_tiles", "command_sram_reads", "command_sram_bytes", "sram_cycles",
           "command_cycles", "tile_candidates", "dram_rates",
           "mapper_arch_key", "map_gemms"]

#: loop orders over tiles, outer -> inner (the batch loop is always outermost)
LOOP_ORDERS: tuple[str, ...] = ("mkn", "mnk", "kmn", "knm", "nmk", "nkm")
#: dataflows the cost model knows for a systolic array
DATAFLOWS: tuple[str, ...] = CORE_DATAFLOWS
#: a tile-MAC engine's mapping "dataflow" is its kind
ENGINE_DATAFLOWS: tuple[str, ...] = ("adder_tree", "outer_product", "cube")
_ALL_DATAFLOWS = DATAFLOWS + ENGINE_DATAFLOWS
#: bytes of one accumulator element (int32 partial sums)
ACC_BYTES = 4
#: position (0 outer .. 2 inner) of the m, k and n loops in each of :data:`LOOP_ORDERS`
_LOOP_POS = np.array([[o.index(d) for d in "mkn"] for o in LOOP_ORDERS], np.int64)
_LOOP_POS.flags.writeable = False

Objective = Literal["cycles", "dram_bytes"]


# ---- op and mapping -------------------------------------------------------------------------
@dataclass(frozen=True)
class GemmOp:
    """``batch`` independent GEMMs ``C[M,N] = A[M,K] @ B[K,N]``; sizes in elements.

    ``elem_bytes``: bytes per A/B element (1 for int8); ``out_bytes``: bytes per element of the
    result written to DRAM (4: the int32 accumulator, requantization being a separate vector op).
    """

    name: str
    m: int
    k: int
    n: int
    batch: int = 1
    elem_bytes: int = 1
    out_bytes: int = ACC_BYTES

    def __post_init__(self) -> None:
        for f in ("m", "k", "n", "batch", "elem_bytes", "out_bytes"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"op {self.name!r} ({self.shape_text}): {f} = {v!r}: "
                                 "must be an integer >= 1")

    @property
    def shape_text(self) -> str:
        b = f"{self.batch}x" if self.batch != 1 else ""
        return f"{b}{self.m}x{self.k}x{self.n}"

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the whole op."""
        return self.batch * self.m * self.k * self.n


@dataclass(frozen=True)
class _Rows:
    """The sizes of several GemmOps, one entry per row of a vectorized evaluation: stands in
    for a :class:`GemmOp` in the cost model (same attribute names, numpy arrays)."""

    m: np.ndarray
    k: np.ndarray
    n: np.ndarray
    batch: np.ndarray
    elem_bytes: np.ndarray
    out_bytes: np.ndarray

    @classmethod
    def of(cls, ops: Sequence[GemmOp], owner: np.ndarray) -> "_Rows":
        """Rows of ``ops[owner[i]]``."""
        return cls(*(np.array([getattr(o, f) for o in ops], np.int64)[owner]
                     for f in ("m", "k", "n", "batch", "elem_bytes", "out_bytes")))

    def take(self, idx: np.ndarray) -> "_Rows":
        return _Rows(*(getattr(self, f.name)[idx] for f in fields(self)))

    def repeat(self, times: int) -> "_Rows":
        return _Rows(*(np.repeat(getattr(self, f.name), times) for f in fields(self)))

    @property
    def macs(self) -> np.ndarray:
        return self.batch * self.m * self.k * self.n


@dataclass(frozen=True)
class Mapping:
    """Tile sizes (elements), loop order over tiles (outer -> inner) and dataflow."""

    m_t: int
    k_t: int
    n_t: int
    order: str
    dataflow: str
    double_buffer: bool = True

    def tile_counts(self, op: GemmOp) -> tuple[int, int, int]:
        """``(Tm, Tk, Tn)`` tiles per dimension."""
        return (-(-op.m // self.m_t), -(-op.k // self.k_t), -(-op.n // self.n_t))


@dataclass(frozen=True)
class MappingCost:
    """Analytical cost of one mapping. Cycles at the ArchSpec's clock; bytes are bytes."""

    cycles: float
    core_cycles: int
    dma_cycles: float
    macs: int
    utilization: float
    n_tiles: int
    transfers: int
    dram_bytes: int
    dram_a_bytes: int
    dram_b_bytes: int
    dram_c_read_bytes: int
    dram_c_write_bytes: int
    scratchpad_bytes: int
    accumulator_bytes: int
    intensity: float
    ridge: float
    bound: str
    roofline_bound: str
    compulsory_bytes: int
    """DRAM bytes if every operand moved once: ``batch * (M*K*e + K*N*e + M*N*out_bytes)``"""
    stream_cycles: int
    """core cycles the engine streams operands (WS: folds*m, OS: folds*k, tile-MAC: beats)"""
    fill_cycles: int
    """core cycles that are not streaming: weight loading, fill and drain (core - stream)"""
    sram_cycles: int
    """cycles the scratchpad ports need to deliver the operands (0: no bank-width limit)"""


# ---- helpers (vectorized) -------------------------------------------------------------------
def _cdiv(a, b):
    return -(-a // b)


def mapper_arch_key(arch: ArchSpec) -> tuple:
    """Every ArchSpec fact the mapper's choice and costs depend on: array rows, cols and
    dataflow, buffer depths (:meth:`GemmLayout.depths`) and DRAM rates (:func:`dram_rates`).
    Two ArchSpecs with equal keys get equal mappings and costs (memoization key)."""
    te = arch.tensor_engine
    return (te.rows, te.cols, te.dataflow, GemmLayout.depths(arch), dram_rates(arch), te.kind,
            te.depth, arch.memory.scratchpad_bytes, arch.memory.accumulator_bytes,
            arch.memory.scratchpad_bytes_per_cycle, te.count)


def native_dataflow(arch: ArchSpec) -> str:
    """The mapping dataflow of ``arch``'s own engine: ``tensor_engine.dataflow`` (systolic) or
    the tile-MAC kind's name."""
    te = arch.tensor_engine
    return te.dataflow if te.systolic else te.kind


def accepted_dataflows(arch: ArchSpec) -> tuple[str, ...]:
    """Dataflows a mapping on ``arch`` may use: ws/os/is on a systolic array (the other ones
    are what-ifs), only its own kind on a tile-MAC engine."""
    return DATAFLOWS if arch.tensor_engine.systolic else (arch.tensor_engine.kind,)


def _cmd_cycles(arch: ArchSpec, dataflow: str, m, k, n) -> tuple[np.ndarray, np.ndarray]:
    """(cycles, folds) of tile commands ``m x k x n`` run with ``dataflow`` on ``arch``."""
    te = arch.tensor_engine
    if dataflow in DATAFLOWS:
        return gemm_cycles_array(m, k, n, te.rows, te.cols, dataflow, count=te.count,
                                 pipeline_cycles=te.pipeline_cycles if dataflow == "ws" else 0)
    return tensor_engine_gemm_cycles(te, m, k, n)


def dram_rates(arch: ArchSpec) -> tuple[float, float]:
    """``(bytes per cycle, latency in cycles)`` of the off-chip memory at the core clock."""
    bw = arch.offchip.bandwidth_gbps * 1e3 / arch.clock_mhz
    lat = arch.offchip.latency_ns * arch.clock_mhz / 1e3
    return bw, lat


def buffer_words(dataflow: str, rows: int, cols: int, m, k, n) -> tuple[np.ndarray, ...]:
    """(A, B, accumulator) words one ``m x k x n`` command needs; numpy twin of
    :class:`GemmLayout`'s ``a_words``/``b_words``/``acc_words`` (its table), KB = ceil(k/R),
    NB = ceil(n/C), MB = ceil(m/R): WS A = KB*m, B = NB*KB*R, acc = NB*m; OS A = MB*k,
    B = NB*k, acc = NB*MB*R."""
    m, k, n = (np.asarray(x, np.int64) for x in (m, k, n))
    R, C = rows, cols
    nb = _cdiv(n, C)
    if dataflow == "ws":
        kb = _cdiv(k, R)
        return kb * m, nb * kb * R, nb * m
    if dataflow == "os":
        mb = _cdiv(m, R)
        return mb * k, nb * k, nb * mb * R
    raise ValueError(f"dataflow {dataflow!r}: buffer_words covers the RTL layouts ws, os")


def tile_capacity(arch: ArchSpec, dataflow: str, elem_bytes: int, m, k, n
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(P_A, P_B, P_C)``: how many ``m x k x n`` tiles of A, B and C (accumulator) fit in
    their buffers at once (floor of capacity / one tile's footprint; the footprint of
    :func:`buffer_words`, or of whole engine tiles on a tile-MAC engine or for ``is``)."""
    te = arch.tensor_engine
    if dataflow == "is":
        R, C = te.rows, te.cols
        kp = _cdiv(np.asarray(k, np.int64), R) * R
        mp = _cdiv(np.asarray(m, np.int64), C) * C
        n = np.asarray(n, np.int64)
        half, acc_b = ab_buffer_bytes(arch), arch.memory.accumulator_bytes
        return (half // (kp * mp * elem_bytes), half // (kp * n * elem_bytes),
                acc_b // (mp * n * ACC_BYTES))
    if dataflow in ENGINE_DATAFLOWS:
        gm, gk, gn = te.tile_shape
        mp, kp, np_ = (_cdiv(np.asarray(x, np.int64), g) * g
                       for x, g in ((m, gm), (k, gk), (n, gn)))
        half, acc_b = ab_buffer_bytes(arch), arch.memory.accumulator_bytes
        return (half // (mp * kp * elem_bytes), half // (kp * np_ * elem_bytes),
                acc_b // (mp * np_ * ACC_BYTES))
    da, db, dc = GemmLayout.depths(arch)
    a, b, acc = buffer_words(dataflow, te.rows, te.cols, m, k, n)
    return da // (a * elem_bytes), db // (b * elem_bytes), dc // acc


def _fits(arch: ArchSpec, dataflow: str, elem_bytes: int, slots: int, m, k, n) -> np.ndarray:
    """Boolean array: the command fits ``slots`` copies in each buffer (see module docstring)."""
    pa, pb, pc = tile_capacity(arch, dataflow, elem_bytes, m, k, n)
    return (pa >= slots) & (pb >= slots) & (pc >= slots)


def resident_tiles(arch: ArchSpec, dataflow: str, elem_bytes: int, slots: int, m, k, n
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(P_A, P_B, P_C)``: tiles of each operand its buffer keeps resident, ``tile_capacity -
    (slots - 1)`` (with double buffering one slot stays free for the next tile's prefetch)."""
    return tuple(p - (slots - 1) for p in tile_capacity(arch, dataflow, elem_bytes, m, k, n))


def working_sets(order_idx, tm, tk, tn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(W_A, W_B, W_C)``: the tiles of each operand one iteration of its irrelevant loop
    (A: n, B: m, C: k) visits — the product of the trips of the operand's own loops nested
    inside that loop (1 when none is)."""
    pos = _LOOP_POS[order_idx]
    pm, pk, pn = pos[..., 0], pos[..., 1], pos[..., 2]
    tm, tk, tn = (np.asarray(x, np.int64) for x in (tm, tk, tn))
    w_a = np.where(pm > pn, tm, 1) * np.where(pk > pn, tk, 1)
    w_b = np.where(pk > pm, tk, 1) * np.where(pn > pm, tn, 1)
    w_c = np.where(pm > pk, tm, 1) * np.where(pn > pk, tn, 1)
    return w_a, w_b, w_c


def refetch_factors(order_idx, tm, tk, tn, resident=(1, 1, 1)
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(r_A, r_B, r_C)``: how many times each operand tile is fetched (C: visited) per batch
    element, for loop orders ``LOOP_ORDERS[order_idx]``, tile counts and the tiles each buffer
    keeps resident ``(P_A, P_B, P_C)`` (:func:`resident_tiles`; default 1: a one-tile cache):
    ``r_X = T_d`` (the trips of X's irrelevant loop d) when X's working set
    (:func:`working_sets`) exceeds ``P_X``, else 1 (module docstring)."""
    w_a, w_b, w_c = working_sets(order_idx, tm, tk, tn)
    pa, pb, pc = (np.asarray(p, np.int64) for p in resident)
    tm, tk, tn = (np.asarray(x, np.int64) for x in (tm, tk, tn))
    return (np.where(w_a > pa, tn, 1), np.where(w_b > pb, tm, 1), np.where(w_c > pc, tk, 1))


def tile_candidates(extent: int, granule: int, max_count: int) -> np.ndarray:
    """Candidate tile sizes (elements, descending) for one dimension of ``extent`` elements.

    Even splits ``min(extent, ceil(U/s)*g)`` for s = 1..U, U = ceil(extent/g), g = ``granule``
    (no tile larger than MAX_GEMM_DIM); when there are more than ``max_count``, the 8 largest and a
    geometric sample of the rest are kept."""
    return tile_candidates_subsample(_even_splits(int(extent), max(1, int(granule))),
                                     max_count).copy()


@lru_cache(maxsize=1024)
def _even_splits(extent: int, g: int) -> np.ndarray:
    """Every even-split tile size of :func:`tile_candidates` (descending, read-only, memoized)."""
    units = _cdiv(extent, g)
    s = np.arange(1, units + 1, dtype=np.int64)
    t = np.unique(np.minimum(extent, _cdiv(units, s) * g))[::-1]
    t = t[t <= MAX_GEMM_DIM]
    t.flags.writeable = False
    return t


def _granules(dataflow: str, rows: int, cols: int) -> tuple[int, int, int]:
    """Tile-size granules (m, k, n): the folded dimensions step by the array size."""
    return {"ws": (1, rows, cols), "is": (cols, rows, 1)}.get(dataflow, (rows, 1, cols))


def _grid_sum(per_command, op: GemmOp, mt, kt, nt):
    """Sum ``per_command(m, k, n)`` (tuple of integer arrays) over every tile command of one
    batch element: the 2x2x2 (full, edge) size classes weighted by their counts (the classes
    are broadcast on three leading axes, so ``per_command`` is called once)."""
    sizes, counts = [], []
    for axis, (ext, t) in enumerate(((op.m, mt), (op.k, kt), (op.n, nt))):
        t = np.asarray(t, np.int64)
        cnt = _cdiv(ext, t)
        shape = [1, 1, 1, len(t)]
        shape[axis] = 2
        sizes.append(np.stack([t, ext - (cnt - 1) * t]).reshape(shape))
        counts.append(np.stack([cnt - 1, np.ones_like(cnt)]).reshape(shape))
    w = counts[0] * counts[1] * counts[2]
    return [(w * v).sum(axis=(0, 1, 2)) for v in per_command(*sizes)]


def command_sram_reads(arch: ArchSpec, dataflow: str, elem_bytes: int, m, k, n
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A bytes, B bytes, stream cycles)`` one ``m x k x n`` command reads from the A and B
    scratchpad buffers, and the cycles the engine streams operands. WS: each of the KB*NB folds
    streams m rows of R activations (A: folds*m*R*e) after loading R*C weights (B:
    folds*R*C*e), streaming m cycles; OS: each of the MB*NB folds streams k columns of R and k
    rows of C (A: folds*k*R*e, B: folds*k*C*e), k cycles; IS: each of the KB*ceil(m/C) folds
    loads R*C inputs (A: folds*R*C*e) and streams n columns of R weights (B: folds*n*R*e), n
    cycles (with several engines, S engines holding copies of a stationary tile load it S
    times: :func:`~tilewright.compiler.core_timing.engine_split`); tile-MAC: a beat reads one A
    engine tile (Tm*Tk) and one B tile (Tk*Tn), one beat per cycle. Bytes are the whole
    command's (all ``tensor_engine.count`` engines read the one scratchpad); stream cycles are
    the busiest engine's."""
    te = arch.tensor_engine
    if dataflow in ENGINE_DATAFLOWS:
        tm, tk, tn = te.tile_shape
        beats = engine_gemm_beats(te.kind, te.engine_params, m, k, n)
        busiest = (_cdiv(engine_output_tiles(te.kind, te.engine_params, m, n), te.count)
                   * _cdiv(np.asarray(k, np.int64), tk))
        return beats * tm * tk * elem_bytes, beats * tk * tn * elem_bytes, busiest
    R, C = te.rows, te.cols
    folds, fe, se, S = engine_split(m, k, n, R, C, dataflow, te.count)
    stream = fe * se
    if dataflow == "ws":       # each of the S engines sharing a weight tile loads it
        return folds * m * R * elem_bytes, folds * R * C * S * elem_bytes, stream
    if dataflow == "is":
        return folds * R * C * S * elem_bytes, folds * n * R * elem_bytes, stream
    return folds * k * R * elem_bytes, folds * k * C * elem_bytes, stream


def sram_cycles(arch: ArchSpec, a_bytes, b_bytes) -> np.ndarray:
    """Cycles the scratchpad needs to deliver ``a_bytes`` from the A buffer and ``b_bytes`` from
    the B buffer, each at ``memory.scratchpad_bytes_per_cycle`` (= banks * bank_width_bytes)
    in parallel: ``ceil(max(a, b) / rate)``; 0 when the ArchSpec sets no bank width (the
    RTL's ports deliver one layout word per cycle, exactly the engine's demand)."""
    rate = arch.memory.scratchpad_bytes_per_cycle
    a, b = np.asarray(a_bytes, np.int64), np.asarray(b_bytes, np.int64)
    if rate is None:
        return np.zeros(np.broadcast(a, b).shape, np.int64)
    return _cdiv(np.maximum(a, b), rate)


def command_cycles(arch: ArchSpec, dataflow: str, elem_bytes: int, m, k, n) -> np.ndarray:
    """Cycles of ``m x k x n`` commands: the engine's closed form or, when the scratchpad cannot
    deliver the operands that fast, the SRAM cycles (:func:`sram_cycles`), whichever is larger.
    The RTL presets set no bank width, so there it is the RTL-exact closed form."""
    cyc = _cmd_cycles(arch, dataflow, m, k, n)[0]
    a, b, _ = command_sram_reads(arch, dataflow, elem_bytes, m, k, n)
    return np.maximum(cyc, sram_cycles(arch, a, b))


def command_sram_bytes(arch: ArchSpec, dataflow: str, elem_bytes: int, m, k, n
                       ) -> tuple[np.ndarray, np.ndarray]:
    """``(scratchpad bytes, accumulator bytes)`` the engine moves for ``m x k x n`` commands
    (no DMA): the A and B operand reads of :func:`command_sram_reads` and the accumulator
    traffic of :func:`_command_costs` (WS/IS read-modify-write of ``m*C`` / ``n*C`` int32 lanes
    per fold, OS ``R*C`` lanes drained per fold, a tile-MAC engine each output tile written
    once). These are the bytes SRAM access energy follows
    (:func:`tilewright.dataflow_sim.energy_area.energy_breakdown`)."""
    _, sp, acc, _, _, _ = _command_costs(arch, dataflow, elem_bytes)(m, k, n)
    return sp, acc


def _command_costs(arch: ArchSpec, dataflow: str, elem_bytes: int):
    """Per-command (cycles, scratchpad read bytes, accumulator bytes, stream cycles, fill
    cycles, SRAM cycles) for ``dataflow``: scratchpad reads and stream cycles of
    :func:`command_sram_reads`; WS read-modify-writes m*C int32 lanes per fold, OS drains R*C
    int32 lanes per fold, a tile-MAC engine writes each output tile once. Cycles are
    :func:`command_cycles`; fill = closed form - stream (weight loading, fill, drain)."""
    te = arch.tensor_engine
    R, C = te.rows, te.cols

    def costs(m, k, n):
        cyc, folds = _cmd_cycles(arch, dataflow, m, k, n)
        a, b, stream = command_sram_reads(arch, dataflow, elem_bytes, m, k, n)
        sram = sram_cycles(arch, a, b)
        if dataflow in ENGINE_DATAFLOWS:   # folds = output tiles
            tm, _, tn = te.tile_shape
            acc = folds * tm * tn * ACC_BYTES
        elif dataflow == "ws":
            acc = folds * m * C * ACC_BYTES * 2
        elif dataflow == "is":
            acc = folds * n * C * ACC_BYTES * 2
        else:
            acc = folds * R * C * ACC_BYTES
        return np.maximum(cyc, sram), a + b, acc, stream, cyc - stream, sram
    return costs


# ---- enumeration and evaluation ---------------------------------------------------------------
@dataclass
class MappingSpace:
    """Every evaluated mapping of one op: numpy columns (one entry per mapping)."""

    op: GemmOp
    arch: ArchSpec
    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["m_t"])

    def to_frame(self) -> pd.DataFrame:
        """The columns as a DataFrame (order and dataflow as strings)."""
        df = pd.DataFrame({k: v for k, v in self.columns.items()})
        df["order"] = np.array(LOOP_ORDERS)[df.pop("order_idx")]
        df["dataflow"] = np.array(_ALL_DATAFLOWS)[df.pop("dataflow_idx")]
        return df

    def mapping(self, i: int) -> Mapping:
        c = self.columns
        return Mapping(int(c["m_t"][i]), int(c["k_t"][i]), int(c["n_t"][i]),
                       LOOP_ORDERS[int(c["order_idx"][i])],
                       _ALL_DATAFLOWS[int(c["dataflow_idx"][i])],
                       bool(c["double_buffer"][i]))

    def cost(self, i: int) -> MappingCost:
        c = self.columns
        out = {}
        for f in fields(MappingCost):
            v = c[f.name][i]
            out[f.name] = str(v) if f.type == "str" else (float(v) if f.type == "float"
                                                            else int(v))
        return MappingCost(**out)


def enumerate_mappings(op: GemmOp, arch: ArchSpec, *, dataflows: Sequence[str] | None = None,
                       orders: Sequence[str] = LOOP_ORDERS, double_buffer: bool = True,
                       split_k: bool = True, max_candidates: int = 24,
                       prune_tie_rtol: float | None = None) -> MappingSpace:
    """Every mapping of ``op`` that fits ``arch``'s buffers, evaluated (:func:`evaluate_mappings`).

    ``dataflows`` defaults to the ArchSpec's own; others evaluate the same array as if it were
    built with that dataflow (a what-if). ``prune_tie_rtol`` (None: keep all) keeps only the
    tile combos that may hold a mapping within that relative tolerance of the fewest cycles
    (:func:`_prune_combos`; exact: :func:`best_index` with objective "cycles" and that
    ``tie_rtol`` picks the same mapping from the pruned space as from the whole one). Raises
    ValueError naming the op, its sizes and the buffers when no tiling fits."""
    dataflows = (native_dataflow(arch),) if dataflows is None else tuple(dataflows)
    ok_df = accepted_dataflows(arch)
    bad = [d for d in dataflows if d not in ok_df] + [o for o in orders if o not in LOOP_ORDERS]
    if bad or not dataflows or not orders:
        raise ValueError(f"op {op.name!r}: dataflows {dataflows} / orders {tuple(orders)}: "
                         f"accepted are {ok_df} and {LOOP_ORDERS} (non-empty)")
    order_ids = np.array([LOOP_ORDERS.index(o) for o in orders], np.int64)
    slots = 2 if double_buffer else 1
    combos = [(d, _tile_combos(op, arch, d, slots, split_k, max_candidates)) for d in dataflows]
    combos = [(d, c) for d, c in combos if c is not None]
    if not combos:
        te, mem = arch.tensor_engine, arch.memory
        raise ValueError(
            f"op {op.name!r} ({op.shape_text}, {op.elem_bytes} B/element): no tiling fits "
            f"{arch.name} ({te.describe() if not te.systolic else f'{te.rows}x{te.cols}'} "
            f"{'/'.join(dataflows)}, scratchpad "
            f"{mem.scratchpad_kib} KiB, accumulator {mem.accumulator_kib} KiB, "
            f"{'double' if double_buffer else 'single'} buffered"
            f"{'' if split_k else ', k_t = K'})")
    if prune_tie_rtol is None:
        bases = [(d, _combo_columns(op, arch, *c, d)) for d, c in combos]
    else:
        bases = _prune_combos(op, arch, combos, order_ids, double_buffer, prune_tie_rtol)
    parts = [_order_columns(op, arch, _repeat_rows(base, len(order_ids)),
                            np.tile(order_ids, len(base["m_t"])), d, double_buffer)
             for d, base in bases]
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return MappingSpace(op, arch, cols)


def _tile_combos(op: GemmOp, arch: ArchSpec, dataflow: str, slots: int, split_k: bool,
                 max_candidates: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Tile sizes ``(m_t, k_t, n_t)`` (arrays: the candidate grid m-major, then every
    ``(m_t, n_t)`` with the largest K tile that fits beside it when the grid lacks it) of one
    dataflow that fit the buffers; None if none fits."""
    te = arch.tensor_engine
    gm, gk, gn = te.tile_shape if dataflow in ENGINE_DATAFLOWS else _granules(dataflow, te.rows,
                                                                               te.cols)
    mins = [min(g, e) for g, e in ((gm, op.m), (gk, op.k), (gn, op.n))]
    fit = lambda m, k, n: _fits(arch, dataflow, op.elem_bytes, slots, m, k, n)  # noqa: E731
    cands, every = [], []
    for i, (ext, g) in enumerate(((op.m, gm), (op.k, gk), (op.n, gn))):
        if i == 1 and not split_k:
            t = np.array([op.k], np.int64)
        else:  # drop sizes that cannot fit even with the other two dimensions minimal
            t = _even_splits(int(ext), max(1, g))       # = tile_candidates(ext, g, no limit)
            probe = [np.full_like(t, v) for v in mins]
            probe[i] = t
            t = t[fit(*probe)]
        every.append(t)
        cands.append(tile_candidates_subsample(t, max_candidates) if len(t) > 1 else t)
    cm, ck, cn = cands                  # every combination, m-major (= meshgrid "ij", raveled)
    mt = np.repeat(cm, len(ck) * len(cn))
    kt = np.tile(np.repeat(ck, len(cn)), len(cm))
    nt = np.tile(cn, len(cm) * len(ck))
    ok = fit(mt, kt, nt) if len(mt) else np.zeros(0, bool)
    mt, kt, nt = mt[ok], kt[ok], nt[ok]
    if len(cm) and len(cn) and len(every[1]):
        # output tiles the subsample may skip: each M tile with the largest N tile that fits
        # beside it and vice versa (near-square accumulator tiles, the fewest re-reads); then
        # every output tile with the largest K tile that fits (fewer fills and partial sums)
        kmin = every[1][-1]
        fm, fn = every[0], every[2]
        nf = _largest_fitting(fn, lambda n: fit(fm, kmin, n))      # per M size (all of them)
        mf = _largest_fitting(fm, lambda m: fit(m, kmin, fn))      # per N size
        # the largest M tile for each distinct N fill, and vice versa (the pairs no other
        # pair contains), plus the subsampled sizes' own fills
        _, i_n = np.unique(nf, return_index=True)
        _, i_m = np.unique(mf, return_index=True)
        pm = np.concatenate([np.repeat(cm, len(cn)), fm[i_n], mf[i_m]])
        pn = np.concatenate([np.tile(cn, len(cm)), nf[i_n], fn[i_m]])
        new_pair = np.arange(len(pm)) >= len(cm) * len(cn)
        new_pair &= (pm > 0) & (pn > 0) & ~(np.isin(pm, cm) & np.isin(pn, cn))
        if np.any(new_pair):
            em, en = np.unique(np.stack([pm[new_pair], pn[new_pair]], 1), axis=0).T
            gm_, gk_, gn_ = (np.repeat(em, len(ck)), np.tile(ck, len(em)),
                             np.repeat(en, len(ck)))
            ok = fit(gm_, gk_, gn_)
            mt, kt, nt = (np.concatenate([x, y[ok]]) for x, y in ((mt, gm_), (kt, gk_),
                                                                   (nt, gn_)))
            pm = np.concatenate([pm[:len(cm) * len(cn)], em])
            pn = np.concatenate([pn[:len(cm) * len(cn)], en])
        else:
            pm, pn = pm[:len(cm) * len(cn)], pn[:len(cm) * len(cn)]
        if split_k:
            kf = _largest_fitting(every[1], lambda k: fit(pm, k, pn))
            new = (kf > 0) & ~np.isin(kf, ck)
            mt, kt, nt = (np.concatenate([x, y[new]]) for x, y in ((mt, pm), (kt, kf), (nt, pn)))
    return (mt, kt, nt) if len(mt) else None


def _largest_fitting(sizes: np.ndarray, fits) -> np.ndarray:
    """Per row of ``fits``' other arguments, the largest of the descending ``sizes`` for which
    ``fits(size_array)`` holds (0 if none): a vectorized binary search (fitting is monotone)."""
    probe = fits(np.full(1, sizes[-1]))
    lo = np.zeros(len(np.atleast_1d(probe)), np.int64)     # first index that may fit
    hi = np.full(len(lo), len(sizes), np.int64)            # sizes[hi:] all fit
    while np.any(lo < hi):
        active = lo < hi
        mid = (lo + hi) // 2
        ok = fits(sizes[np.minimum(mid, len(sizes) - 1)])
        hi = np.where(active & ok, mid, hi)
        lo = np.where(active & ~ok, mid + 1, lo)
    return np.where(hi < len(sizes), sizes[np.minimum(hi, len(sizes) - 1)], 0)


def _repeat_rows(base: dict[str, np.ndarray], times: int) -> dict[str, np.ndarray]:
    """Every per-combo column repeated ``times`` (one row per loop order, combo-major)."""
    return {k: np.repeat(v, times) for k, v in base.items()}


def _lower_bound(op: GemmOp, arch: ArchSpec, base: dict[str, np.ndarray], double_buffer: bool
                 ) -> np.ndarray:
    """A lower bound (cycles) of every loop order's cycles, per tile combo: compute cannot start
    before the first load nor end before the last write-back (``L_0 + T_core + W_last``), and the
    DMA engine moves at least every operand once (``r = 1``) before the last command ends."""
    M, K, N, B, e, ob = op.m, op.k, op.n, op.batch, op.elem_bytes, op.out_bytes
    bw, lat = dram_rates(arch)
    tm, tk, tn = base["tm"], base["tk"], base["tn"]
    dram_min = B * (M * K * e + K * N * e + M * N * ob)
    dma_min = dram_min / bw + B * (tm * tk + tk * tn + tm * tn) * lat
    core = B * base["core"]
    if not double_buffer:
        return core + dma_min
    return np.maximum(base["load_first"] + core + base["write_last"], dma_min + base["c_last"])


def _quick_lower_bound(op: GemmOp, arch: ArchSpec, dataflow: str, mt, kt, nt,
                       double_buffer: bool) -> np.ndarray:
    """A cheaper, looser :func:`_lower_bound` (no sum over every tile command): of the 2x2x2
    (full, edge) command size classes only the one with the most commands per dimension is
    counted (full and edge classes of equal size merged), and the last command is left out."""
    B, e, ob = op.batch, op.elem_bytes, op.out_bytes
    bw, lat = dram_rates(arch)
    sizes, weight, trips, edges = [], 1, [], []
    for ext, t in ((op.m, mt), (op.k, kt), (op.n, nt)):
        cnt = _cdiv(ext, t)
        edge = ext - (cnt - 1) * t
        many = cnt >= 2
        sizes.append(np.where(many, t, edge))
        weight = weight * np.where(many, cnt - 1 + (edge == t), 1)
        trips.append(cnt)
        edges.append(edge)
    core_lb = B * (weight * _cmd_cycles(arch, dataflow, *sizes)[0])
    tm, tk, tn = trips
    dram_min = B * (op.m * op.k * e + op.k * op.n * e + op.m * op.n * ob)
    dma_min = dram_min / bw + B * (tm * tk + tk * tn + tm * tn) * lat
    if not double_buffer:
        return core_lb + dma_min
    load_first = (mt * kt + kt * nt) * e / bw + 2 * lat
    write_last = edges[0] * edges[2] * ob / bw + lat
    return np.maximum(load_first + core_lb + write_last, dma_min)


def _prune_combos(op: GemmOp, arch: ArchSpec, combos: list, order_ids: np.ndarray,
                  double_buffer: bool, tie_rtol: float, probe: int = 16) -> list:
    """Per dataflow, the columns (:func:`_combo_columns`) of the tile combos that may hold a
    mapping within ``tie_rtol`` of the fewest cycles, in their original order. The ``probe``
    combos with the smallest :func:`_quick_lower_bound` are evaluated in every loop order; their
    fewest cycles ``U`` bound the minimum from above, so a combo whose lower bound (quick, then
    :func:`_lower_bound`) exceeds ``U * (1 + tie_rtol)`` (plus 1e-9 relative for rounding)
    holds no mapping :func:`best_index` could choose."""
    no = len(order_ids)
    quick = [_quick_lower_bound(op, arch, d, *c, double_buffer) for d, c in combos]
    upper = np.inf
    for (d, c), lb in zip(combos, quick):
        sel = np.sort(np.argsort(lb, kind="stable")[:probe])
        base = _combo_columns(op, arch, *(x[sel] for x in c), d)
        cyc = _order_columns(op, arch, _repeat_rows(base, no), np.tile(order_ids, len(sel)), d,
                             double_buffer)["cycles"]
        upper = min(upper, float(cyc.min()))
    limit = upper * (1 + tie_rtol) * (1 + 1e-9)
    out = []
    for (d, c), lb in zip(combos, quick):
        keep = np.flatnonzero(lb <= limit)
        if not len(keep):
            continue
        base = _combo_columns(op, arch, *(x[keep] for x in c), d)
        keep = np.flatnonzero(_lower_bound(op, arch, base, double_buffer) <= limit)
        if len(keep):
            out.append((d, {k: v[keep] for k, v in base.items()}))
    return out


def tile_candidates_subsample(t: np.ndarray, max_count: int) -> np.ndarray:
    """At most ``max_count`` of the descending sizes ``t``: the 8 largest and a geometric sample
    of the rest (keeps the large tiles, which amortize fill/drain and transfer latency)."""
    if len(t) <= max_count:
        return t
    return t[_subsample_index(len(t), max_count)]


@lru_cache(maxsize=4096)
def _subsample_index(n: int, max_count: int) -> np.ndarray:
    """Indices kept by :func:`tile_candidates_subsample` from ``n`` sizes (memoized)."""
    rest = np.unique(np.geomspace(8, n - 1, max_count - 8).round().astype(np.int64))
    idx = np.unique(np.concatenate([np.arange(8), rest]))
    idx.flags.writeable = False
    return idx


def evaluate_mappings(op: GemmOp, arch: ArchSpec, m_t, k_t, n_t, order_idx, dataflow: str, *,
                      double_buffer: bool = True) -> dict[str, np.ndarray]:
    """The cost model of the module docstring for arrays of mappings (one dataflow).

    ``m_t, k_t, n_t``: tile sizes (elements); ``order_idx``: indices into :data:`LOOP_ORDERS`.
    Returns numpy columns: the mapping fields and every :class:`MappingCost` field."""
    mt, kt, nt, oi = (np.asarray(x, np.int64) for x in (m_t, k_t, n_t, order_idx))
    return _order_columns(op, arch, _combo_columns(op, arch, mt, kt, nt, dataflow), oi, dataflow,
                          double_buffer)


def _combo_columns(op: GemmOp, arch: ArchSpec, mt, kt, nt, dataflow: str
                   ) -> dict[str, np.ndarray]:
    """The loop-order-independent part of the cost model, per tile combo ``(m_t, k_t, n_t)``:
    tile counts, per-batch-element core/scratchpad/accumulator sums over the tile commands, the
    first load, last write-back and last command (cycles)."""
    mt, kt, nt = (np.asarray(x, np.int64) for x in (mt, kt, nt))
    M, K, N, e, ob = op.m, op.k, op.n, op.elem_bytes, op.out_bytes
    tm, tk, tn = _cdiv(M, mt), _cdiv(K, kt), _cdiv(N, nt)
    bw, lat = dram_rates(arch)
    per_cmd = _command_costs(arch, dataflow, e)
    core, sp_read, acc_array, stream, fill, sram = _grid_sum(per_cmd, op, mt, kt, nt)
    em, ek, en = M - (tm - 1) * mt, K - (tk - 1) * kt, N - (tn - 1) * nt
    load_first = (mt * kt + kt * nt) * e / bw + 2 * lat
    write_last = em * en * ob / bw + lat
    c_last = per_cmd(em, ek, en)[0]
    return {"m_t": mt, "k_t": kt, "n_t": nt, "tm": tm, "tk": tk, "tn": tn, "core": core,
            "sp_read": sp_read, "acc_array": acc_array, "stream": stream, "fill": fill,
            "sram": sram, "load_first": load_first,
            "write_last": write_last, "c_last": c_last}


def _order_columns(op: GemmOp, arch: ArchSpec, cb: dict[str, np.ndarray], oi: np.ndarray,
                   dataflow: str, double_buffer: bool) -> dict[str, np.ndarray]:
    """The columns of :func:`evaluate_mappings` from per-row combo columns ``cb``
    (:func:`_combo_columns`, one row per mapping) and loop orders ``oi``."""
    peak = arch.tensor_engine.macs_per_cycle
    mt, kt, nt = cb["m_t"], cb["k_t"], cb["n_t"]
    tm, tk, tn = cb["tm"], cb["tk"], cb["tn"]
    M, K, N, B, e, ob = op.m, op.k, op.n, op.batch, op.elem_bytes, op.out_bytes
    bw, lat = dram_rates(arch)
    core = cb["core"]

    resident = resident_tiles(arch, dataflow, e, 2 if double_buffer else 1, mt, kt, nt)
    r_a, r_b, r_c = refetch_factors(oi, tm, tk, tn, resident)
    a_bytes = B * r_a * M * K * e
    b_bytes = B * r_b * K * N * e
    c_read = B * (r_c - 1) * M * N * ACC_BYTES
    c_write = B * ((r_c - 1) * M * N * ACC_BYTES + M * N * ob)
    dram = a_bytes + b_bytes + c_read + c_write
    c_visits = tm * tn * r_c
    transfers = B * (tm * tk * r_a + tk * tn * r_b + 2 * c_visits - tm * tn)
    dma = dram / bw + transfers * lat
    core = B * core

    load_first, write_last, c_last = cb["load_first"], cb["write_last"], cb["c_last"]
    if double_buffer:
        w_a, w_b, w_c = working_sets(oi, tm, tk, tn)
        # a resident operand (working set > 1 tile kept) moves in one pass of its loop d
        conc = (np.where((w_a > 1) & (r_a == 1), tn, 1), np.where((w_b > 1) & (r_b == 1), tm, 1),
                np.where((w_c > 1) & (r_c == 1), tk, 1))
        pipe = _burst_cycles(op, oi, (tm, tk, tn), core, (a_bytes, b_bytes, c_read + c_write),
                             (B * tm * tk * r_a, B * tk * tn * r_b, B * (2 * c_visits - tm * tn)),
                             bw, lat, conc)
        cycles = np.maximum(np.maximum(load_first + core, dma - write_last + c_last)
                            + write_last, pipe)
    else:
        cycles = core + dma

    macs = op.macs
    intensity = 2.0 * macs / dram
    ridge = 2.0 * peak / bw
    acc_dma = B * (r_c * M * N + (r_c - 1) * M * N) * ACC_BYTES
    n = len(mt)
    return {
        "m_t": mt, "k_t": kt, "n_t": nt, "order_idx": oi,
        "dataflow_idx": np.full(n, _ALL_DATAFLOWS.index(dataflow), np.int64),
        "double_buffer": np.full(n, double_buffer),
        "cycles": cycles.astype(np.float64), "core_cycles": core, "dma_cycles": dma,
        "macs": np.full(n, macs, np.int64), "utilization": macs / (cycles * peak),
        "n_tiles": B * tm * tk * tn, "transfers": transfers, "dram_bytes": dram,
        "dram_a_bytes": a_bytes, "dram_b_bytes": b_bytes, "dram_c_read_bytes": c_read,
        "dram_c_write_bytes": c_write,
        "scratchpad_bytes": B * cb["sp_read"] + a_bytes + b_bytes,
        "accumulator_bytes": B * cb["acc_array"] + acc_dma,
        "intensity": intensity, "ridge": np.full(n, ridge),
        "bound": np.where(core >= dma, "compute", "bandwidth"),
        "roofline_bound": np.where(intensity >= ridge, "compute", "bandwidth"),
        "compulsory_bytes": np.full(n, B * (M * K * e + K * N * e + M * N * ob), np.int64),
        "stream_cycles": B * cb["stream"], "fill_cycles": B * cb["fill"],
        "sram_cycles": B * cb["sram"],
    }


def _burst_cycles(op: GemmOp, order_idx, trips, core, op_bytes, op_transfers, bw: float,
                  lat: float, conc=(1, 1, 1)) -> np.ndarray:
    """Pipeline time with bursty DMA: ``runs * ((T3-1)*max(c, d_in) + max(c, d_in + d_out))``.

    A run is one pass of the innermost loop with more than one tile (T3 tiles; T3 = 1 if there
    is none). Operands indexed by that loop change every tile (``d_in`` = their DMA cycles per
    tile); the others change once per run (``d_out`` = their DMA cycles per run); ``c`` = core
    cycles per tile. Averages over the op's exact totals (edge tiles are not separated).
    ``conc`` (per operand A, B, C): a resident operand's traffic falls in one of ``T_d``
    iterations of its irrelevant loop d (``T_d``; 1 = spread evenly): the runs are split into
    the groups where each such operand is in that pass (its traffic times ``T_d``) or not (none),
    weighted ``1/T_d`` and ``1 - 1/T_d`` (loops of different operands taken as independent)."""
    pos = _LOOP_POS[order_idx]
    trips = np.stack(trips, axis=-1)
    eff = np.where(trips > 1, pos, -1)                 # loops with more than one tile
    inner = np.argmax(eff, axis=-1)                    # 0 m, 1 k, 2 n (innermost with T > 1)
    has_inner = eff.max(axis=-1) >= 0
    t3 = np.where(has_inner, np.take_along_axis(trips, inner[:, None], -1)[:, 0], 1)
    tiles = op.batch * trips.prod(axis=-1)
    runs = tiles / t3
    # operand dims: A (m, k), B (k, n), C (m, n)
    member = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]], bool)   # [operand, dim]
    per_in, per_out = [], []
    for j in range(3):
        d = op_bytes[j] / bw + op_transfers[j] * lat
        every = member[j][inner] & has_inner
        per_in.append(np.where(every, d, 0.0) / tiles)
        per_out.append(np.where(every, 0.0, d) / runs)
    conc = [np.broadcast_to(np.asarray(x, np.float64), tiles.shape) for x in conc]
    c = core / tiles
    out = np.zeros(len(tiles))
    for group in range(8):                             # bit j: operand j in its loaded pass
        weight = np.ones(len(tiles))
        di = np.zeros(len(tiles))
        do = np.zeros(len(tiles))
        for j in range(3):
            bursty = conc[j] > 1
            if group >> j & 1:
                weight = weight * np.where(bursty, 1 / conc[j], 0.0)
                scale = np.where(bursty, conc[j], 0.0)
            else:
                weight = weight * np.where(bursty, 1 - 1 / conc[j], 1.0)
                scale = np.where(bursty, 0.0, 1.0)
            di += scale * per_in[j]
            do += scale * per_out[j]
        out += weight * runs * ((t3 - 1) * np.maximum(c, di) + np.maximum(c, di + do))
    return out


# ---- choosing ------------------------------------------------------------------------------
@dataclass(frozen=True)
class MapperResult:
    """The best mapping of one op, its cost, and the whole evaluated space."""

    op: GemmOp
    mapping: Mapping
    cost: MappingCost
    space: MappingSpace
    seconds: float
    """wall time of enumeration + evaluation + choice (s)"""

    @property
    def evaluated(self) -> int:
        """Design points (mappings) evaluated for this op."""
        return len(self.space)

    @property
    def mappings_per_second(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else float("inf")


def best_index(space: MappingSpace, objective: Objective = "cycles", tie_rtol: float = 1e-3
               ) -> int:
    """Index of the best mapping: among those within a relative ``tie_rtol`` of the minimum of
    ``objective``, the one with the fewest DRAM bytes (objective "cycles") or cycles (objective
    "dram_bytes"), then fewest transfers, then least ``objective``. A near-tie on cycles is
    common (compute-bound ops whose tilings differ only in the first load), and there the
    smaller DRAM traffic is the better mapping. ``tie_rtol=0`` gives the strict minimum."""
    c = space.columns
    if objective not in ("cycles", "dram_bytes"):
        raise ValueError(f"objective {objective!r}: must be 'cycles' or 'dram_bytes'")
    if tie_rtol < 0:
        raise ValueError(f"tie_rtol = {tie_rtol}: must be >= 0")
    obj = c[objective]
    near = np.flatnonzero(obj <= obj.min() * (1 + tie_rtol))
    other = "dram_bytes" if objective == "cycles" else "cycles"
    keys = (obj[near], c["transfers"][near], c[other][near])
    return int(near[np.lexsort(keys)[0]])


def map_gemm(op: GemmOp, arch: ArchSpec, *, dataflows: Sequence[str] | None = None,
             orders: Sequence[str] = LOOP_ORDERS, double_buffer: bool = True,
             split_k: bool = True, objective: Objective = "cycles", tie_rtol: float = 1e-3,
             max_candidates: int = 24, prune: bool = False) -> MapperResult:
    """Enumerate, evaluate and choose the best mapping of ``op`` on ``arch``
    (:func:`enumerate_mappings` for the arguments, :func:`best_index` for the choice).

    ``prune=True`` (objective "cycles" only; ignored otherwise) skips the tile combos that
    provably cannot hold the chosen mapping (``prune_tie_rtol`` of :func:`enumerate_mappings`):
    the same mapping and cost, several times faster, with ``space`` holding only what was kept."""
    t0 = time.perf_counter()
    space = enumerate_mappings(op, arch, dataflows=dataflows, orders=orders,
                               double_buffer=double_buffer, split_k=split_k,
                               max_candidates=max_candidates,
                               prune_tie_rtol=tie_rtol if prune and objective == "cycles"
                               else None)
    i = best_index(space, objective, tie_rtol)
    seconds = time.perf_counter() - t0
    return MapperResult(op, space.mapping(i), space.cost(i), space, seconds)


def map_gemms(ops: Sequence[GemmOp], arch: ArchSpec, *, tie_rtol: float = 1e-3,
              max_candidates: int = 24) -> list[MapperResult | None]:
    """``map_gemm(op, arch, tie_rtol=tie_rtol, max_candidates=max_candidates, prune=True)`` of
    every op (None where no tiling fits), the ops' candidates evaluated together in one
    vectorized pass per stage (fewer numpy calls than one op at a time; results identical,
    spaces included)."""
    t0 = time.perf_counter()
    if tie_rtol < 0:
        raise ValueError(f"tie_rtol = {tie_rtol}: must be >= 0")
    d = native_dataflow(arch)
    order_ids = np.arange(len(LOOP_ORDERS), dtype=np.int64)
    no = len(order_ids)
    combos = [_tile_combos(op, arch, d, 2, True, max_candidates) for op in ops]
    live = [i for i, c in enumerate(combos) if c is not None]
    out: list[MapperResult | None] = [None] * len(ops)
    if not live:
        return out
    owner = np.concatenate([np.full(len(combos[i][0]), i, np.int64) for i in live])
    mt, kt, nt = (np.concatenate([combos[i][j] for i in live]) for j in range(3))
    rows = _Rows.of(ops, owner)
    quick = _quick_lower_bound(rows, arch, d, mt, kt, nt, True)
    # probe: per op, the combos of smallest quick bound (as _prune_combos does for one op)
    starts = np.searchsorted(owner, live)
    ends = np.searchsorted(owner, live, side="right")
    sel = np.concatenate([lo + np.sort(np.argsort(quick[lo:hi], kind="stable")[:16])
                          for lo, hi in zip(starts, ends)])
    base = _combo_columns(rows.take(sel), arch, mt[sel], kt[sel], nt[sel], d)
    cyc = _order_columns(rows.take(sel).repeat(no), arch, _repeat_rows(base, no),
                         np.tile(order_ids, len(sel)), d, True)["cycles"]
    upper = np.full(len(ops), np.inf)
    np.minimum.at(upper, np.repeat(owner[sel], no), cyc)
    limit = upper * (1 + tie_rtol) * (1 + 1e-9)
    keep = np.flatnonzero(quick <= limit[owner])
    base = _combo_columns(rows.take(keep), arch, mt[keep], kt[keep], nt[keep], d)
    ok = np.flatnonzero(_lower_bound(rows.take(keep), arch, base, True) <= limit[owner[keep]])
    keep = keep[ok]
    base = {k: v[ok] for k, v in base.items()}
    cols = _order_columns(rows.take(keep).repeat(no), arch, _repeat_rows(base, no),
                          np.tile(order_ids, len(keep)), d, True)
    row_owner = np.repeat(owner[keep], no)
    seconds = (time.perf_counter() - t0) / len(live)
    for i in live:
        lo, hi = np.searchsorted(row_owner, [i, i + 1])
        op_cols = {k: v[lo:hi] for k, v in cols.items()}
        op_cols["macs"] = np.full(hi - lo, ops[i].macs, np.int64)
        space = MappingSpace(ops[i], arch, op_cols)
        j = best_index(space, "cycles", tie_rtol)
        out[i] = MapperResult(ops[i], space.mapping(j), space.cost(j), space, seconds)
    return out


def cost_of(op: GemmOp, arch: ArchSpec, mapping: Mapping) -> MappingCost:
    """Analytical cost of one given mapping. Raises ValueError if it does not fit ``arch``."""
    if mapping.order not in LOOP_ORDERS or mapping.dataflow not in accepted_dataflows(arch):
        raise ValueError(f"op {op.name!r}: mapping {mapping}: order must be one of {LOOP_ORDERS}"
                         f", dataflow one of {accepted_dataflows(arch)}")
    sizes = (mapping.m_t, mapping.k_t, mapping.n_t)
    if not all(1 <= t <= min(e, MAX_GEMM_DIM) for t, e in zip(sizes, (op.m, op.k, op.n))):
        raise ValueError(f"op {op.name!r} ({op.shape_text}): tile {sizes} must be within the op")
    slots = 2 if mapping.double_buffer else 1
    if not _fits(arch, mapping.dataflow, op.elem_bytes, slots, *sizes):
        raise ValueError(f"op {op.name!r} ({op.shape_text}): tile {'x'.join(map(str, sizes))} "
                         f"does not fit {arch.name}'s buffers ({slots} slot(s))")
    cols = evaluate_mappings(op, arch, [mapping.m_t], [mapping.k_t], [mapping.n_t],
                             [LOOP_ORDERS.index(mapping.order)], mapping.dataflow,
                             double_buffer=mapping.double_buffer)
    return MappingSpace(op, arch, cols).cost(0)
