"""Logical grids on a physical mesh, and remapping around dead cores and links.

Three ways to live with defects (measured trade-offs: docs/mesh_defects.md):

* **Spares** (``MeshSpec.spare_rows`` / ``spare_cols`` > 0, e.g. the ``wse2`` preset): the
  hardware switches spare cores in and presents an intact logical grid, as Cerebras' wafers do
  (:mod:`tilewright.compiler.mesh_repair`, with the citations). Every schedule runs unchanged on
  it; the model charges each message the extra hops of the remap. This is the only way that
  scales to 1-10 % dead cores (``defect_rate``).
* ``skip`` and ``route`` (meshes without spares): the software avoids the defects itself.

An algorithm runs on a logical ``pr x pc`` grid; :class:`Grid` maps logical row ``i`` to physical
row ``rows[i]`` and logical column ``j`` to physical column ``cols[j]``. Every schedule in this
package sends messages along straight logical rows/columns, XY-routed; so a message between two
cores of the grid only ever travels along a *kept* physical row (its horizontal leg) and a kept
physical column (its vertical leg).

Policy ``skip``: drop every physical row that holds a dead core or a dead horizontal link,
and every physical column that holds a dead core or a dead vertical link. Then no horizontal leg
runs along a row with a defect and no vertical leg along a column with a defect, so no message
touches a dead core or link (the model re-checks this on every run). The cost: fewer cores
(the grid shrinks) and logical neighbours that straddle a dropped row/column are 2+ hops apart.

Policy ``route`` keeps every row and drops only the columns of dead cores (dead links drop
nothing); a message whose straight path would cross a dead core or link steps onto the parallel
row/column next to it, passes the defect and steps back
(:func:`tilewright.compiler.mesh_schedule.route_around`). It keeps more cores; each detour adds 2
hops and its relay cores store and forward, so a rerouted message costs up to five messages sent
one after another (extra message-only phases after the phase it belongs to). It wins when the
cores it keeps outweigh that (compute-bound steps) and loses on communication-bound steps that
cross a defect every time; the model re-checks that nothing touches a defect. Why ``route`` is
slower than ``skip`` on a WSE-2 prefill at 0.01 % dead cores (1.63 M vs 0.95 M cycles) although
it keeps 97 k more cores: the mesh routes dimension-order XY, so a detour (two turns) needs relay
cores that store and forward; each piece is a new message (full serialization again) in a
message-only phase after the step, which cannot overlap the step's compute. The GEMM steps of a
750 x 750 prefill are short (tens of cycles), so 4-8 such waves per step cost more than the 21 %
extra cores save. That is right for an XY-routed mesh (the RTL mesh); a fabric with per-route
configurable routers would detour cut-through instead, which is what spares model.

The grids themselves are pure schedules and live in the compiler
(:mod:`tilewright.compiler.mesh_schedule`) so that it can emit mesh Programs; this module keeps
the public names and turns the compiler's errors into :class:`MeshMappingError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tilewright.arch import ArchSpec, MeshSpec
from tilewright.compiler import mesh_schedule as _ms
from tilewright.compiler.mesh_schedule import Grid
from tilewright.dataflow_sim.mesh.model import MeshMappingError

__all__ = ["Grid", "healthy_grid", "without_defects", "defect_cost", "as_mapping_error",
           "DEFECT_POLICIES", "defect_grid", "reroute", "defect_policy_cost"]

#: how a schedule avoids dead cores and links: drop lines, or drop dead cores' columns only
#: and reroute messages around defects
DEFECT_POLICIES = ("skip", "route")


@contextlib.contextmanager
def as_mapping_error() -> Iterator[None]:
    """Re-raise the compiler's :class:`~tilewright.compiler.mesh_schedule.MeshScheduleError`
    as this package's :class:`MeshMappingError` (same message)."""
    try:
        yield
    except _ms.MeshScheduleError as exc:
        raise MeshMappingError(str(exc)) from None


def healthy_grid(mesh: MeshSpec, *, square: bool = False, pr: int | None = None,
                 pc: int | None = None) -> Grid:
    """The largest logical grid avoiding every defect (see module doc), optionally square or
    cut to ``pr x pc`` (the first kept rows/columns)."""
    with as_mapping_error():
        return _ms.healthy_grid(mesh, square=square, pr=pr, pc=pc)


def defect_grid(mesh: MeshSpec, policy: str, *, square: bool = False, pr: int | None = None,
                pc: int | None = None) -> Grid:
    """The logical grid of defect ``policy``: ``skip`` (:func:`healthy_grid`) or ``route``
    (:func:`tilewright.compiler.mesh_schedule.routearound_grid`)."""
    if policy not in DEFECT_POLICIES:
        raise MeshMappingError(f"defects {policy!r}: must be one of {', '.join(DEFECT_POLICIES)}")
    with as_mapping_error():
        if policy == "skip":
            return _ms.healthy_grid(mesh, square=square, pr=pr, pc=pc)
        return _ms.routearound_grid(mesh, square=square, pr=pr, pc=pc)


def reroute(specs: list, mesh: MeshSpec, policy: str) -> tuple[list, int]:
    """Phase specs with messages rerouted around defects under ``route`` (unchanged under
    ``skip``), and the extra hops the detours add (one run of each phase)."""
    if policy != "route":
        return specs, 0
    with as_mapping_error():
        return _ms.route_around_specs(specs, mesh)


def defect_policy_cost(run, arch: ArchSpec, *args, **kwargs) -> dict:
    """Run ``run(arch, *args, defects=..., **kwargs)`` (:func:`mesh_gemm` or :func:`mesh_gemv`)
    with each defect policy and on the defect-free mesh: cycles, cores used, and the extra
    cycles and hops of each policy against the defect-free mesh."""
    good = run(without_defects(arch), *args, **kwargs)
    out: dict = {"cycles_healthy": good.cycles, "cores_used_healthy": good.cores_used,
                 "healthy": good}
    for policy in DEFECT_POLICIES:
        rep = run(arch, *args, defects=policy, **kwargs)
        out[policy] = rep
        out[f"cycles_{policy}"] = rep.cycles
        out[f"cores_used_{policy}"] = rep.cores_used
        out[f"extra_cycles_{policy}"] = rep.cycles - good.cycles
    out["detour_extra_hops"] = out["route"].notes.get("detour_extra_hops", 0)
    return out


def without_defects(arch: ArchSpec) -> ArchSpec:
    """A copy of ``arch`` whose mesh has no dead cores or links."""
    data = arch.model_dump(mode="json", exclude_none=True)
    data["mesh"]["defective_cores"] = []
    data["mesh"]["defective_links"] = []
    data["mesh"].pop("defect_rate", None)
    data["mesh"].pop("defect_seed", None)
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
