"""Distributed GEMV on a mesh: MeshGEMV (WaferLLM) and a ring all-reduce baseline.

``y[1, N] = x[1, K] @ W[K, N]`` on a logical ``pr x pc`` grid (the whole healthy mesh,
rectangular): K is split along rows, N along columns; core (i, j) holds the ``Kt x Nt`` block
W[i, j] (``Kt = ceil(K/pr)``, ``Nt = ceil(N/pc)``).

1. *Vector broadcast* (``broadcast_x=True``): segment i of x starts on the middle core of row i
   and is multicast east and west along the row. WaferLLM's MeshGEMV kernel measures with x
   already replicated along rows (its host loads it so); ``broadcast_x=False`` reproduces that.
2. *Local GEMV*: ``Kt * Nt`` MACs per core gives a partial y block of Nt values.
3. *All-reduce along each column* of the Nt partials:

   * ``mesh`` — the K-tree all-reduce (WaferLLM's two-phase tree for ``levels=2``): the cores of
     a column are cut into groups of ``g ~ pr ** (1/levels)`` consecutive cores; in each group
     the two halves stream-reduce towards the group's middle core (a chain: every core adds its
     partial and forwards, ``stages`` = cores passed), then the group roots do the same among
     themselves at the next level; the last root multicasts the sum up and down the column.
     Latency ~ ``alpha * 1.5 pr + beta * (levels * g / 2)``; 2 flows per core per level.
   * ``allreduce`` — the GPU-style ring all-reduce (reduce-scatter then all-gather, ``2(pr-1)``
     steps of one ``ceil(Nt/pr)`` chunk each) on the interleaved ring, so every step is at most
     2 hops: ``~ 2 pr (2 alpha + beta + chunk flits)``.

Afterwards every core of column j holds y block j.

**SRAM sets the reduce message size.** Beside its W block, x segment and partial y, a core
keeps one receive buffer for the partial sums coming in. Its size — the partial sums per
reduce message — is the most that fit in ``core_sram_kib``
(:func:`~tilewright.compiler.mesh_schedule.gemv_chunk`; all Nt, or the ring's chunk, when they
fit). Where SRAM limits it, the reduce is sent as more, smaller messages, each paying its
latency; if even a 1-value buffer does not fit the run is refused. The same plan drives the timing
(:func:`mesh_gemv`) and the functional execution (:func:`execute_gemv`); the plan and its
messages are pure schedules in :mod:`tilewright.compiler.mesh_schedule`.
"""

from __future__ import annotations

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_schedule import (GEMV_ALGOS, allreduce_phase_specs, gemv_chunk,
                                               gemv_memory_bytes, gemv_phase_specs,
                                               interleaved_ring)
from tilewright.compiler.mesh_schedule import ktree_plan as _ktree_plan
from tilewright.dataflow_sim.mesh.grid import Grid, as_mapping_error, defect_grid, reroute
from tilewright.dataflow_sim.mesh.model import MeshMappingError, MeshReport, Phase, simulate
from tilewright.dataflow_sim.mesh.program_run import to_phases

__all__ = ["GEMV_ALGOS", "ktree_plan", "execute_gemv", "gemv_phases", "mesh_gemv",
           "allreduce_phases"]


def ktree_plan(n: int, levels: int = 2, group: int | None = None) -> list[list[np.ndarray]]:
    """Per level, the groups of a K-tree reduce over n members
    (:func:`tilewright.compiler.mesh_schedule.ktree_plan`)."""
    with as_mapping_error():
        return _ktree_plan(n, levels, group)


def allreduce_phases(grid: Grid, nt: int, acc_bytes: int, link_bytes: int) -> list[Phase]:
    """Ring all-reduce along every column on the interleaved ring (<= 2 hops per step)."""
    return to_phases(allreduce_phase_specs(grid, nt, acc_bytes), link_bytes)


def gemv_phases(algo: str, grid: Grid, kt: int, nt: int, *, elem_bytes: int, acc_bytes: int,
                link_bytes: int, levels: int = 2, group: int | None = None,
                broadcast_x: bool = True) -> list[Phase]:
    """Timing phases of ``algo`` on ``grid`` for W blocks Kt x Nt."""
    with as_mapping_error():
        specs = gemv_phase_specs(algo, grid, kt, nt, elem_bytes=elem_bytes, acc_bytes=acc_bytes,
                                 levels=levels, group=group, broadcast_x=broadcast_x)
    return to_phases(specs, link_bytes)


def execute_gemv(x: np.ndarray, w: np.ndarray, pr: int, pc: int, algo: str = "mesh", *,
                 levels: int = 2, group: int | None = None) -> np.ndarray:
    """Run the data movement with numpy on a pr x pc grid; returns y as assembled from the
    cores of *every* row (shape (pr, N)): each row must hold the full result."""
    k, n = w.shape
    kt, nt = -(-k // pr), -(-n // pc)
    acc = np.int64 if np.issubdtype(np.result_type(x, w), np.integer) else np.float64
    xp = np.zeros(pr * kt, acc); xp[:k] = x.ravel()
    wp = np.zeros((pr * kt, pc * nt), acc); wp[:k, :n] = w
    wb = wp.reshape(pr, kt, pc, nt).transpose(0, 2, 1, 3)        # (pr, pc, kt, nt)
    # 1. broadcast x: row i's segment starts at the middle column, multicast along the row
    xs = np.zeros((pr, pc, kt), acc)
    xs[:, pc // 2] = xp.reshape(pr, kt)
    xs = np.repeat(xs[:, pc // 2][:, None], pc, 1)
    # 2. local GEMV
    part = np.einsum("ijk,ijkn->ijn", xs, wb)                     # (pr, pc, nt)
    # 3. all-reduce along each column
    if algo == "mesh":
        plan = ktree_plan(pr, levels, group)
        val = part.copy()
        root = 0
        for groups in plan:
            for gr in groups:
                root = gr[gr.size // 2]
                val[root] = val[gr].sum(axis=0)      # both chains end at the root
        y = np.repeat(val[root][None], pr, 0)          # broadcast up and down
    elif algo == "allreduce":
        y = _ring_allreduce(part)
    else:
        raise MeshMappingError(f"GEMV algo {algo!r}: must be one of {', '.join(GEMV_ALGOS)}")
    return y.reshape(pr, pc * nt)[:, :n]


def _ring_allreduce(part: np.ndarray) -> np.ndarray:
    """Reduce-scatter + all-gather along axis 0 on the interleaved ring, chunk by chunk."""
    pr, pc, nt = part.shape
    if pr == 1:
        return part
    ring = interleaved_ring(pr)
    chunk = -(-nt // pr)
    buf = np.zeros((pr, pc, pr * chunk), part.dtype)
    buf[:, :, :nt] = part[ring]                      # buf[q] = data of ring position q
    buf = buf.reshape(pr, pc, pr, chunk)
    q = np.arange(pr)
    for s in range(pr - 1):                          # q sends chunk (q - s) to q + 1, which adds
        c = (q - s) % pr
        sent = buf[q, :, c].copy()
        buf[(q + 1) % pr, :, c] += sent
    for s in range(pr - 1):                          # q sends full chunk (q + 1 - s) to q + 1
        c = (q + 1 - s) % pr
        sent = buf[q, :, c].copy()
        buf[(q + 1) % pr, :, c] = sent
    out = np.empty_like(buf)
    out[ring] = buf
    return out.reshape(pr, pc, pr * chunk)[:, :, :nt]


def mesh_gemv(arch: ArchSpec, k: int, n: int, *, algo: str = "mesh", elem_bytes: int = 2,
              acc_bytes: int | None = None, levels: int = 2, group: int | None = None,
              broadcast_x: bool = True, pr: int | None = None,
              pc: int | None = None, defects: str = "skip") -> MeshReport:
    """Predict ``[1, k] @ [k, n]`` on ``arch.mesh`` with ``algo`` (mesh | allreduce).

    Uses the whole healthy mesh (or a ``pr x pc`` grid). ``levels``/``group``: K-tree shape
    (WaferLLM: 2 levels, groups of ~sqrt(pr)); ``defects``: ``skip`` | ``route`` (see
    :func:`~tilewright.dataflow_sim.mesh.gemm.mesh_gemm`). Raises :class:`MeshMappingError`
    when a core's W block, x segment and partial sums exceed its SRAM even with a 1-value
    receive buffer, or route ids run out. The receive buffer (partial sums per reduce message,
    ``notes["reduce_chunk"]``) is sized from ``core_sram_kib`` (module doc).
    """
    if algo not in GEMV_ALGOS:
        raise MeshMappingError(f"GEMV algo {algo!r}: must be one of {', '.join(GEMV_ALGOS)}")
    if min(k, n) < 1:
        raise MeshMappingError(f"GEMV shape k={k} n={n}: every dimension must be >= 1")
    if arch.mesh is None:
        raise MeshMappingError(f"{arch.name}: the ArchSpec has no mesh section")
    mesh = arch.mesh
    grid = defect_grid(mesh, defects, pr=pr, pc=pc)
    acc_bytes = elem_bytes if acc_bytes is None else acc_bytes
    kt, nt = -(-k // grid.pr), -(-n // grid.pc)
    limit = nt if algo == "mesh" else -(-nt // grid.pr)      # K-tree: Nt; ring: one chunk
    with as_mapping_error():
        chunk = gemv_chunk(kt, nt, sram_bytes=mesh.core_sram_kib * 1024,
                           elem_bytes=elem_bytes, acc_bytes=acc_bytes, limit=limit,
                           what=f" k={k} n={n} on a {grid.pr}x{grid.pc} grid")
        specs = gemv_phase_specs(algo, grid, kt, nt, elem_bytes=elem_bytes, acc_bytes=acc_bytes,
                                 levels=levels, group=group, broadcast_x=broadcast_x,
                                 chunk=chunk)
    per_core = gemv_memory_bytes(kt, nt, chunk, elem_bytes=elem_bytes, acc_bytes=acc_bytes)
    breakdown = (f"W block {kt}x{nt} + x segment {kt} at {elem_bytes} B, partial y {nt} and "
                 f"receive buffer {chunk} at {acc_bytes} B")
    specs, extra = reroute(specs, mesh, defects)
    phases = to_phases(specs, mesh.link_bytes_per_cycle)
    mask = grid.mask()
    notes = {"grid": f"{grid.pr}x{grid.pc}", "block": [kt, nt], "reduce_chunk": chunk,
             "memory_breakdown": breakdown}
    if defects == "route":
        notes["detour_extra_hops"] = extra
    if algo == "mesh":
        plan = ktree_plan(grid.pr, levels, group)
        notes["ktree_groups"] = [len(g) for g in plan]
    return simulate(arch, phases, op="gemv", algo=algo, shape={"m": 1, "k": k, "n": n},
                    cores=mask, memory_bytes=np.where(mask, per_core, 0), useful_macs=k * n,
                    notes=notes)
