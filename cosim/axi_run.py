"""Run a Program on the Verilated AXI4-Lite GEMM top (``tw_axi_gemm_top``) through its bus port.

:func:`run_program_axi` builds (or reuses) the top for an ArchSpec, drives every GEMM task over
AXI4-Lite with cocotbext-axi (:mod:`tilewright.cocotb_tests.axi_bench`) and returns the outputs and the
CYCLES register of each GEMM. Compare outputs with :func:`tilewright.dataflow_sim.functional.
run_program` (bit-exact) and cycles with :func:`tilewright.dataflow_sim.cycle.gemm_cycles`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.layout import GemmLayout
from tilewright.compiler.program import Program
from tilewright.cosim.axi_build import AxiBuild, build_axi_top
from tilewright.cosim.bench_util import check_probes, run_program_job

__all__ = ["AxiRun", "run_program_axi", "AXI_BENCH_MODULE"]

AXI_BENCH_MODULE = "tilewright.cocotb_tests.axi_bench"


@dataclass
class AxiRun:
    """What one run through the AXI top produced. Unpacks as ``outputs, gemm_cycles``."""

    outputs: dict[str, np.ndarray]   #: every tensor the program computed
    gemm_cycles: list[dict]          #: per GEMM task: task, m, k, n, cycles (CYCLES register),
    #:                                  bus_cycles (first buffer write to last accumulator read)
    probes: list[list[dict]]         #: per probe group, per access: resp (0 OKAY .. 3 DECERR), data
    build: AxiBuild
    sim_seconds: float               #: wall time of the simulator process (s)

    def __iter__(self) -> Iterator:
        return iter((self.outputs, self.gemm_cycles))

    @property
    def total_gemm_cycles(self) -> int:
        return sum(r["cycles"] for r in self.gemm_cycles)


def run_program_axi(program: Program, inputs: dict[str, np.ndarray], arch: ArchSpec, *,
                    probes: Sequence[Sequence[dict]] = (), pause_seed: int | None = None,
                    log=None, keep_dir: str | Path | None = None,
                    waves: bool = False) -> AxiRun:
    """Run ``program`` on the AXI top for ``arch`` in Verilator, driven over AXI4-Lite.

    ``probes``: groups of raw accesses run after the Program (each ``{"op": "read"|"write",
    "addr": byte address, "data": int}``; a group's accesses are issued concurrently).
    ``pause_seed``: seed random valid/ready pauses on every AXI channel (None: no pauses).
    ``waves``: trace the run (a separate ``--trace`` build); ``dump.vcd`` stays in ``keep_dir``.
    Raises ValueError for a Program compiled for another arch, DoesNotFit for a GEMM too large
    for the buffers, RuntimeError if the simulation or the bench's checks fail.
    """
    if program.arch_hash != arch.content_hash():
        raise ValueError(f"program {program.name} was compiled for arch {program.arch_hash}, "
                         f"not {arch.name} ({arch.content_hash()})")
    for task in program.gemms():       # a clear DoesNotFit before any build or simulation
        GemmLayout.for_arch(arch, task.m, task.k, task.n).check_fits(arch)
    check_probes(probes)
    build = build_axi_top(arch, log=log, waves=waves)
    res = run_program_job(build, AXI_BENCH_MODULE, "AXI top", arch, program, inputs,
                          spec={"pause_seed": pause_seed, "probes": [list(g) for g in probes]},
                          results=("cycles", "probes"), keep_dir=keep_dir,
                          prefix="tilewright-axi-", waves=waves)
    return AxiRun(res.outputs, res.results["cycles"], res.results["probes"], build,
                  res.sim_seconds)
