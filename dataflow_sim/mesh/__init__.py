"""Wafer-scale mesh model: compute and messages on a 2-D mesh of small cores (PLMR model).

Public API::

    from tilewright.dataflow_sim.mesh import mesh_gemm, mesh_gemv, MeshMappingError
    rep = mesh_gemv(load_arch("wse2"), k=16384, n=16384)      # MeshGEMV on 750 x 994
    rep.cycles, rep.us, rep.link_utilization["E"], rep.core_utilization, rep.memory_bytes

Conventions (latency, serialization, contention, phases, routes): :mod:`.model`. The RTL mesh's
run-time arbitration, flit by flit: :mod:`.flit_sim`.
Algorithms: :mod:`.gemm` (MeshGEMM, Cannon, SUMMA), :mod:`.gemv` (MeshGEMV, ring all-reduce
GEMV); their schedules are pure functions in :mod:`tilewright.compiler.mesh_schedule`.
Defects and logical grids (policies ``skip`` and ``route``): :mod:`.grid`. LLM layer
partitioning: :mod:`.llm`; as a Program of
``mesh_phase`` tasks: :mod:`tilewright.compiler.mesh_partition`, costed by
:func:`run_mesh_program` (:mod:`.program_run`).
"""

from tilewright.dataflow_sim.mesh.gemm import GEMM_ALGOS, execute_gemm, interleaved_ring, mesh_gemm
from tilewright.dataflow_sim.mesh.flit_sim import FlitRun, simulate_job
from tilewright.dataflow_sim.mesh.gemv import GEMV_ALGOS, execute_gemv, mesh_gemv
from tilewright.dataflow_sim.mesh.grid import (DEFECT_POLICIES, Grid, defect_cost, defect_grid,
                                               defect_policy_cost, healthy_grid, without_defects)
from tilewright.dataflow_sim.mesh.model import (Flows, MeshMappingError, MeshReport, Phase,
                                                PhaseCost, message_cycles, simulate)
from tilewright.dataflow_sim.mesh.program_run import MeshProgramRun, run_mesh_program

__all__ = ["mesh_gemm", "mesh_gemv", "execute_gemm", "execute_gemv", "interleaved_ring",
           "GEMM_ALGOS", "GEMV_ALGOS", "MeshMappingError", "MeshReport", "Phase", "PhaseCost",
           "Flows", "simulate", "message_cycles", "Grid", "healthy_grid", "without_defects",
           "defect_cost", "run_mesh_program", "MeshProgramRun", "DEFECT_POLICIES", "defect_grid",
           "defect_policy_cost", "FlitRun", "simulate_job"]
