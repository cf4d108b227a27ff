"""Costing mesh Programs: the compiler's mesh schedules and ``mesh_phase`` tasks on the model.

:func:`to_phases` turns the compiler's :class:`~tilewright.compiler.mesh_schedule.PhaseSpec` s
(bytes per message) into the model's :class:`~.model.Phase` s (flits per message, ``ceil(bytes /
link_bytes_per_cycle)``). :func:`run_mesh_program` costs a Program of
:class:`~tilewright.compiler.program.MeshPhaseTask` s (from
:mod:`tilewright.compiler.mesh_partition`): consecutive tasks of one ``op`` are one
:func:`~.model.simulate` run (SRAM, route-id and dead core/link checks per op); the Program's
time is the sum over ops (ops run one after another, like the phases inside them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_schedule import PhaseSpec
from tilewright.compiler.program import MeshPhaseTask, Program
from tilewright.dataflow_sim.mesh.model import Flows, MeshMappingError, MeshReport, Phase, simulate

__all__ = ["to_phases", "run_mesh_program", "MeshProgramRun", "task_phase", "split_cycles",
           "REDUCTION_PHASES", "link_busy_map"]


def to_phases(specs: list[PhaseSpec], link_bytes: int) -> list[Phase]:
    """The model's phases for the compiler's phase specs (messages in flits)."""
    out = []
    for s in specs:
        f = s.flows
        flows = None if f is None else Flows(f.sr, f.sc, f.dr, f.dc, -(-f.nbytes // link_bytes),
                                             f.stages, f.times)
        out.append(Phase(s.name, flows, s.macs + s.vector_ops, s.overlap, s.repeat,
                         s.route_group, s.relay_wave))
    return out


def task_phase(task: MeshPhaseTask, program: Program, link_bytes: int) -> Phase:
    """The model's phase for one ``mesh_phase`` task of ``program``."""
    flows = None
    if task.flows is not None:
        arr = np.asarray(program.constants[task.flows], dtype=np.int64)
        nbytes = np.repeat(np.asarray(task.flow_bytes, np.int64),
                           np.asarray(task.flow_counts, np.int64))
        flows = Flows(arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), arr[:, 3].copy(),
                      -(-nbytes // link_bytes), arr[:, 4].copy(), arr[:, 5].copy())
    return Phase(task.name, flows, task.macs_per_core + task.vector_ops_per_core, task.overlap,
                 task.repeat, task.route_group, task.relay_wave)


@dataclass
class MeshProgramRun:
    """The mesh model's prediction for a Program: one :class:`MeshReport` per op, in order."""

    program: str
    arch: str
    clock_mhz: float
    ops: list[tuple[str, MeshReport]] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        return sum(r.cycles for _, r in self.ops)

    @property
    def us(self) -> float:
        return self.cycles / self.clock_mhz

    @property
    def useful_macs(self) -> int:
        return sum(r.useful_macs for _, r in self.ops)

    def table(self):
        """Per op: cycles, µs, the cycles split into compute / NoC transfer / reduction
        (:func:`split_cycles`), useful MACs, cores used, phases (pandas DataFrame)."""
        import pandas as pd  # noqa: PLC0415  (lazy: pandas is heavy)
        return pd.DataFrame([{"op": name, "cycles": r.cycles, "us": r.us, **split_cycles(r),
                              "useful_macs": r.useful_macs, "cores_used": r.cores_used,
                              "phases": len(r.phases)} for name, r in self.ops])


#: words in a phase name that mark it as part of a reduction (K-tree reduce of a GEMV, the
#: reduce and broadcast legs of a row all-reduce)
REDUCTION_PHASES = ("reduce", "row broadcast")


def split_cycles(rep: MeshReport) -> dict:
    """A run's cycles split into ``compute`` (core work, the part not hidden under messages),
    ``transfer`` (NoC messages, the part not hidden under compute) and ``reduction`` (every
    phase of a reduction: :data:`REDUCTION_PHASES`); they add up to ``rep.cycles``."""
    out = {"compute_cycles": 0, "transfer_cycles": 0, "reduction_cycles": 0}
    for p in rep.phases:
        if any(w in p.name for w in REDUCTION_PHASES):
            out["reduction_cycles"] += p.total_cycles
        else:
            comp = min(p.compute_cycles, p.cycles) * p.repeat
            out["compute_cycles"] += comp
            out["transfer_cycles"] += p.total_cycles - comp
    return out


def link_busy_map(rep: MeshReport) -> np.ndarray:
    """(rows, cols) flits (= busy cycles) on the links leaving each core east and south, both
    directions of each link summed: where a run's link time goes. A run costed on one
    representative row or column (``notes["same_as"]``) is copied to every row/column listed."""
    f = rep.link_load_flits
    r, c = rep.core_busy_cycles.shape
    out = np.zeros((r, c))
    if c > 1:
        out[:, :-1] += f["E"] + f["W"]
    if r > 1:
        out[:-1, :] += f["S"] + f["N"]
    same = rep.notes.get("same_as")
    if same:
        axis, idx = same
        if axis == "rows":
            out[idx, :] = out.max(axis=0)[None, :]
        else:
            out[:, idx] = out.max(axis=1)[:, None]
    return out


def run_mesh_program(program: Program, arch: ArchSpec) -> MeshProgramRun:
    """Cost every ``mesh_phase`` task of ``program`` on ``arch.mesh`` (see module doc).

    Raises :class:`MeshMappingError` if the ArchSpec has no mesh, the Program's core maps do
    not match the mesh's size, the Program holds a task that is not a mesh task, or a mapping
    limit (SRAM, route ids, dead core/link) is exceeded.
    """
    mesh = arch.mesh
    if mesh is None:
        raise MeshMappingError(f"{arch.name}: the ArchSpec has no mesh section")
    for t in program.tasks:
        if not isinstance(t, MeshPhaseTask):
            raise MeshMappingError(f"program {program.name}: task {t.name} is a {t.kind!r} task; "
                                   "the mesh model runs only 'mesh_phase' tasks")
    program.check()
    run = MeshProgramRun(program.name, arch.name, arch.clock_mhz)
    for op, grp in groupby(program.tasks, key=lambda t: t.op):
        tasks = list(grp)
        cores = np.zeros((mesh.rows, mesh.cols), bool)
        memory = np.zeros((mesh.rows, mesh.cols), np.int64)
        for t in tasks:
            m = np.asarray(program.constants[t.cores], bool)
            if m.shape != (mesh.rows, mesh.cols):
                raise MeshMappingError(
                    f"program {program.name}: task {t.name} maps {m.shape[0]}x{m.shape[1]} "
                    f"cores but {arch.name}'s mesh is {mesh.rows}x{mesh.cols}")
            cores |= m
            np.maximum(memory, np.where(m, t.memory_bytes_per_core, 0), out=memory)
        phases = [task_phase(t, program, mesh.link_bytes_per_cycle) for t in tasks]
        rep = simulate(arch, phases, op=op, algo="program", shape={"tasks": len(tasks)},
                       cores=cores, memory_bytes=memory,
                       useful_macs=sum(t.useful_macs for t in tasks),
                       notes={"memory_breakdown": "the op's memory_bytes_per_core"})
        run.ops.append((op, rep))
    return run
