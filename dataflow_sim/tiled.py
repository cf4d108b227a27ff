"""Cycle model of a tiled GEMM: DMA transfers and core commands tile by tile, double buffered.

Given a :class:`~tilewright.compiler.gemm_mapper.Mapping` of a
:class:`~tilewright.compiler.gemm_mapper.GemmOp`, :func:`tile_schedule` lists the tiles in execution
order (batch outermost, then the mapping's loop order) with, per tile ``i``:

* ``c[i]`` — cycles of its GEMM command, the RTL-exact closed form of
  :func:`~tilewright.compiler.core_timing.gemm_cycles_array` for the tile's actual (edge) sizes;
* ``ld[i]`` — its load job: the operand tiles it needs that are not in their buffer (A
  ``m*k*e`` bytes, B ``k*n*e`` bytes, and the int32 partial sums of C when this C tile was
  visited before), ``bytes / bw + transfers * lat`` cycles. An operand whose working set
  (:func:`~tilewright.compiler.gemm_mapper.working_sets`) fits the tiles its buffer keeps
  resident (:func:`~tilewright.compiler.gemm_mapper.resident_tiles`) is loaded at the first use
  of each tile only; otherwise a tile is loaded whenever its index changed since tile ``i-1``;
* ``wb[i]`` — its write-back job when the next tile works on another C tile (or it is the last):
  ``m*n`` elements of ``out_bytes`` (final, after the last k tile) or of 4 bytes (partial sums);
  a resident C (partial sums kept in the accumulator) is written once, final.

``bw`` = bytes/cycle and ``lat`` = cycles per transfer come from
:func:`~tilewright.compiler.gemm_mapper.dram_rates`; DMA durations are real-valued cycles (not rounded).

Timing, double buffered (two slots per buffer): one DMA engine serves jobs in the FIFO order
``L0, L1, W0, L2, W1, L3, ..., L[T-1], W[T-2], W[T-1]``; the controller issues ``W[i]`` and
``L[i+2]`` when command ``i`` ends (its output is complete and its input slots are free). With
``u[i]`` = end of command ``i`` and ``v[i]`` = end of the DMA job ``W[i]``
(``u[-1] = 0, v[-2] = 0, v[-1] = ld[0], ld[T] = 0``)::

    end_load[i] = v[i-2] + ld[i]                         (L[i] follows W[i-2] in the FIFO)
    u[i]        = max(u[i-1], end_load[i]) + c[i]         (core in order, waits for its operands)
    v[i]        = max(end_load[i+1], u[i]) + wb[i]        (W[i] follows L[i+1], waits for u[i])
    cycles      = v[T-1]

The accumulator's second slot is free by construction (``W[i-2]`` precedes ``L[i]``). The
recurrence is linear in the (max, +) algebra, ``x[i] = M[i] (x) x[i-1]`` with state
``x = (u[i], v[i], v[i-1])``; :func:`maxplus_scan` evaluates it in chunks of ``~sqrt(T)`` tiles,
numpy-vectorized across chunks (a loop over tile positions, never over cycles).

Single buffered: nothing overlaps, ``cycles = sum(ld + c + wb)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.gemm_mapper import (ACC_BYTES, LOOP_ORDERS, GemmOp, Mapping,
                                              command_cycles, dram_rates, resident_tiles,
                                              working_sets)

__all__ = ["TileSchedule", "TiledResult", "tile_schedule", "simulate_tiled", "pipeline_ends",
           "maxplus_scan"]

NEG = -np.inf  # the (max, +) zero


@dataclass(frozen=True)
class TileSchedule:
    """Per-tile arrays in execution order (length T = number of tile commands)."""

    m: np.ndarray
    k: np.ndarray
    n: np.ndarray
    compute: np.ndarray
    """cycles of each tile's GEMM command"""
    a_bytes: np.ndarray
    """DRAM bytes of A loaded before the tile (0 when the A tile is reused)"""
    b_bytes: np.ndarray
    c_read_bytes: np.ndarray
    """int32 partial sums of C read back before the tile"""
    c_write_bytes: np.ndarray
    """C bytes written back after the tile"""
    load_transfers: np.ndarray
    write_transfers: np.ndarray

    def __len__(self) -> int:
        return len(self.m)

    def load_cycles(self, bw: float, lat: float) -> np.ndarray:
        """``ld[i] = (A + B + C-read bytes) / bw + transfers * lat`` (cycles)."""
        return (self.a_bytes + self.b_bytes + self.c_read_bytes) / bw + self.load_transfers * lat

    def write_cycles(self, bw: float, lat: float) -> np.ndarray:
        """``wb[i] = C-write bytes / bw + transfers * lat`` (cycles)."""
        return self.c_write_bytes / bw + self.write_transfers * lat


@dataclass(frozen=True)
class TiledResult:
    """What the tiled cycle model measured. Cycles at the ArchSpec's clock."""

    cycles: float
    """end of the last write-back"""
    core_cycles: int
    """sum of the tile commands' cycles"""
    dma_cycles: float
    """time the DMA engine is busy (sum of all load and write-back jobs)"""
    n_tiles: int
    transfers: int
    dram_a_bytes: int
    dram_b_bytes: int
    dram_c_read_bytes: int
    dram_c_write_bytes: int
    compute_end: np.ndarray
    """u[i]: end of each tile's command (cycles)"""

    @property
    def dram_bytes(self) -> int:
        return (self.dram_a_bytes + self.dram_b_bytes + self.dram_c_read_bytes
                + self.dram_c_write_bytes)

    @property
    def core_idle_cycles(self) -> float:
        """Cycles the core waits (for operands, at the start and for the last write-back)."""
        return self.cycles - self.core_cycles


def _changed(*keys: np.ndarray) -> np.ndarray:
    """True where any key differs from the previous tile's (and at tile 0)."""
    out = np.ones(len(keys[0]), bool)
    diff = np.zeros(len(keys[0]) - 1, bool)
    for key in keys:
        diff |= key[1:] != key[:-1]
    out[1:] = diff
    return out


def _first(*keys: np.ndarray) -> np.ndarray:
    """True at the first occurrence of each key tuple."""
    out = np.zeros(len(keys[0]), bool)
    out[np.unique(np.stack(keys, axis=1), axis=0, return_index=True)[1]] = True
    return out


def tile_schedule(op: GemmOp, arch: ArchSpec, mapping: Mapping) -> TileSchedule:
    """The tiles of ``op`` under ``mapping`` in execution order (module docstring)."""
    tm, tk, tn = mapping.tile_counts(op)
    counts = {"m": tm, "k": tk, "n": tn}
    order = mapping.order
    grid = np.indices((op.batch, *(counts[d] for d in order)), dtype=np.int64).reshape(4, -1)
    b = grid[0]
    idx = {d: grid[1 + order.index(d)] for d in "mkn"}
    im, ik, inn = idx["m"], idx["k"], idx["n"]
    m = np.minimum(mapping.m_t, op.m - im * mapping.m_t)
    k = np.minimum(mapping.k_t, op.k - ik * mapping.k_t)
    n = np.minimum(mapping.n_t, op.n - inn * mapping.n_t)
    e = op.elem_bytes
    compute = command_cycles(arch, mapping.dataflow, e, m, k, n)
    slots = 2 if mapping.double_buffer else 1
    res = resident_tiles(arch, mapping.dataflow, e, slots, mapping.m_t, mapping.k_t, mapping.n_t)
    ws = working_sets(LOOP_ORDERS.index(order), tm, tk, tn)
    keep = [int(w) <= int(p) for w, p in zip(ws, res)]
    new_a = _first(b, im, ik) if keep[0] else _changed(b, im, ik)
    new_b = _first(b, ik, inn) if keep[1] else _changed(b, ik, inn)
    new_c = _changed(b, im, inn)
    last_c = np.ones(len(b), bool)
    last_c[:-1] = new_c[1:]
    final = ik == tk - 1
    if keep[2]:                 # partial sums stay in the accumulator: no read, one final write
        read_c = np.zeros(len(b), bool)
        last_c &= final
    else:
        read_c = new_c & (ik > 0)
    return TileSchedule(
        m=m, k=k, n=n, compute=compute,
        a_bytes=np.where(new_a, m * k * e, 0), b_bytes=np.where(new_b, k * n * e, 0),
        c_read_bytes=np.where(read_c, m * n * ACC_BYTES, 0),
        c_write_bytes=np.where(last_c, m * n * np.where(final, op.out_bytes, ACC_BYTES), 0),
        load_transfers=new_a.astype(np.int64) + new_b + read_c,
        write_transfers=last_c.astype(np.int64))


# ---- the (max, +) recurrence ------------------------------------------------------------------
def _mp_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(max, +) product of stacks of 3x3 matrices (``[..., 3, 3]``)."""
    return np.max(a[..., :, :, None] + b[..., None, :, :], axis=-2)


def _mp_matvec(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(max, +) product of stacks of 3x3 matrices and 3-vectors."""
    return np.max(a + x[..., None, :], axis=-1)


def maxplus_scan(mats: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """All states ``x[i] = mats[i] (x) x[i-1]`` (``x[-1] = x0``) of a (max, +) linear recurrence.

    ``mats``: ``[T, 3, 3]``; returns ``[T, 3]``. Chunks of ``B ~ sqrt(T)`` steps: the chunk
    transfer matrices (B vectorized steps over all chunks), then each chunk's entry state (one
    small product per chunk), then the states inside the chunks (B vectorized steps again)."""
    T = len(mats)
    B = max(1, int(np.ceil(np.sqrt(T))))
    nc = -(-T // B)
    eye = np.full((3, 3), NEG)
    np.fill_diagonal(eye, 0.0)
    pad = np.concatenate([mats, np.broadcast_to(eye, (nc * B - T, 3, 3))])
    chunks = pad.reshape(nc, B, 3, 3)
    prod = np.broadcast_to(eye, (nc, 3, 3)).copy()
    for j in range(B):
        prod = _mp_matmul(chunks[:, j], prod)
    entry = np.empty((nc, 3))
    x = np.asarray(x0, np.float64)
    for c in range(nc):
        entry[c] = x
        x = _mp_matvec(prod[c], x)
    out = np.empty((nc, B, 3))
    x = entry
    for j in range(B):
        x = _mp_matvec(chunks[:, j], x)
        out[:, j] = x
    return out.reshape(nc * B, 3)[:T]


def pipeline_ends(ld: np.ndarray, c: np.ndarray, wb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(u, v)``: command ends and write-back ends of the double-buffered pipeline (module
    docstring), for per-tile load, compute and write-back durations (cycles)."""
    ld, c, wb = (np.asarray(x, np.float64) for x in (ld, c, wb))
    T = len(c)
    ld_next = np.append(ld[1:], 0.0)
    mats = np.empty((T, 3, 3))
    mats[:, 0] = np.stack([c, np.full(T, NEG), ld + c], axis=1)
    mats[:, 1] = np.stack([c + wb, ld_next + wb, ld + c + wb], axis=1)
    mats[:, 2] = (NEG, 0.0, NEG)
    states = maxplus_scan(mats, np.array([0.0, ld[0], 0.0]))
    return states[:, 0], states[:, 1]


def simulate_tiled(op: GemmOp, arch: ArchSpec, mapping: Mapping) -> TiledResult:
    """Run the tiled cycle model of ``op`` under ``mapping`` on ``arch`` (module docstring)."""
    s = tile_schedule(op, arch, mapping)
    bw, lat = dram_rates(arch)
    ld, wb, c = s.load_cycles(bw, lat), s.write_cycles(bw, lat), s.compute.astype(np.float64)
    if mapping.double_buffer:
        u, v = pipeline_ends(ld, c, wb)
        cycles = float(v[-1])
    else:
        u = np.cumsum(ld + c + wb) - wb
        cycles = float(u[-1] + wb[-1])
    return TiledResult(
        cycles=cycles, core_cycles=int(s.compute.sum()), dma_cycles=float(ld.sum() + wb.sum()),
        n_tiles=len(s), transfers=int(s.load_transfers.sum() + s.write_transfers.sum()),
        dram_a_bytes=int(s.a_bytes.sum()), dram_b_bytes=int(s.b_bytes.sum()),
        dram_c_read_bytes=int(s.c_read_bytes.sum()), dram_c_write_bytes=int(s.c_write_bytes.sum()),
        compute_end=u)
