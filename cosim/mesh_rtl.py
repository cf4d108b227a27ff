"""MeshGEMV / MeshGEMM on the Verilated RTL mesh: results, RTL and model cycles.

:func:`rtl_gemv` and :func:`rtl_gemm` emit the op's mesh Program
(:mod:`tilewright.compiler.mesh_ops`), build the job from it, run it on the ``mesh`` top
(:func:`tilewright.cosim.sim.run`) and assemble the output the way the model's ``execute_gemv`` /
``execute_gemm`` do, next to the mesh model's report for the *same Program*
(:func:`~tilewright.dataflow_sim.mesh.run_mesh_program`). :func:`rtl_transfers` runs a Program
of pure message phases (e.g. phases whose messages contend for links); :func:`rtl_jobs` runs
any MeshJobs. Every run also carries each flit's arrival cycle on the RTL and the flit model's
prediction of it (:func:`~tilewright.dataflow_sim.mesh.flit_sim.simulate_job`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_codegen import (MeshJob, gemm_job, gemv_job, transfer_job,
                                             unpack_int32)
from tilewright.compiler.mesh_schedule import healthy_grid
from tilewright.compiler.program import Program
from tilewright.cosim.sim import run
from tilewright.dataflow_sim.mesh import run_mesh_program
from tilewright.dataflow_sim.mesh.flit_sim import FlitRun, simulate_job
from tilewright.dataflow_sim.mesh.model import MeshReport

__all__ = ["MeshRtlRun", "JobRun", "rtl_gemv", "rtl_gemm", "rtl_transfers", "rtl_jobs"]


@dataclass
class JobRun:
    """One MeshJob on the RTL: its busy cycles, every flit's arrival (sorted (cycle, tile,
    ejection lane)), the words read back, and the flit model's prediction for the same job."""

    rtl_cycles: int
    arrivals: list[tuple[int, int, int]]
    reads: dict
    flit: FlitRun

    @property
    def flit_exact(self) -> bool:
        """The RTL delivered every flit in the cycle the flit model predicts, and took as long."""
        return self.rtl_cycles == self.flit.cycles and self.arrivals == self.flit.arrivals


def rtl_jobs(arch: ArchSpec, jobs: list[MeshJob], *, log=None) -> list[JobRun]:
    """Run ``jobs`` in one simulation of the RTL mesh of ``arch`` (one Verilator build, reused)
    and the flit model on each."""
    res = run("mesh", jobs, arch, log=log).records
    return [JobRun(r["cycles"], [tuple(a) for a in r["arrivals"]], r["reads"],
                   simulate_job(j, arch)) for j, r in zip(jobs, res)]


@dataclass
class MeshRtlRun:
    """One RTL mesh run: the assembled output, the RTL's cycles and the model's report."""

    op: str
    output: np.ndarray        #: int32; gemv: (rows, N) — y as held by every grid row; gemm: C
    rtl_cycles: int           #: cycles the mesh was busy (counter == simulation time)
    model: MeshReport         #: the mesh model's prediction for the same Program
    phase_names: list[str]
    program: Program | None = None   #: the mesh Program both ran
    job: JobRun | None = None        #: arrivals on the RTL and the flit model's prediction

    @property
    def model_cycles(self) -> int:
        return self.model.cycles


def _gemv_output(arch: ArchSpec, reads: dict, n: int) -> np.ndarray:
    grid = healthy_grid(arch.mesh)
    ys = np.array([unpack_int32(w) for w in reads["y"]])        # (pr*pc, nt)
    return ys.reshape(grid.pr, grid.pc * ys.shape[1])[:, :n]


def _gemm_output(arch: ArchSpec, reads: dict, m: int, n: int) -> np.ndarray:
    p = healthy_grid(arch.mesh, square=True).pr
    mt, nt = -(-m // p), -(-n // p)
    blocks = np.array([unpack_int32(w) for w in reads["C"]]).reshape(p, p, mt, nt)
    return blocks.transpose(0, 2, 1, 3).reshape(p * mt, p * nt)[:m, :n]


def rtl_gemv(arch: ArchSpec, cases: list[tuple[np.ndarray, np.ndarray]], *,
             levels: int = 2, log=None) -> list[MeshRtlRun]:
    """MeshGEMV of each int8 (x[K], w[K, N]) case on the RTL mesh (one simulation);
    ``levels``: K-tree levels (1: one streaming chain-reduction per half column)."""
    built = [gemv_job(arch, x, w, levels=levels) for x, w in cases]
    res = rtl_jobs(arch, [j for j, _ in built], log=log)
    return [MeshRtlRun("gemv", _gemv_output(arch, r.reads, w.shape[1]), r.rtl_cycles,
                       _model(prog, arch), j.phase_names, prog, r)
            for (x, w), (j, prog), r in zip(cases, built, res)]


def _model(program: Program, arch: ArchSpec) -> MeshReport:
    """The mesh model's report for a single-op Program."""
    ops = run_mesh_program(program, arch).ops
    if len(ops) != 1:
        raise ValueError(f"program {program.name}: {len(ops)} ops; expected one")
    return ops[0][1]


def rtl_gemm(arch: ArchSpec, cases: list[tuple[np.ndarray, np.ndarray]], *,
             algo: str = "mesh", log=None) -> list[MeshRtlRun]:
    """Distributed GEMM (``algo``: mesh | cannon | summa) of each int8 (a[M, K], b[K, N]) case
    on the RTL mesh (one simulation)."""
    built = [gemm_job(arch, a, b, algo=algo) for a, b in cases]
    res = rtl_jobs(arch, [j for j, _ in built], log=log)
    return [MeshRtlRun("gemm", _gemm_output(arch, r.reads, a.shape[0], b.shape[1]),
                       r.rtl_cycles, _model(prog, arch), j.phase_names, prog, r)
            for (a, b), (j, prog), r in zip(cases, built, res)]


def rtl_transfers(arch: ArchSpec, programs: list[Program], *, seed: int = 0,
                  log=None) -> list[tuple[int, int, bool]]:
    """Run Programs of pure message phases (:func:`transfer_job`) in one simulation; per
    Program returns (RTL cycles, mesh model cycles, every message delivered intact)."""
    built = [transfer_job(arch, p, seed=seed) for p in programs]
    res = run("mesh", [j for j, _ in built], arch, log=log).records
    out = []
    for prog, (_, expect), r in zip(programs, built, res):
        ok = all([int(w) for w in r["reads"][k][0]] == [int(w) for w in v]
                 for k, v in expect.items())
        out.append((r["cycles"], run_mesh_program(prog, arch).cycles, ok))
    return out
