"""Hardware defect repair with spare rows/columns: the intact logical grid a wafer presents.

A wafer-scale fabric is built larger than the grid its programs see, and the hardware hides
defects behind the redundancy. Cerebras (S. Lie, "Wafer-Scale Deep Learning", Hot Chips 31, 2019,
the redundancy slide; summarised in WikiChip Fuse, "A Look at Cerebras Wafer-Scale Engine", 2019)
adds ~1-1.5 % spare cores and redundant fabric links: a dead core is switched out and the cores
after it in its row move one position over towards a spare at the row's end, a displacement the
redundant (diagonal) links absorb, so software sees an intact 2-D mesh. Cerebras' blog "100x
Defect Tolerance: How Cerebras Solved the Yield Problem" (2025) gives the resulting scale for
WSE-3: 900,000 active cores of 970,000 physical.

Model (``MeshSpec.spare_rows`` / ``spare_cols``; :attr:`MeshSpec.repairs_defects`):

* Dead cores are ``defective_cores`` (listed, plus those drawn at ``defect_rate``); a dead link
  switches out the core on its far side (east end of a horizontal link, south end of a vertical
  one), so no logical link ever crosses it.
* **Column sparing (row shift).** The ``spare_cols`` spare cores of a row are spread evenly
  through it: logical column ``j`` of a ``W``-wide grid is at home ``(j * cols) // W``. Row ``r``
  puts its logical columns on healthy cores in order, each on the first healthy core at or after
  its home (and after its left neighbour's), pulled left only as far as the row's remaining
  healthy cores require. So a dead core displaces the cores after it by one position until the
  next spare absorbs it.
* **Row sparing.** The logical grid has ``L_r = rows - spare_rows`` rows: the ``L_r`` physical
  rows with the most healthy cores ``h_r`` (ties: the lower row), in physical order.
* **Width.** ``W = min(cols - spare_cols, min over the kept rows of h_r)``: the full logical width
  while every kept row has at most ``spare_cols`` dead cores; beyond that the logical grid narrows
  (a shortfall, reported) instead of failing.
* **Extra hop latency.** With ``D[i, j]`` the displacement of logical core ``(i, j)`` from its
  home, the logical hop ``j -> j+1`` costs ``max(0, D[i, j+1] - D[i, j])`` extra hops (the dead
  cores it passes), and the hop from logical row ``i`` to ``i+1`` costs ``max(0, |D[i+1, j] -
  D[i, j]| - 1)`` extra hops (a displacement of one is the redundant diagonal link) plus one per
  physical row skipped by row sparing. Without defects nothing is displaced: no extra hops. Link
  loads stay on the logical links (one physical path each), so only the latency term changes.

Everything here is geometry; the mesh model (:mod:`tilewright.dataflow_sim.mesh.model`) adds
``alpha x`` :meth:`Repair.extra_hops` to every message's latency.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

# mesh_schedule imports this module at its top (healthy grids of a mesh with spares): the names
# are looked up on the module at call time, so the two may import each other
import tilewright.compiler.mesh_schedule as schedule
from tilewright.arch import MeshSpec

__all__ = ["Repair", "repair", "repaired_grid", "dead_map"]


@dataclass(frozen=True)
class Repair:
    """The logical grid of a repaired fabric and where each logical core sits physically."""

    phys_rows: np.ndarray    # (L_r,) physical row of logical row i
    phys_cols: np.ndarray    # (L_r, W) physical column of logical core (i, j)
    right: np.ndarray        # (L_r, W) extra hops from logical column 0 along row i to j
    down: np.ndarray         # (L_r, W) extra hops from logical row 0 down column j to row i
    target: tuple[int, int]  # (rows - spare_rows, cols - spare_cols)
    dead_cores: int          # cores switched out (dead, or behind a dead link)
    physical: tuple[int, int]

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, cols) of the logical grid."""
        return int(self.phys_cols.shape[0]), int(self.phys_cols.shape[1])

    @property
    def cores_lost(self) -> int:
        """Physical cores outside the logical grid (spares, dead cores, shortfall), count."""
        return self.physical[0] * self.physical[1] - self.shape[0] * self.shape[1]

    def extra_hops(self, sr, sc, dr, dc) -> np.ndarray:
        """Extra physical hops of XY messages given in logical coordinates (see module doc)."""
        sr, sc, dr, dc = (np.asarray(x, np.int64) for x in (sr, sc, dr, dc))
        return (np.abs(self.right[sr, dc] - self.right[sr, sc])
                + np.abs(self.down[dr, dc] - self.down[sr, dc]))

    def summary(self) -> dict:
        """Plain scalars (JSON-able) for reports."""
        return {"physical_mesh": f"{self.physical[0]}x{self.physical[1]}",
                "logical_grid": f"{self.shape[0]}x{self.shape[1]}",
                "logical_target": f"{self.target[0]}x{self.target[1]}",
                "dead_cores": self.dead_cores, "cores_lost": self.cores_lost,
                "repair_extra_hops_row_max": int(self.right[:, -1].max()),
                "repair_extra_hops_column_max": int(self.down[-1].max())}


def dead_map(mesh: MeshSpec) -> np.ndarray:
    """Bool (rows, cols): cores the repair switches out (dead, or at the far end of a dead
    link). Validates the defect list (:func:`~.mesh_schedule.bad_lines`)."""
    schedule.bad_lines(mesh)
    dead = np.zeros((mesh.rows, mesh.cols), bool)
    if mesh.defective_cores:
        rc = np.asarray(mesh.defective_cores, np.int64).reshape(-1, 2)
        dead[rc[:, 0], rc[:, 1]] = True
    for a, b in mesh.defective_links:
        r, c = max(tuple(a), tuple(b))            # east / south end of the link
        dead[r, c] = True
    return dead


@functools.lru_cache(maxsize=4)
def repair(mesh: MeshSpec) -> Repair:
    """The repaired logical grid of ``mesh`` (see module doc); needs spares."""
    if not mesh.repairs_defects:
        raise schedule.MeshScheduleError("mesh has no spare_rows/spare_cols: the hardware repairs nothing "
                                "(defects go to the skip/route policies)")
    dead = dead_map(mesh)
    healthy = (~dead).sum(axis=1)
    lr, lc = mesh.logical_shape
    keep = np.sort(np.argsort(-healthy, kind="stable")[:lr])
    width = int(min(lc, healthy[keep].min()))
    if width < 1:
        raise schedule.MeshScheduleError(f"no healthy cores left in some of the {lr} best rows of the "
                                f"{mesh.rows}x{mesh.cols} mesh: the spares cannot repair it")
    cols = _place_rows(dead[keep], width)
    disp = cols - (np.arange(width, dtype=np.int64) * mesh.cols) // width
    right = np.zeros_like(cols)
    np.cumsum(np.maximum(0, np.diff(disp, axis=1)), axis=1, out=right[:, 1:])
    step = np.maximum(0, np.abs(np.diff(disp, axis=0)) - 1) + (np.diff(keep) - 1)[:, None]
    down = np.zeros_like(cols)
    np.cumsum(step, axis=0, out=down[1:])
    return Repair(keep.astype(np.int64), cols, right, down, (lr, lc), int(dead.sum()),
                  (mesh.rows, mesh.cols))


def _place_rows(dead: np.ndarray, width: int) -> np.ndarray:
    """(rows, width) physical column of each logical column, every row at once (module doc):
    the first healthy core at or after ``max(left neighbour + 1, min(home, latest))``, where
    ``latest`` is the last position that still leaves room for the columns to its right."""
    nr, nc = dead.shape
    nxt = np.full((nr, nc + 1), nc, np.int64)          # first healthy column >= x
    idx = np.where(~dead, np.arange(nc), nc)
    nxt[:, :nc] = np.minimum.accumulate(idx[:, ::-1], axis=1)[:, ::-1]
    order = np.argsort(dead, axis=1, kind="stable")    # healthy columns first, in order
    first = (~dead).sum(axis=1) - width                # latest slot of logical 0 in that order
    latest = np.take_along_axis(order, first[:, None] + np.arange(width), axis=1)
    home = (np.arange(width, dtype=np.int64) * nc) // width
    out = np.empty((nr, width), np.int64)
    prev = np.full(nr, -1, np.int64)
    rows = np.arange(nr)
    for j in range(width):
        prev = nxt[rows, np.maximum(prev + 1, np.minimum(home[j], latest[:, j]))]
        out[:, j] = prev
    return out


def repaired_grid(mesh: MeshSpec, *, square: bool = False, pr: int | None = None,
                  pc: int | None = None) -> schedule.Grid:
    """The logical grid in logical coordinates (rows/cols ``0 .. n-1``) on a repaired fabric,
    optionally square or cut to ``pr x pc``; the model maps it to physical cores."""
    nr, nc = repair(mesh).shape
    if square:
        p = min(nr, nc)
        pr = p if pr is None else pr
        pc = p if pc is None else pc
    for name, want, have in (("rows", pr, nr), ("cols", pc, nc)):
        if want is not None and not 1 <= want <= have:
            raise schedule.MeshScheduleError(f"logical grid needs {want} {name} but the spares of the "
                                    f"{mesh.rows}x{mesh.cols} mesh repair a {nr}x{nc} grid")
    return schedule.Grid(np.arange(nr if pr is None else pr, dtype=np.int64),
                np.arange(nc if pc is None else pc, dtype=np.int64), mesh.rows, mesh.cols)
