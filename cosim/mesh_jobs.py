"""MeshJobs encoded for the Verilated RTL mesh (top ``mesh``).

:func:`prepare_mesh` encodes any number of :class:`~tilewright.compiler.mesh_codegen.MeshJob` for
one simulator process (one cocotb test, :mod:`tilewright.cocotb_tests.mesh_bench`); per job the
run's record is ``{"cycles": int, "reads": {name: [list of words per region]}}``. The op-level
helpers that build jobs from mesh Programs are in :mod:`tilewright.cosim.mesh_rtl`.
"""

from __future__ import annotations

from tilewright.compiler.mesh_codegen import MeshJob
from tilewright.cosim.job import JobFiles, PreparedJob

__all__ = ["prepare_mesh", "IMEM_DEPTH"]

#: phase instructions per tile in the built mesh
IMEM_DEPTH = 32


def _jsonable(job: MeshJob) -> dict:
    return {"loads": [[int(t), int(b), [int(w) for w in ws]] for t, b, ws in job.loads],
            "instrs": job.instrs, "n_phases": job.n_phases,
            "reads": {k: [list(map(int, r)) for r in v] for k, v in job.reads.items()}}


def prepare_mesh(jobs: list[MeshJob], arch=None) -> PreparedJob:
    """The ``jobs`` as one simulation of the mesh (``arch``: the mesh's ArchSpec, unused by the
    encoding); ValueError for a job with more phases than the mesh holds."""
    for j in jobs:
        if j.n_phases > IMEM_DEPTH:
            raise ValueError(f"mesh job has {j.n_phases} phases; the RTL mesh holds "
                             f"{IMEM_DEPTH} phase instructions per tile")
    return PreparedJob(JobFiles({"jobs": [_jsonable(j) for j in jobs]}),
                       lambda res: {"records": res.results["results"]})
