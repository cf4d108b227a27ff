"""MoE dispatch and combine on a 2-D mesh that keep every core within ``max_routes_per_core``.

A core needs one route id per message whose XY path touches it in a phase
(:func:`~tilewright.compiler.mesh_schedule.route_counts`). Sending every token's features
straight from the cores holding them to every expert region makes the messages of one row
cross each other: DeepSeek-V3 decode (257 regions of 125 x 23 cores on WSE-2) needed 64
route ids per core against WSE-2's 24. The decode schedules here are hierarchical instead — region
heads and line chains — so a core's route count depends on the tile shape, not on the number
of experts:

**dispatch** (x column-split in blocks of ``ceil(d/pc)`` features on every grid row; experts
on a ``gy x gx`` tiling of ``qr x qc`` tiles, :func:`rect_tiling`): on every row of a band
that holds an active expert, (1) a *gather chain* from the first to the last column holding the
K segment that region row needs (each core on the way appends its block: ``stages`` = cores
passed), then (2) one row multicast west and one east from the chain's end that every active
region's middle column (the region head) of that band receives. Route ids per core: 1, then 2.

**combine** (region e holds ``y_e`` split over its ``qc`` columns in segments of ``ceil(d/qc)``
features, on every region row after its GEMV's column broadcast): (1) per band and region
column v, a chain-reduction along region row ``v mod qr`` from the first active region's
column v through the others' to tile column ``gx - 1`` (each active region adds its gated
partial); (2) per v, chain-reductions up and down the physical column of (1)'s end into row
``h_v = floor(v * pr / qc)``; (3) a row multicast of the summed segment along row ``h_v``
over the column blocks it overlaps; (4) every such column multicasts its block up and down:
y is on every core, column-split, as the dense layer expects. Route ids per core:
``ceil(qc / qr)`` in (1), 2 in (2), ``ceil(qc / pr)`` (rows shared by several ``h_v``) in
(3), at most 2 per segment overlapping a column block in (4).

A chain message is listed once with its whole length in bytes (it grows as cores append their
blocks, so the first links' loads are upper bounds); its time is
``alpha * hops + beta * stages + W``, the mesh model's streaming-chain rule.
"""

from __future__ import annotations

import numpy as np

from tilewright.arch import MeshSpec
from tilewright.compiler.mesh_schedule import (FlowBatch, Grid, MeshScheduleError, PhaseSpec,
                                               route_counts)

__all__ = ["rect_tiling", "segments", "decode_dispatch_specs", "decode_combine_specs",
           "phase_routes", "check_routes", "relay_stage_bytes", "relay_message_count",
           "relay_specs"]


def rect_tiling(grid: Grid, n: int) -> tuple[int, int, int, int]:
    """``(gy, gx, qr, qc)``: a ``gy x gx`` tiling of ``grid`` (``gy * gx >= n``) into tiles of
    ``qr x qc`` cores holding the most cores (ties: the squarer tile)."""
    best = None
    for gy in range(1, n + 1):
        gx = -(-n // gy)
        qr, qc = grid.pr // gy, grid.pc // gx
        if qr < 1 or qc < 1:
            continue
        key = (qr * qc, -abs(qr - qc))
        if best is None or key > best[0]:
            best = (key, gy, gx, qr, qc)
    if best is None:
        raise MeshScheduleError(f"{n} expert regions do not fit the {grid.pr}x{grid.pc} grid")
    return best[1:]


def segments(total: int, n: int) -> list[tuple[int, int]]:
    """``n`` consecutive index ranges of ``ceil(total/n)`` covering 0..total-1 (last short,
    trailing ones empty)."""
    w = -(-total // n)
    return [(min(i * w, total), min((i + 1) * w, total)) for i in range(n)]


def _blocks_of(lo: int, hi: int, w: int) -> tuple[int, int]:
    """First and last block of width ``w`` overlapping features ``lo..hi-1``."""
    return lo // w, (hi - 1) // w


def decode_dispatch_specs(grid: Grid, tiling: tuple[int, int, int, int], active: list[int],
                          d: int, tok_bytes: int) -> list[PhaseSpec]:
    """Gather chains + row multicasts to the region heads (module doc). ``active``: region
    indices (row-major tiles) with tokens; ``tok_bytes``: bytes per feature for the whole
    batch (tokens x element bytes)."""
    _, gx, qr, qc = tiling
    dt = -(-d // grid.pc)
    chain, mcast = [], []
    bands: dict[int, list[int]] = {}
    for e in active:
        bands.setdefault(e // gx, []).append(e % gx)
    for a, tcols in sorted(bands.items()):
        heads = grid.cols[np.array(tcols) * qc + qc // 2]
        for u, (lo, hi) in enumerate(segments(d, qr)):
            if hi <= lo:
                continue
            j0, j1 = _blocks_of(lo, hi, dt)
            r = grid.rows[a * qr + u]
            nb = (hi - lo) * tok_bytes
            chain.append((r, grid.cols[j0], r, grid.cols[j1], nb, j1 - j0))
            end = grid.cols[j1]
            if heads.max() > end:
                mcast.append((r, end, r, heads.max(), nb, 1))
            if heads.min() < end:
                mcast.append((r, end, r, heads.min(), nb, 1))
    return [PhaseSpec("gather x segment along the row (chain)", _batch(chain)),
            PhaseSpec("multicast segment to the region heads", _batch(mcast))]


def decode_combine_specs(grid: Grid, tiling: tuple[int, int, int, int], active: list[int],
                         d: int, tok_bytes: int) -> list[PhaseSpec]:
    """Band chain-reductions, column chain-reductions, row and column multicasts (module
    doc); ``tok_bytes`` as in :func:`decode_dispatch_specs`."""
    _, gx, qr, qc = tiling
    pr = grid.pr
    dt = -(-d // grid.pc)
    bands: dict[int, list[int]] = {}
    for e in active:
        bands.setdefault(e // gx, []).append(e % gx)
    end_tile = gx - 1
    band_chain, col_chain, row_mc, col_mc = [], [], [], []
    for v, (lo, hi) in enumerate(segments(d, qc)):
        if hi <= lo:
            continue
        nb = (hi - lo) * tok_bytes
        c_end = grid.cols[end_tile * qc + v]
        part_rows = []
        for a, tcols in sorted(bands.items()):
            tcols = sorted(tcols)
            r = grid.rows[a * qr + v % qr]
            part_rows.append(a * qr + v % qr)
            adders = len(tcols) - 1 + (tcols[-1] != end_tile)
            band_chain.append((r, grid.cols[tcols[0] * qc + v], r, c_end, nb, max(adders, 1)))
        h = v * pr // qc
        rows = np.array(part_rows)
        north, south = rows[rows < h], rows[rows > h]
        if north.size:     # adders: partial rows after the first, then the receiver
            col_chain.append((grid.rows[north.min()], c_end, grid.rows[h], c_end, nb,
                              north.size))
        if south.size:
            col_chain.append((grid.rows[south.max()], c_end, grid.rows[h], c_end, nb,
                              south.size))
        j0, j1 = _blocks_of(lo, hi, dt)
        hr = grid.rows[h]
        if grid.cols[j0] < c_end:
            row_mc.append((hr, c_end, hr, grid.cols[j0], nb, 1))
        if grid.cols[j1] > c_end:
            row_mc.append((hr, c_end, hr, grid.cols[j1], nb, 1))
        for j in range(j0, j1 + 1):
            ov = (min(hi, (j + 1) * dt) - max(lo, j * dt)) * tok_bytes
            if h > 0:
                col_mc.append((hr, grid.cols[j], grid.rows[0], grid.cols[j], ov, 1))
            if h < pr - 1:
                col_mc.append((hr, grid.cols[j], grid.rows[-1], grid.cols[j], ov, 1))
    return [PhaseSpec("chain-reduce along band rows", _batch(band_chain)),
            PhaseSpec("chain-reduce along columns", _batch(col_chain)),
            PhaseSpec("multicast sums along rows", _batch(row_mc)),
            PhaseSpec("multicast blocks along columns", _batch(col_mc))]


def _batch(rows: list[tuple]) -> FlowBatch:
    if not rows:
        return FlowBatch.concat([])
    a = np.array(rows, np.int64)
    return FlowBatch.make(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5])


def phase_routes(specs: list[PhaseSpec], mesh: MeshSpec) -> np.ndarray:
    """Per core: the most route ids any one of ``specs`` needs (route tables are rewritten
    between phases)."""
    out = np.zeros((mesh.rows, mesh.cols), np.int32)
    for s in specs:
        if s.flows is not None and len(s.flows):
            np.maximum(out, route_counts(s.flows, mesh.rows, mesh.cols), out=out)
    return out


def check_routes(specs: list[PhaseSpec], mesh: MeshSpec, what: str) -> int:
    """The most route ids a core needs in ``specs``; :class:`MeshScheduleError` naming the
    limit it needs when that exceeds ``mesh.max_routes_per_core``."""
    routes = phase_routes(specs, mesh)
    need = int(routes.max()) if routes.size else 0
    if need > mesh.max_routes_per_core:
        r, c = np.unravel_index(int(np.argmax(routes)), routes.shape)
        raise MeshScheduleError(
            f"{what}: core ({r}, {c}) needs {need} route ids in one phase; it fits only with "
            f"max_routes_per_core >= {need} (the mesh section sets "
            f"{mesh.max_routes_per_core})")
    return need


# ---- prefill: two-stage relay all-to-all between square tiles ------------------------------

def relay_stage_bytes(g: int, moves: dict[tuple[int, int], int], first: str
                      ) -> list[tuple[str, np.ndarray]]:
    """The two stages of a tile-to-tile all-to-all on a ``g x g`` tiling: ``[(axis, B)]`` with
    ``B[t, u]`` = bytes every core of tile ``t`` (row-major) sends to tile position ``u`` along
    ``axis`` in that stage (all chunks bound the same way, aggregated). ``moves[(s, e)]``:
    bytes every core of tile s sends to the same-position core of tile e; ``first``: ``row``
    (along rows to the destination tile column, then along columns) or ``col``."""
    m = np.zeros((g, g, g, g), np.int64)                 # [a, b, a2, b2]
    for (s, e), nb in moves.items():
        if s != e:
            m[s // g, s % g, e // g, e % g] += nb
    if first == "row":
        st1 = m.sum(axis=2)                              # at (a, b) for column b2
        st2 = m.sum(axis=1)                              # at (a, b2) for row a2: [a, b2, a2]
        return [("row", st1.reshape(g * g, g)), ("col", st2.reshape(g * g, g))]
    st1 = m.sum(axis=3)                                  # at (a, b) for row a2
    st2 = m.sum(axis=0).transpose(1, 0, 2)               # at (a2, b) for column b2: [a2, b, b2]
    return [("col", st1.reshape(g * g, g)), ("row", st2.reshape(g * g, g))]


def relay_message_count(g: int, q: int, stages: list[tuple[str, np.ndarray]]) -> int:
    """First-hop messages :func:`relay_specs` lists for ``stages``: ``q*q`` per (tile,
    direction, offset) with bytes to send."""
    n = 0
    for axis, nb in stages:
        tiles = np.arange(g * g)
        n += np.count_nonzero(nb) - np.count_nonzero(nb[tiles, _position(axis, tiles, g)])
    return int(n) * q * q


def _position(axis: str, tiles: np.ndarray, g: int) -> np.ndarray:
    """Position of each tile along ``axis`` (its tile column for rows, tile row for columns);
    bytes for its own position wait for the other stage."""
    return tiles % g if axis == "row" else tiles // g


def relay_specs(sub: Grid, g: int, q: int, stages: list[tuple[str, np.ndarray]],
                name: str, split: bool = False) -> list[PhaseSpec]:
    """Store-and-forward relay of :func:`relay_stage_bytes` on the ``g x g`` tiles of side
    ``q`` covering ``sub``. Per stage and tile offset ``o`` = 1..g-1: one phase in which every
    core of a tile with bytes for the tile ``o`` ahead sends them one hop forward and every
    core with bytes for the tile ``o`` behind sends them one hop back (opposite directed links:
    no contention), repeated ``o*q`` times (each core forwards one chunk per hop: uncontended,
    ``o * q * (alpha + beta + W)``). A core needs at most 4 route ids (2 out, 2 in);
    ``split``: forward and back in phases of their own, 2 route ids (1 out, 1 in)."""
    idx = np.arange(q)
    specs = []
    for axis, nb in stages:
        tiles = np.arange(g * g)
        pos = _position(axis, tiles, g)
        for off in range(1, g):
            parts = []
            for sign in (1, -1):
                tgt = pos + sign * off
                ok = (tgt >= 0) & (tgt < g)
                t = tiles[ok]
                b = nb[t, tgt[ok]]
                t, b = t[b > 0], b[b > 0]
                if t.size == 0:
                    continue
                ii = (t // g * q)[:, None, None] + idx[None, :, None]
                jj = (t % g * q)[:, None, None] + idx[None, None, :]
                ii, jj = np.broadcast_arrays(ii, jj)
                ti, tj = (ii, jj + sign) if axis == "row" else (ii + sign, jj)
                parts.append((f"{sign * off:+d}", FlowBatch.make(
                    sub.rows[ii], sub.cols[jj], sub.rows[ti], sub.cols[tj], b[:, None, None])))
            groups = [[p] for p in parts] if split else [parts] if parts else []
            for grp in groups:
                label = "/".join(lbl for lbl, _ in grp)
                specs.append(PhaseSpec(f"{name} {axis} stage: tiles {label} away",
                                       FlowBatch.concat([f for _, f in grp]), repeat=off * q))
    return specs
