"""The mesh GEMM and GEMV algorithm names (:mod:`.mesh_schedule` builds them): kept apart so the
command line can list them without importing the scheduler and numpy."""

__all__ = ["GEMM_ALGOS", "GEMV_ALGOS"]

#: MeshGEMM (WaferLLM), Cannon, SUMMA, SUMMA with relayed broadcasts
GEMM_ALGOS = ("mesh", "cannon", "summa", "summa_relay")
#: MeshGEMV (WaferLLM's K-tree), ring all-reduce
GEMV_ALGOS = ("mesh", "allreduce")
