"""Run a Program on the Verilated AXI accelerator top (``tw_axi_accel_top``) through its buses.

:func:`run_program_axi_accel` compiles the Program's ``gemm`` tasks to the ISA, builds (or
reuses) the top for the ArchSpec and runs the cocotb bench :mod:`tilewright.cocotb_tests.axi_accel_bench`
(cocotbext-axi ``AxiLiteMaster`` on the control port, ``AxiRam`` as the memory on the AXI4
manager port). Compare outputs with the functional model (bit-exact) and cycles with
:func:`tilewright.dataflow_sim.accel_timing.predict_segment` on :func:`axi_timing_arch` — the
ArchSpec with the memory latency the AXI port actually has (:data:`AXI_RAM_READ_LATENCY`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import IsaProgram, codegen, memory_latency_cycles
from tilewright.compiler.program import Program
from tilewright.cosim.axi_accel_build import AxiAccelBuild, build_axi_accel
from tilewright.cosim.bench_util import check_probes, run_program_job

__all__ = ["AxiAccelRun", "run_program_axi_accel", "axi_timing_arch", "AXI_RAM_READ_LATENCY",
           "AXI_ACCEL_BENCH_MODULE"]

AXI_ACCEL_BENCH_MODULE = "tilewright.cocotb_tests.axi_accel_bench"
#: read latency L (cycles from the DMA's request to its first data beat) the DMA sees through
#: :class:`tilewright.rtl.axi_accel_top.AxiMasterBridge` with cocotbext-axi 0.1.28's AxiRam:
#: 1 cycle request -> ARVALID (registered in the bridge), plus AxiRam's answer — the AR
#: handshake is sampled at a rising edge, the RAM model queues the beat and its R source drives
#: RVALID from the next rising edge, so the first beat is valid 2 cycles after the AR cycle
AXI_RAM_READ_LATENCY = 3


def axi_timing_arch(arch: ArchSpec, latency_cycles: int = AXI_RAM_READ_LATENCY) -> ArchSpec:
    """``arch`` with ``offchip.latency_ns`` set so that ``memory_latency_cycles`` is
    ``latency_cycles``: the ArchSpec the accelerator cycle model needs to predict the top behind
    an AXI memory of that latency (bandwidth — hence the beat width — unchanged)."""
    data = arch.model_dump(mode="json")
    data["offchip"] = {**data["offchip"], "latency_ns": latency_cycles * 1000 / arch.clock_mhz}
    out = ArchSpec.from_dict(data)
    assert memory_latency_cycles(out) == latency_cycles
    return out


@dataclass
class AxiAccelRun:
    """What one co-simulation through the AXI ports produced."""

    outputs: dict[str, np.ndarray]   #: every tensor the program computed
    segments: list[dict]             #: per gemm task: task, m, k, n, tiles, status, cycles
    #:                                  (CYCLES register), retired, pc, axi_ar/aw/r/w/b counts
    raw_runs: list[dict]             #: per raw run: status, cycles, retired, pc
    probes: list[list[dict]]         #: per probe group, per access: resp (0 OKAY..3 DECERR), data
    isa: IsaProgram                  #: the code that ran
    build: AxiAccelBuild
    sim_seconds: float               #: wall time of the simulator process (s)

    @property
    def rtl_cycles(self) -> int:
        """Sum over segments of the CYCLES register."""
        return sum(r["cycles"] for r in self.segments)

    def comparison(self, arch: ArchSpec) -> list[dict]:
        """Per GEMM task: the CYCLES register next to the accelerator cycle model on
        :func:`axi_timing_arch` (``arch`` with the AXI port's latency) and the utilization
        M·K·N / (rows·cols·cycles)."""
        from tilewright.dataflow_sim.accel_timing import predict_segment  # noqa: PLC0415
        te, tarch = arch.tensor_engine, axi_timing_arch(arch)
        rows = []
        for rec in self.segments:
            pred = predict_segment(self.isa, self.isa.segment(rec["task"]), tarch)
            rows.append({"task": rec["task"], "m": rec["m"], "k": rec["k"], "n": rec["n"],
                         "rtl_cycles": rec["cycles"], "model_cycles": pred.cycles,
                         "equal": rec["cycles"] == pred.cycles,
                         "utilization": rec["m"] * rec["k"] * rec["n"]
                         / (te.rows * te.cols * rec["cycles"])})
        return rows


def run_program_axi_accel(program: Program, inputs: dict[str, np.ndarray], arch: ArchSpec, *,
                          raw_runs: Sequence[dict] = (), probes: Sequence[Sequence[dict]] = (),
                          pause_seed: int | None = None, log=None,
                          keep_dir: str | Path | None = None,
                          waves: bool = False) -> AxiAccelRun:
    """Run ``program`` on the AXI accelerator top for ``arch`` in Verilator (cocotb bench).

    ``raw_runs``: runs after the Program, each ``{"words": {index: 64-bit word}, "entry": int}``.
    ``probes``: groups of raw AXI4-Lite accesses run last (``{"op": "read"|"write", "addr": int,
    "data": int}``; one group's accesses are issued concurrently). ``pause_seed``: seed random
    valid/ready pauses on every channel of the AxiRam (None: an always-ready memory; with pauses
    the outputs stay exact and CYCLES can only grow). Raises CodegenError /
    DoesNotFit / AssemblerError (via codegen) and ArchSpecError before any build for what cannot
    run, ValueError for a malformed probe, RuntimeError if the simulation or the bench's checks
    fail."""
    isa = codegen(program, arch)          # clear errors first
    check_probes(probes)
    build = build_axi_accel(arch, log=log, waves=waves)
    spec = {"raw_runs": [{"words": {str(i): int(w) for i, w in r["words"].items()},
                          "entry": int(r["entry"])} for r in raw_runs],
            "probes": [list(g) for g in probes], "pause_seed": pause_seed}
    res = run_program_job(build, AXI_ACCEL_BENCH_MODULE, "AXI accelerator top", arch, program,
                          inputs, spec=spec, results=("cycles", "raw_runs", "probes"),
                          keep_dir=keep_dir, prefix="tilewright-axiacc-", waves=waves)
    return AxiAccelRun(res.outputs, res.results["cycles"], res.results["raw_runs"],
                       res.results["probes"], isa, build, res.sim_seconds)
