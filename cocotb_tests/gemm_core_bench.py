"""cocotb 2.x bench: runs a Program on the Verilated GEMM core, GEMM tasks in RTL.

This module is loaded *inside the simulator process* by cocotb. It reads a job folder (path in
``$TILEWRIGHT_JOB``): ``arch.yaml``, ``program/`` (a saved Program), ``inputs.npz`` and
``job.json``; it runs every task in order — GEMM tasks on the RTL (buffers filled through the
write ports, ``start`` pulsed, C read back; encoding shared with the C++ fast driver in
:mod:`tilewright.cosim.gemm_commands`), vector tasks with the functional model's vector ops
(there is no vector unit in this RTL yet) — and writes ``outputs.npz`` (every computed tensor)
and ``cycles.json``.

Cycle convention: the cycles of one GEMM are the cycles ``busy`` is high, measured two ways — from
simulation time between the rising edge that samples ``start`` and the one that drops ``busy``,
and by the core's own ``cycles`` counter. The bench asserts both agree.

Signals are driven and sampled on the falling clock edge (race-free with Verilator).
"""

from __future__ import annotations

import time

import cocotb
import numpy as np

from tilewright.arch import ArchSpec
from tilewright.cocotb_tests.bench_io import (read_words, reset, start_and_measure, start_clock,
                                              write_words)
from tilewright.cosim.gemm_commands import GemmCommand
from tilewright.cosim.job import computed, gemm_tasks, load_job, save_results


class GemmCoreDriver:
    """Host-side driver of the core's ports (the timing contract in ``rtl/gemm_core.py``)."""

    def __init__(self, dut, arch: ArchSpec):
        self.dut, self.arch = dut, arch
        self.last_run_seconds = 0.0   #: wall time of the last GEMM's busy period (s)

    async def gemm(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
        """``a @ b`` on the core (int8 x int8 -> int32); return (C, cycles)."""
        cmd = GemmCommand.from_operands(self.arch, a, b)   # the encoding the fast driver uses
        lay, d = cmd.layout, self.dut
        await write_words(d.clk, d.a_wr_en, d.a_wr_addr, d.a_wr_data, cmd.a_words)
        await write_words(d.clk, d.b_wr_en, d.b_wr_addr, d.b_wr_data, cmd.b_words)
        t0 = time.perf_counter()
        d.m.value, d.k.value, d.n.value = lay.m, lay.k, lay.n
        cycles = await start_and_measure(d, "core")
        self.last_run_seconds = time.perf_counter() - t0
        lat = self.arch.tensor_engine.pipeline.host_read_latency
        words = await read_words(d.clk, d.acc_rd_addr, d.acc_rd_data, cmd.acc_words, lat,
                                 d.acc_rd_en if lat > 1 else None)
        return cmd.c_from_words(words), cycles


@cocotb.test()
async def run_job(dut):
    """Execute the job folder's Program; GEMMs on the RTL."""
    job = load_job()
    start_clock(dut)
    drv = GemmCoreDriver(dut, job.arch)
    await reset(dut, dut.a_wr_en, dut.b_wr_en, dut.start)
    env = job.env
    records = []
    for task in gemm_tasks(job, env):
        c, cycles = await drv.gemm(env[task.a], env[task.b])
        env[task.out] = c
        records.append({"task": task.name, "m": task.m, "k": task.k, "n": task.n,
                        "cycles": cycles, "run_seconds": drv.last_run_seconds})
    save_results(job, computed(job.program, job.inputs, env), cycles=records)
