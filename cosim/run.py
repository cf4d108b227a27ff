"""Run a Program on the Verilated GEMM core and collect outputs and cycle counts.

Two drivers run the same Program with the same port protocol: ``"cocotb"`` (the verification
bench, Python every cycle) and ``"fast"`` (the C++ harness of :mod:`tilewright.cosim.fast_run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.layout import GemmLayout
from tilewright.compiler.program import Program
from tilewright.cosim.bench_util import run_program_job
from tilewright.cosim.verilator import VerilatorBuild, build_core

if TYPE_CHECKING:
    from tilewright.cosim.fast_build import FastBuild

__all__ = ["RtlRun", "run_program_rtl", "BENCH_MODULE", "DRIVERS"]

BENCH_MODULE = "tilewright.cocotb_tests.gemm_core_bench"
#: accepted values of ``run_program_rtl(..., driver=)``
DRIVERS = ("cocotb", "fast")


@dataclass
class RtlRun:
    """What one RTL co-simulation produced."""

    outputs: dict[str, np.ndarray]          #: every tensor the program computed
    gemm_cycles: list[dict]                 #: per GEMM task: task, m, k, n, cycles, run_seconds
    build: "VerilatorBuild | FastBuild"     #: the cocotb build, or the fast driver's
    sim_seconds: float                      #: wall time of the simulator process
    job_dir: Path | None = None
    log_tail: str = field(default="", repr=False)

    @property
    def total_gemm_cycles(self) -> int:
        return sum(r["cycles"] for r in self.gemm_cycles)


def run_program_rtl(program: Program, inputs: dict[str, np.ndarray], arch: ArchSpec, *,
                    log=None, keep_dir: str | Path | None = None, waves: bool = False,
                    driver: str = "cocotb") -> RtlRun:
    """Build (or reuse) the core for ``arch`` and run ``program`` on it in Verilator, driven by
    cocotb (``driver="cocotb"``) or the C++ fast driver (``driver="fast"``; no ``waves``).

    ``waves``: trace every signal (a tracing build, see :func:`build_core`); the bench writes
    ``dump.vcd`` into ``keep_dir`` (required with ``waves``).

    Raises RuntimeError if the simulation fails or the bench's own checks fail.
    """
    if waves and not keep_dir:
        raise ValueError("waves=True needs keep_dir: the folder that receives dump.vcd")
    if driver not in DRIVERS:
        raise ValueError(f"driver {driver!r}: must be one of {', '.join(DRIVERS)}")
    if waves and driver != "cocotb":
        raise ValueError("waves=True needs driver='cocotb' (the fast driver does not trace)")
    if program.arch_hash != arch.content_hash():
        raise ValueError(f"program {program.name} was compiled for arch {program.arch_hash}, "
                         f"not {arch.name} ({arch.content_hash()})")
    for task in program.gemms():       # a clear DoesNotFit before any build or simulation
        GemmLayout.for_arch(arch, task.m, task.k, task.n).check_fits(arch)
    if driver == "fast":
        from tilewright.cosim.fast_run import run_program_fast  # noqa: PLC0415
        return run_program_fast(program, inputs, arch, log=log, keep_dir=keep_dir)
    build = build_core(arch, log=log, waves=waves)
    res = run_program_job(build, BENCH_MODULE, "RTL", arch, program, inputs, keep_dir=keep_dir,
                          prefix="tilewright-job-", waves=waves)
    return RtlRun(res.outputs, res.results["cycles"], build, res.sim_seconds, res.folder,
                  res.log_text[-2000:])
