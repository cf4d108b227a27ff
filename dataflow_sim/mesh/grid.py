"""Logical grids on a physical mesh, and remapping around dead cores and links.

An algorithm runs on a logical ``pr x pc`` grid; :class:`Grid` maps logical row ``i`` to physical
row ``rows[i]`` and logical column ``j`` to physical column ``cols[j]``. Every schedule in this
package sends messages along straight logical rows/columns, XY-routed; so a message between two
cores of the grid only ever travels along a *kept* physical row (its horizontal leg) and a kept
physical column (its vertical leg).

Remapping ("skip"): drop every physical row that holds a dead core or a dead horizontal link,
and every physical column that holds a dead core or a dead vertical link. Then no horizontal leg
runs along a row with a defect and no vertical leg along a column with a defect, so no message
touches a dead core or link (the model re-checks this on every run). The cost: fewer cores
(the grid shrinks) and logical neighbours that straddle a dropped row/column are 2+ hops apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilewright.arch import ArchSpec, MeshSpec
from tilewright.dataflow_sim.mesh.model import MeshMappingError

__all__ = ["Grid", "healthy_grid", "without_defects", "defect_cost"]


@dataclass(frozen=True)
class Grid:
    """Physical row of each logical row, physical column of each logical column."""

    rows: np.ndarray
    cols: np.ndarray
    mesh_rows: int
    mesh_cols: int
    dropped_rows: tuple[int, ...] = ()
    dropped_cols: tuple[int, ...] = ()

    @property
    def pr(self) -> int:
        return int(self.rows.size)

    @property
    def pc(self) -> int:
        return int(self.cols.size)

    def mask(self) -> np.ndarray:
        """Bool (mesh rows, mesh cols): cores of the grid."""
        m = np.zeros((self.mesh_rows, self.mesh_cols), bool)
        m[np.ix_(self.rows, self.cols)] = True
        return m

    def scatter(self, values: np.ndarray) -> np.ndarray:
        """A (pr, pc) array of per-logical-core values placed on the physical mesh (0 elsewhere)."""
        out = np.zeros((self.mesh_rows, self.mesh_cols), dtype=np.asarray(values).dtype)
        out[np.ix_(self.rows, self.cols)] = values
        return out


def _bad_lines(mesh: MeshSpec) -> tuple[set[int], set[int]]:
    bad_r: set[int] = set()
    bad_c: set[int] = set()
    for r, c in mesh.defective_cores:
        if not (0 <= r < mesh.rows and 0 <= c < mesh.cols):
            raise MeshMappingError(f"defective core ({r}, {c}) is outside the "
                                   f"{mesh.rows}x{mesh.cols} mesh")
        bad_r.add(int(r))
        bad_c.add(int(c))
    for a, b in mesh.defective_links:
        (r0, c0), (r1, c1) = sorted((tuple(a), tuple(b)))
        if r0 == r1 and c1 == c0 + 1:
            bad_r.add(int(r0))
        elif c0 == c1 and r1 == r0 + 1:
            bad_c.add(int(c0))
        else:
            raise MeshMappingError(f"defective link {tuple(a)}-{tuple(b)}: cores are not adjacent")
    return bad_r, bad_c


def healthy_grid(mesh: MeshSpec, *, square: bool = False, pr: int | None = None,
                 pc: int | None = None) -> Grid:
    """The largest logical grid avoiding every defect (see module doc), optionally square or
    cut to ``pr x pc`` (the first kept rows/columns)."""
    bad_r, bad_c = _bad_lines(mesh)
    rows = np.array([r for r in range(mesh.rows) if r not in bad_r], dtype=np.int64)
    cols = np.array([c for c in range(mesh.cols) if c not in bad_c], dtype=np.int64)
    if square:
        p = min(rows.size, cols.size)
        pr = p if pr is None else pr
        pc = p if pc is None else pc
    for name, want, have in (("rows", pr, rows.size), ("cols", pc, cols.size)):
        if want is not None and not 1 <= want <= have:
            raise MeshMappingError(
                f"logical grid needs {want} {name} but the {mesh.rows}x{mesh.cols} mesh has "
                f"{have} healthy {name} ({len(bad_r) if name == 'rows' else len(bad_c)} dropped "
                f"for defects)")
    if rows.size == 0 or cols.size == 0:
        raise MeshMappingError(f"no healthy rows/columns left on the {mesh.rows}x{mesh.cols} mesh")
    rows = rows[:pr] if pr is not None else rows
    cols = cols[:pc] if pc is not None else cols
    return Grid(rows, cols, mesh.rows, mesh.cols, tuple(sorted(bad_r)), tuple(sorted(bad_c)))


def without_defects(arch: ArchSpec) -> ArchSpec:
    """A copy of ``arch`` whose mesh has no dead cores or links."""
    data = arch.model_dump(mode="json", exclude_none=True)
    data["mesh"]["defective_cores"] = []
    data["mesh"]["defective_links"] = []
    return ArchSpec.from_dict(data, source=arch.name)


def defect_cost(run, arch: ArchSpec, *args, **kwargs) -> dict:
    """Run ``run(arch, *args, **kwargs)`` (e.g. :func:`mesh_gemv`) with and without ``arch``'s
    defects; report both times, the cores lost and the slowdown."""
    bad = run(arch, *args, **kwargs)
    good = run(without_defects(arch), *args, **kwargs)
    return {"cycles_healthy": good.cycles, "cycles_with_defects": bad.cycles,
            "slowdown": bad.cycles / max(good.cycles, 1),
            "cores_used_healthy": good.cores_used, "cores_used_with_defects": bad.cores_used,
            "dead_cores": len(arch.mesh.defective_cores),
            "dead_links": len(arch.mesh.defective_links),
            "healthy": good, "with_defects": bad}
