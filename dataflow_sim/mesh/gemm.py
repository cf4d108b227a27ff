"""Distributed GEMM on a mesh: MeshGEMM (WaferLLM), Cannon and SUMMA.

``C[M, N] = A[M, K] @ B[K, N]`` on a square logical ``P x P`` grid; every core owns one
``Mt x Kt`` block of A, one ``Kt x Nt`` block of B and one ``Mt x Nt`` block of C
(``Mt = ceil(M/P)`` etc.; edge blocks are zero-padded).

* **Cannon**: align (row u of A rotates left by u, column v of B rotates up by v), then P steps
  of ``C += A_blk @ B_blk`` with A rotating left and B up by one core between steps. On a mesh
  (no torus) the rotation's wrap-around message crosses the whole row: ``P - 1`` hops per step.
* **MeshGEMM** (WaferLLM, OSDI 2025): Cannon's schedule on an *interleaved ring*. Logical
  position ``u`` sits at physical index ``ring[u]`` with ``ring = [0, 2, 4, ..., 5, 3, 1]``
  (evens ascending, then odds descending), so ring neighbours — including the wrap-around — are
  at most 2 hops apart, and each core is source, destination or transit of at most 3 flows per
  axis (3 route ids per axis, as WaferLLM's CSL layout configures). Alignment rotates each row
  the shorter way round, one ring step at a time (at most ``P // 2`` steps).
* **SUMMA**: P steps; step k multicasts column-block k of A along each row and row-block k of B
  along each column (hardware multicast: one flow per direction, 1 routing stage), then
  ``C += A_k @ B_k``. Broadcasts are double-buffered: broadcast k+1 overlaps compute k.
* **SUMMA as WaferLLM's baseline** (``summa_relay``; He et al., "WaferLLM", OSDI 2025,
  sec. 5.1 (2), Figure 6 (2), sec. 7.2 "pipeline broadcast"): the same steps, but the broadcast
  is relayed by every core along the line (a route per possible root does not fit the router,
  so each intermediate core's processor forwards the block as it streams in): a broadcast over
  d hops costs ``(alpha + beta) * d + W``, the per-step ``O[(alpha + beta) N]`` of sec. 5.1.
  Cannon as WaferLLM describes it (sec. 5.1 (3), "head-to-tail transmission": the wrap-around
  passes through the intermediate routers, ``alpha`` per hop and one ``beta``) is ``cannon``.

All double-buffer: the shift/broadcast of step k+1 overlaps the local GEMM of step k.

**SRAM sets the panel width.** A block moves as ``q = ceil(Kt / kb)`` K-panels (Mt x kb of A,
kb x Nt of B), each one message overlapped with the previous panel's multiply. ``kb`` is the
widest panel whose receive buffers fit in ``core_sram_kib`` beside the core's own A, B and C
blocks (:func:`~tilewright.compiler.mesh_schedule.gemm_panel`; ``kb = Kt`` whenever the whole
block fits, which is the block schedule the RTL mesh runs). Where SRAM limits the panel, each
extra panel costs one more message latency, so more SRAM means wider panels and less time; if
even a 1-wide panel does not fit the run is refused.
The same step list drives the timing model (:func:`mesh_gemm`) and the functional execution
(:func:`execute_gemm`), which moves every core's blocks exactly as the flows say. The step lists
and their messages are pure schedules in :mod:`tilewright.compiler.mesh_schedule` (the compiler
emits them as mesh Programs); this module times and executes them.
"""

from __future__ import annotations

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_schedule import (GEMM_ALGOS, GEMM_RECV_PANELS, Move, Step,
                                               gemm_memory_bytes, gemm_panel, gemm_phase_specs,
                                               interleaved_ring)
from tilewright.compiler.mesh_schedule import gemm_steps as _gemm_steps
from tilewright.dataflow_sim.mesh.grid import Grid, as_mapping_error, defect_grid, reroute
from tilewright.dataflow_sim.mesh.model import MeshMappingError, MeshReport, Phase, simulate
from tilewright.dataflow_sim.mesh.program_run import to_phases

__all__ = ["GEMM_ALGOS", "interleaved_ring", "gemm_steps", "execute_gemm", "gemm_phases",
           "mesh_gemm", "Move", "Step"]


def gemm_steps(algo: str, p: int, *, align: bool = True) -> list[Step]:
    """The schedule of ``algo`` on a P x P grid, in logical (algorithm) coordinates
    (:func:`tilewright.compiler.mesh_schedule.gemm_steps`)."""
    with as_mapping_error():
        return _gemm_steps(algo, p, align=align)


def _blocks(x: np.ndarray, p: int, bm: int, bn: int) -> np.ndarray:
    pad = np.zeros((p * bm, p * bn), dtype=x.dtype)
    pad[:x.shape[0], :x.shape[1]] = x
    return pad.reshape(p, bm, p, bn).transpose(0, 2, 1, 3).copy()


def execute_gemm(a: np.ndarray, b: np.ndarray, p: int, algo: str = "mesh", *,
                 align: bool = True) -> np.ndarray:
    """Run the schedule's data movement with numpy: each core's blocks move exactly as the
    steps say, each core multiplies what it holds. Returns the assembled C (exact for ints)."""
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: A is {a.shape}, B is {b.shape}")
    mt, kt, nt = -(-m // p), -(-k // p), -(-n // p)
    acc = np.result_type(a.dtype, b.dtype, np.int64) if np.issubdtype(
        np.result_type(a, b), np.integer) else np.float64
    buf = {"A": _blocks(a.astype(acc), p, mt, kt), "B": _blocks(b.astype(acc), p, kt, nt)}
    if not align and algo not in ("summa", "summa_relay"):  # the host loads A, B pre-skewed
        for mv in gemm_steps(algo, p, align=True)[0].moves:
            buf[mv.buf] = _apply(buf[mv.buf], mv, p)
    c = np.zeros((p, p, mt, nt), dtype=acc)
    for st in gemm_steps(algo, p, align=align):
        for rep in range(st.repeat):
            if st.operands is not None:
                x, y = buf[st.operands[0]], buf[st.operands[1]]
                c += np.einsum("uvik,uvkj->uvij", x, y)
            new = {}
            for mv in st.moves:
                src = buf[mv.buf]
                moved = src[mv.src_u, mv.src_v]
                if mv.count is not None:
                    keep = (mv.count > rep)[:, :, None, None]
                    moved = np.where(keep, moved, buf.get(mv.into or mv.buf, src))
                new[mv.into or mv.buf] = moved
            buf.update(new)
    return c.transpose(0, 2, 1, 3).reshape(p * mt, p * nt)[:m, :n]


def _apply(x: np.ndarray, mv: Move, p: int) -> np.ndarray:
    """Apply an alignment move fully (count times) — the host's pre-skew."""
    out = x
    cnt = mv.count if mv.count is not None else np.ones((p, p), np.int64)
    for rep in range(int(cnt.max()) if cnt.size else 0):
        out = np.where((cnt > rep)[:, :, None, None], out[mv.src_u, mv.src_v], out)
    return out


def gemm_phases(algo: str, grid: Grid, mt: int, kt: int, nt: int, *, elem_bytes: int,
                link_bytes: int, align: bool = True, kb: int | None = None) -> list[Phase]:
    """Timing phases of ``algo`` on ``grid`` (square) for blocks Mt x Kt x Nt moved in K
    panels ``kb`` wide (default ``Kt``)."""
    with as_mapping_error():
        specs = gemm_phase_specs(algo, grid, mt, kt, nt, elem_bytes=elem_bytes, align=align,
                                 kb=kb)
    return to_phases(specs, link_bytes)


def mesh_gemm(arch: ArchSpec, m: int, k: int, n: int, *, algo: str = "mesh",
              elem_bytes: int = 2, acc_bytes: int | None = None, p: int | None = None,
              align: bool = True, defects: str = "skip") -> MeshReport:
    """Predict ``[m, k] @ [k, n]`` on ``arch.mesh`` with ``algo`` (mesh | cannon | summa |
    summa_relay).

    ``p``: side of the square logical grid (default: the largest the healthy mesh holds);
    ``elem_bytes``: bytes per A/B element (WSE-2 and WaferLLM: fp16 = 2); ``acc_bytes``: per C
    element (default ``elem_bytes``); ``align=False``: the host loads Cannon/MeshGEMM operands
    pre-skewed (no alignment phase); ``defects``: ``skip`` drops every row and column with a
    defect, ``route`` drops only dead cores' columns and reroutes messages around defects
    (:mod:`.grid`). The K-panel width comes from ``core_sram_kib`` (module doc; reported as
    ``notes["k_panel"]``). Raises :class:`MeshMappingError` if a core's blocks exceed its SRAM
    even with 1-wide panels or a core needs more route ids than ``max_routes_per_core``.
    """
    if algo not in GEMM_ALGOS:
        raise MeshMappingError(f"GEMM algo {algo!r}: must be one of {', '.join(GEMM_ALGOS)}")
    if min(m, k, n) < 1:
        raise MeshMappingError(f"GEMM shape m={m} k={k} n={n}: every dimension must be >= 1")
    if arch.mesh is None:
        raise MeshMappingError(f"{arch.name}: the ArchSpec has no mesh section")
    mesh = arch.mesh
    grid = defect_grid(mesh, defects, square=True, pr=p, pc=p)
    p = grid.pr
    acc_bytes = elem_bytes if acc_bytes is None else acc_bytes
    mt, kt, nt = -(-m // p), -(-k // p), -(-n // p)
    with as_mapping_error():
        kb = gemm_panel(algo, mt, kt, nt, sram_bytes=mesh.core_sram_kib * 1024,
                        elem_bytes=elem_bytes, acc_bytes=acc_bytes,
                        what=f" m={m} k={k} n={n} on a {p}x{p} grid")
        specs = gemm_phase_specs(algo, grid, mt, kt, nt, elem_bytes=elem_bytes, align=align,
                                 kb=kb)
    per_core = gemm_memory_bytes(algo, mt, kt, nt, kb, elem_bytes=elem_bytes,
                                 acc_bytes=acc_bytes)
    nrecv = GEMM_RECV_PANELS[algo]
    breakdown = (f"A block {mt}x{kt} + B block {kt}x{nt} + {nrecv} x receive panels {mt}x{kb} + "
                 f"{kb}x{nt} at {elem_bytes} B, C block {mt}x{nt} at {acc_bytes} B")
    specs, extra = reroute(specs, mesh, defects)
    phases = to_phases(specs, mesh.link_bytes_per_cycle)
    mask = grid.mask()
    notes = {"grid": f"{p}x{p}", "block": [mt, kt, nt], "k_panel": kb,
             "k_panels_per_block": -(-kt // kb), "memory_breakdown": breakdown}
    if defects == "route":
        notes["detour_extra_hops"] = extra
    return simulate(arch, phases, op="gemm", algo=algo, shape={"m": m, "k": k, "n": n},
                    cores=mask, memory_bytes=np.where(mask, per_core, 0), useful_macs=m * k * n,
                    notes=notes)
