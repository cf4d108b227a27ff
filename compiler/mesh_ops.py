"""Single distributed ops (MeshGEMM / Cannon / SUMMA, MeshGEMV) emitted as mesh Programs.

:func:`gemm_program` and :func:`gemv_program` emit one op as consecutive
:class:`~tilewright.compiler.program.MeshPhaseTask` s (one per phase of
:func:`~tilewright.compiler.mesh_schedule.gemm_phase_specs` /
:func:`~tilewright.compiler.mesh_schedule.gemv_phase_specs`), with the op's shape, blocks and
schedule parameters in ``Program.meta`` (``mesh_op``) so that every consumer — the mesh model
(:func:`tilewright.dataflow_sim.mesh.run_mesh_program`) and the RTL mesh
(:mod:`tilewright.compiler.mesh_codegen`) — runs the same Program. SRAM per core follows the mesh
model's own accounting (:func:`tilewright.dataflow_sim.mesh.mesh_gemm` / ``mesh_gemv``).
"""

from __future__ import annotations

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_partition import MeshProgramBuilder
from tilewright.compiler.mesh_schedule import (GEMM_ALGOS, GEMV_ALGOS, MeshScheduleError,
                                               gemm_memory_bytes, gemm_phase_specs,
                                               gemv_memory_bytes, gemv_phase_specs)
from tilewright.compiler.program import Program

__all__ = ["gemm_program", "gemv_program"]


def _dims(**dims: int) -> None:
    for name, v in dims.items():
        if not isinstance(v, int) or v < 1:
            raise MeshScheduleError(f"mesh op dimension {name} = {v!r}: must be an integer >= 1")


def gemm_program(arch: ArchSpec, m: int, k: int, n: int, *, algo: str = "mesh",
                 elem_bytes: int = 1, acc_bytes: int = 4, align: bool = True,
                 defects: str = "skip") -> Program:
    """``C[m, n] = A[m, k] @ B[k, n]`` with ``algo`` (mesh | cannon | summa) on the largest
    square healthy grid of ``arch.mesh``; ``elem_bytes`` / ``acc_bytes``: bytes per A/B and
    per C element. ``meta["mesh_op"]`` = {op, algo, m, k, n, p, mt, kt, nt, elem_bytes,
    acc_bytes, align}."""
    if algo not in GEMM_ALGOS:
        raise MeshScheduleError(f"GEMM algo {algo!r}: must be one of {', '.join(GEMM_ALGOS)}")
    _dims(m=m, k=k, n=n, elem_bytes=elem_bytes, acc_bytes=acc_bytes)
    b = MeshProgramBuilder(f"gemm-{algo}-{m}x{k}x{n}", arch, defects)
    grid = b.grid(square=True)
    p = grid.pr
    mt, kt, nt = -(-m // p), -(-k // p), -(-n // p)
    mem = gemm_memory_bytes(algo, mt, kt, nt, kt, elem_bytes=elem_bytes, acc_bytes=acc_bytes)
    b.add("gemm", gemm_phase_specs(algo, grid, mt, kt, nt, elem_bytes=elem_bytes, align=align),
          grid.mask(), memory_bytes_per_core=mem, useful_macs=m * k * n)
    return b.program({"mesh_op": {"op": "gemm", "algo": algo, "m": m, "k": k, "n": n, "p": p,
                                  "mt": mt, "kt": kt, "nt": nt, "elem_bytes": elem_bytes,
                                  "acc_bytes": acc_bytes, "align": align}})


def gemv_program(arch: ArchSpec, k: int, n: int, *, algo: str = "mesh", elem_bytes: int = 1,
                 acc_bytes: int = 4, levels: int = 2, group: int | None = None,
                 defects: str = "skip") -> Program:
    """``y[n] = x[k] @ W[k, n]`` with ``algo`` (mesh: K-tree + column broadcast | allreduce)
    on the whole healthy mesh (K over rows, N over columns). ``meta["mesh_op"]`` = {op, algo,
    k, n, pr, pc, kt, nt, elem_bytes, acc_bytes, levels, group}."""
    if algo not in GEMV_ALGOS:
        raise MeshScheduleError(f"GEMV algo {algo!r}: must be one of {', '.join(GEMV_ALGOS)}")
    _dims(k=k, n=n, elem_bytes=elem_bytes, acc_bytes=acc_bytes, levels=levels)
    b = MeshProgramBuilder(f"gemv-{algo}-{k}x{n}", arch, defects)
    grid = b.grid()
    kt, nt = -(-k // grid.pr), -(-n // grid.pc)
    recv = nt if algo == "mesh" else -(-nt // grid.pr)        # K-tree: Nt; ring: one chunk
    mem = gemv_memory_bytes(kt, nt, recv, elem_bytes=elem_bytes, acc_bytes=acc_bytes)
    specs = gemv_phase_specs(algo, grid, kt, nt, elem_bytes=elem_bytes, acc_bytes=acc_bytes,
                             levels=levels, group=group)
    b.add("gemv", specs, grid.mask(), memory_bytes_per_core=mem, useful_macs=k * n)
    return b.program({"mesh_op": {"op": "gemv", "algo": algo, "k": k, "n": n, "pr": grid.pr,
                                  "pc": grid.pc, "kt": kt, "nt": nt, "elem_bytes": elem_bytes,
                                  "acc_bytes": acc_bytes, "levels": levels, "group": group}})
