"""cocotb 2.x bench: runs a Program on the Verilated accelerator top through its external memory.

Loaded *inside the simulator process* by cocotb. It reads a job folder (``$TILEWRIGHT_JOB``):
``arch.yaml``, ``program/`` (a saved Program) and ``inputs.npz``. It compiles the Program with
:func:`tilewright.compiler.codegen.codegen`, loads the instruction words through the control port
and runs every task in order: for a ``gemm`` task it writes the task's A/B blocks (the memory
image of its segment) into the external-memory model, starts the controller at the segment's
entry, waits for ``done`` and reads C back from the external memory; other tasks run on the
functional model. It writes ``outputs.npz`` and ``cycles.json`` (per segment: cycles by the top's
counter, which the bench asserts equal to the simulation time from ``start`` to ``busy`` low,
and instructions retired).

External-memory model (:class:`ExtMemory`): always ready; a read request seen in cycle ``x``
returns beat ``j`` in cycle ``x + L + j`` (``L = memory_latency_cycles(arch)``), one W-byte beat
per cycle; write beats are stored as they arrive (posted). Signals are driven and sampled on the
falling clock edge.
"""

from __future__ import annotations

import time
from collections import deque

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge, with_timeout
from cocotb.utils import get_sim_time

from tilewright.compiler.codegen import codegen, memory_latency_cycles
from tilewright.cosim.bench_util import gemm_tasks, load_program_job, save_outputs
from tilewright.dataflow_sim.accel_timing import predict_segment

CLOCK_PERIOD_NS = 10


class ExtMemory:
    """The external memory behind the DMA port (see module docstring); words are W-byte ints."""

    def __init__(self, dut, latency: int):
        if latency < 1:
            raise ValueError(f"memory latency {latency} cycles: must be at least 1")
        self.dut, self.latency = dut, latency
        self.words: dict[int, int] = {}
        self.reads = 0          #: read beats served
        self.writes = 0         #: write beats stored

    def read(self, addr: int, count: int) -> list[int]:
        return [self.words.get(addr + i, 0) for i in range(count)]

    async def serve(self) -> None:
        d = self.dut
        d.mem_req_ready.value, d.mem_wr_ready.value, d.mem_rd_valid.value = 1, 1, 0
        pending: deque[tuple[int, int]] = deque()    # (cycle due, address) of read beats
        cycle, wr_addr = 0, None
        while True:
            await FallingEdge(d.clk)
            cycle += 1
            if int(d.mem_req_valid.value):
                addr, n = int(d.mem_req_addr.value), int(d.mem_req_len.value)
                if int(d.mem_req_write.value):
                    wr_addr = addr
                else:
                    start = max(cycle + self.latency, pending[-1][0] + 1 if pending else 0)
                    pending.extend((start + j, addr + j) for j in range(n))
            if int(d.mem_wr_valid.value):
                assert wr_addr is not None, "write beat without a write request"
                self.words[wr_addr] = int(d.mem_wr_data.value)
                wr_addr += 1
                self.writes += 1
            if pending and pending[0][0] == cycle:
                assert int(d.mem_rd_ready.value), "DMA not ready for a read beat"
                _, addr = pending.popleft()
                d.mem_rd_data.value = self.words.get(addr, 0)
                d.mem_rd_valid.value = 1
                self.reads += 1
            else:
                d.mem_rd_valid.value = 0


class AccelDriver:
    """Host side of the control/status port."""

    def __init__(self, dut):
        self.dut = dut

    async def reset(self) -> None:
        d = self.dut
        d.imem_wr_en.value, d.start.value, d.entry.value = 0, 0, 0
        d.rst.value = 1
        for _ in range(3):
            await FallingEdge(d.clk)
        d.rst.value = 0
        await FallingEdge(d.clk)

    async def load_program(self, words) -> None:
        d = self.dut
        for i, w in enumerate(words):
            d.imem_wr_en.value, d.imem_wr_addr.value, d.imem_wr_data.value = 1, i, int(w)
            await FallingEdge(d.clk)
        d.imem_wr_en.value = 0

    async def run(self, entry: int, max_cycles: int) -> dict:
        """Start at ``entry``, wait for ``done`` (at most ``max_cycles``, a watchdog); return
        cycles (both measurements asserted equal), retired and error."""
        d = self.dut
        d.entry.value, d.start.value = entry, 1
        await RisingEdge(d.clk)
        t_start = get_sim_time("ns")
        await FallingEdge(d.clk)
        d.start.value = 0
        assert int(d.busy.value) == 1, "controller did not go busy after start"
        await with_timeout(FallingEdge(d.busy), max_cycles * CLOCK_PERIOD_NS, "ns")
        t_end = get_sim_time("ns")
        await FallingEdge(d.clk)
        by_time = round((t_end - t_start) / CLOCK_PERIOD_NS)
        by_counter = int(d.cycles.value)
        assert int(d.done.value) == 1, "busy dropped without done"
        assert by_time == by_counter, f"cycle counter {by_counter} != measured {by_time}"
        return {"cycles": by_counter, "retired": int(d.retired.value),
                "error": int(d.error.value), "pc": int(d.pc.value)}


@cocotb.test()
async def run_job(dut):
    """Execute the job folder's Program; GEMMs on the accelerator top."""
    job = load_program_job()
    arch = job.arch
    isa = codegen(job.program, arch)
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    drv = AccelDriver(dut)
    await drv.reset()
    mem = ExtMemory(dut, memory_latency_cycles(arch))
    cocotb.start_soon(mem.serve())
    await drv.load_program(isa.words)
    env = job.env
    records = []
    for task in gemm_tasks(job, env):
        seg = isa.segment(task.name)
        mem.words.update(isa.image(arch, seg, np.asarray(env[task.a]), np.asarray(env[task.b])))
        r0, w0 = mem.reads, mem.writes
        t0 = time.perf_counter()
        # watchdog only (a hang fails instead of running forever): 4x the model's cycles
        watchdog = 4 * predict_segment(isa, seg, arch).cycles + 10_000
        rec = await drv.run(seg.entry, watchdog)
        rec.update(task=task.name, m=task.m, k=task.k, n=task.n, tiles=len(seg.tiles),
                   read_beats=mem.reads - r0, write_beats=mem.writes - w0,
                   run_seconds=time.perf_counter() - t0)
        assert rec["error"] == 0, \
            f"task {task.name}: controller stopped with error at pc {rec['pc']}"
        env[task.out] = isa.c_result(arch, seg, mem.read)
        records.append(rec)
    save_outputs(job, env, cycles=records)
