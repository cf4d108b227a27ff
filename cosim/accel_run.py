"""Run a Program on the Verilated accelerator top (controller + DMA + double-buffered GEMM core).

:func:`run_program_accel` compiles the Program's ``gemm`` tasks to the ISA
(:func:`tilewright.compiler.codegen.codegen`), builds (or reuses) the top for the ArchSpec and runs
the cocotb bench :mod:`tilewright.cocotb_tests.accel_bench`, whose external-memory model has the
ArchSpec's latency and bandwidth. Compare outputs with the functional model (bit-exact) and
cycles with :func:`tilewright.dataflow_sim.accel_timing.predict_segment` (exact).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import IsaProgram, codegen
from tilewright.compiler.program import Program
from tilewright.cosim.accel_build import AccelBuild, build_accel
from tilewright.cosim.bench_util import run_program_job

__all__ = ["AccelRun", "run_program_accel", "ACCEL_BENCH_MODULE"]

ACCEL_BENCH_MODULE = "tilewright.cocotb_tests.accel_bench"


@dataclass
class AccelRun:
    """What one accelerator co-simulation produced."""

    outputs: dict[str, np.ndarray]   #: every tensor the program computed
    segments: list[dict]             #: per gemm task: task, m, k, n, tiles, cycles, retired, ...
    isa: IsaProgram                  #: the code that ran
    build: AccelBuild
    sim_seconds: float               #: wall time of the simulator process
    log_tail: str = field(default="", repr=False)

    @property
    def rtl_cycles(self) -> int:
        """Sum over segments of the cycles ``busy`` was high."""
        return sum(r["cycles"] for r in self.segments)

    def comparison(self, arch: ArchSpec) -> list[dict]:
        """Per GEMM task: RTL cycles next to the cycle model's prediction, the GEMM core's and
        the DMA's busy cycles and the utilization M·K·N / (peak MAC/cycle · cycles), peak =
        rows·cols·depth (``tensor_engine.macs_per_cycle``)."""
        from tilewright.dataflow_sim.accel_timing import predict_segment  # noqa: PLC0415
        te = arch.tensor_engine
        rows = []
        for rec in self.segments:
            pred = predict_segment(self.isa, self.isa.segment(rec["task"]), arch)
            rows.append({"task": rec["task"], "m": rec["m"], "k": rec["k"], "n": rec["n"],
                         "steps": rec["tiles"], "rtl_cycles": rec["cycles"],
                         "model_cycles": pred.cycles, "equal": rec["cycles"] == pred.cycles,
                         "gemm_busy": pred.gemm_cycles, "dma_busy": pred.dma_cycles,
                         "utilization": rec["m"] * rec["k"] * rec["n"]
                         / (te.macs_per_cycle * rec["cycles"])})
        return rows


def run_program_accel(program: Program, inputs: dict[str, np.ndarray], arch: ArchSpec, *,
                      log=None, keep_dir: str | Path | None = None,
                      waves: bool = False) -> AccelRun:
    """Run ``program`` on the accelerator top for ``arch`` in Verilator (cocotb bench).

    Raises CodegenError/DoesNotFit/AssemblerError (via codegen) before any build for a program
    that cannot run, RuntimeError if the simulation or the bench's own checks fail."""
    isa = codegen(program, arch)          # clear errors first
    build = build_accel(arch, log=log, waves=waves)
    res = run_program_job(build, ACCEL_BENCH_MODULE, "accelerator RTL", arch, program, inputs,
                          keep_dir=keep_dir, prefix="tilewright-accel-", waves=waves)
    return AccelRun(res.outputs, res.results["cycles"], isa, build, res.sim_seconds,
                    res.log_text[-2000:])
