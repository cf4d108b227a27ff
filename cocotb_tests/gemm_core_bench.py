"""cocotb 2.x bench: runs a Program on the Verilated GEMM core, GEMM tasks in RTL.

This module is loaded *inside the simulator process* by cocotb. It reads a job folder (path in
``$TILEWRIGHT_JOB``): ``arch.yaml``, ``program/`` (a saved Program) and ``inputs.npz``; it runs
every task in order — GEMM tasks on the RTL (buffers filled through the write ports, ``start``
pulsed, C read back; encoding shared with the C++ fast driver in
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
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge
from cocotb.utils import get_sim_time

from tilewright.arch import ArchSpec
from tilewright.cosim.bench_util import gemm_tasks, load_program_job, save_outputs
from tilewright.cosim.gemm_commands import GemmCommand

CLOCK_PERIOD_NS = 10


class GemmCoreDriver:
    """Host-side driver of the core's ports (the timing contract in ``rtl/gemm_core.py``)."""

    def __init__(self, dut, arch: ArchSpec):
        self.dut, self.arch = dut, arch
        self.clk = dut.clk
        self.last_run_seconds = 0.0   #: wall time of the last GEMM's busy period (s)

    async def reset(self) -> None:
        d = self.dut
        for sig in (d.a_wr_en, d.b_wr_en, d.start):
            sig.value = 0
        d.rst.value = 1
        for _ in range(3):
            await FallingEdge(self.clk)
        d.rst.value = 0
        await FallingEdge(self.clk)

    async def _write(self, en, addr, data, words: list[int]) -> None:
        for i, w in enumerate(words):
            en.value, addr.value, data.value = 1, i, w
            await FallingEdge(self.clk)
        en.value = 0

    async def _read_acc(self, count: int) -> list[int]:
        """Read ``count`` accumulator words (address at one falling edge, data at the next)."""
        d, out = self.dut, []
        d.acc_rd_addr.value = 0
        await FallingEdge(self.clk)
        for i in range(count):
            out.append(int(d.acc_rd_data.value))
            d.acc_rd_addr.value = min(i + 1, count - 1)
            await FallingEdge(self.clk)
        return out

    async def run(self, m: int, k: int, n: int) -> int:
        """Start one GEMM and wait for it; return its cycles (both measurements asserted equal)."""
        d = self.dut
        d.m.value, d.k.value, d.n.value, d.start.value = m, k, n, 1
        await RisingEdge(self.clk)
        t_start = get_sim_time("ns")
        await FallingEdge(self.clk)
        d.start.value = 0
        assert int(d.busy.value) == 1, "core did not go busy after start"
        await FallingEdge(d.busy)
        t_end = get_sim_time("ns")
        by_time = round((t_end - t_start) / CLOCK_PERIOD_NS)
        await FallingEdge(self.clk)
        by_counter = int(d.cycles.value)
        assert by_time == by_counter, f"cycle counter {by_counter} != measured {by_time}"
        return by_counter

    async def gemm(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
        """``a @ b`` on the core (int8 x int8 -> int32); return (C, cycles)."""
        cmd = GemmCommand.from_operands(self.arch, a, b)   # the encoding the fast driver uses
        lay, d = cmd.layout, self.dut
        await self._write(d.a_wr_en, d.a_wr_addr, d.a_wr_data, cmd.a_words)
        await self._write(d.b_wr_en, d.b_wr_addr, d.b_wr_data, cmd.b_words)
        t0 = time.perf_counter()
        cycles = await self.run(lay.m, lay.k, lay.n)
        self.last_run_seconds = time.perf_counter() - t0
        words = await self._read_acc(cmd.acc_words)
        return cmd.c_from_words(words), cycles


@cocotb.test()
async def run_job(dut):
    """Execute the job folder's Program; GEMMs on the RTL."""
    job = load_program_job()
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    drv = GemmCoreDriver(dut, job.arch)
    await drv.reset()
    env = job.env
    records = []
    for task in gemm_tasks(job, env):
        c, cycles = await drv.gemm(env[task.a], env[task.b])
        env[task.out] = c
        records.append({"task": task.name, "m": task.m, "k": task.k, "n": task.n,
                        "cycles": cycles, "run_seconds": drv.last_run_seconds})
    save_outputs(job, env, cycles=records)
