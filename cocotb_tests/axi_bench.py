"""cocotb 2.x bench: runs a Program on the Verilated ``tw_axi_gemm_top`` through its AXI4-Lite port.

Loaded *inside the simulator process* by cocotb. The job folder (path in ``$TILEWRIGHT_JOB``) holds
``arch.yaml``, ``program/`` (a saved Program), ``inputs.npz`` and ``job.json``:

* ``pause_seed`` (int or null): when set, every AXI channel of cocotbext-axi's ``AxiLiteMaster``
  gets a seeded random pause generator (valid/ready deasserted at random), so AW and W reach the
  top in either order and B/R see back-pressure;
* ``probes``: groups of raw accesses ``{"op": "read"|"write", "addr": int, "data": int}`` run
  after the Program; the accesses of one group are issued concurrently.

Every GEMM task goes over the bus as a CPU would drive it: A and B buffer windows written
(:class:`tilewright.rtl.axi_gemm_top.AxiGemmMap`; buffer words from
:class:`tilewright.cosim.gemm_commands.GemmCommand`), M/K/N written, CTRL.START, wait for ``irq``,
STATUS checked (DONE set, BUSY clear), CYCLES read, the accumulator window read back. Every access
of a GEMM must answer OKAY. Vector tasks run on the functional model's vector ops. Results:
``outputs.npz`` (every computed tensor), ``cycles.json`` (per GEMM: task, m, k, n, cycles by the
CYCLES register, bus_cycles from the first buffer write to the last accumulator read) and
``probes.json`` (per probe: resp, data).
"""

from __future__ import annotations

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, RisingEdge
from cocotb.utils import get_sim_time

from tilewright.arch import ArchSpec
from tilewright.cocotb_tests.bench_io import CLOCK_PERIOD_NS, start_clock
from tilewright.cocotb_tests.axil_host import AxiLiteHost
from tilewright.cosim.job import computed, gemm_tasks, load_job, save_results
from tilewright.cosim.gemm_commands import GemmCommand
from tilewright.rtl.axi_gemm_top import AxiGemmMap

#: STATUS bits
BUSY, DONE = 1, 2


class AxiGemmDriver(AxiLiteHost):
    """A CPU's view of the top: register and window accesses through cocotbext-axi (pauses on
    every channel of the AXI4-Lite master when ``pause_seed`` is set)."""

    def __init__(self, dut, arch: ArchSpec, pause_seed: int | None = None):
        super().__init__(dut, AxiGemmMap.for_arch(arch), pause_seed)
        self.arch = arch

    # ---- windows --------------------------------------------------------------------------
    async def write_buffer(self, buf: str, lanes: np.ndarray) -> None:
        """Write (words, lanes) int8 ``lanes`` to buffer ``buf`` ("a"/"b") from word 0."""
        mp = self.map
        chunks, stride = mp.chunks(buf), mp.stride(buf)
        padded = np.zeros((lanes.shape[0], 4 * stride), np.int8)
        padded[:, :lanes.shape[1]] = lanes
        if chunks == stride:           # contiguous: one burst of single-beat writes
            await self.write(mp.base(buf), padded.tobytes())
        else:
            for w in range(lanes.shape[0]):
                await self.write(mp.addr(buf, w), padded[w, :4 * chunks].tobytes())

    async def read_acc(self, words: int) -> np.ndarray:
        """(words, cols) int32 lanes of accumulator words 0 .. words - 1."""
        mp = self.map
        chunks, stride = mp.chunks("acc"), mp.stride("acc")
        if chunks == stride:
            data = await self.read(mp.base("acc"), 4 * chunks * words)
        else:
            data = b"".join([await self.read(mp.addr("acc", w), 4 * chunks)
                             for w in range(words)])
        return np.frombuffer(data, "<i4").reshape(words, chunks).astype(np.int32)

    async def gemm(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int, int]:
        """``a @ b`` through the bus; return (C, CYCLES register, bus cycles of the whole job)."""
        cmd = GemmCommand.from_operands(self.arch, a, b)
        lay = cmd.layout
        t0 = get_sim_time("ns")
        await self.write_buffer("a", cmd.a_lanes)
        await self.write_buffer("b", cmd.b_lanes)
        for name, value in (("M", lay.m), ("K", lay.k), ("N", lay.n)):
            await self.write_reg(name, value)
        await self.write_reg("CTRL", 1)
        if not int(self.dut.irq.value):
            await RisingEdge(self.dut.irq)
        status = await self.read_reg("STATUS")
        assert status & (BUSY | DONE) == DONE, f"STATUS {status:#x} after irq: expected DONE only"
        cycles = await self.read_reg("CYCLES")
        c = cmd.c_from_lanes(await self.read_acc(cmd.acc_words))
        await FallingEdge(self.dut.clk)
        return c, cycles, round((get_sim_time("ns") - t0) / CLOCK_PERIOD_NS)


@cocotb.test()
async def run_job(dut):
    """Execute the job folder's Program through the AXI4-Lite port, then its probes."""
    job = load_job()
    spec = job.spec
    start_clock(dut)
    drv = AxiGemmDriver(dut, job.arch, spec.get("pause_seed"))
    await drv.reset()
    env = job.env
    records = []
    for task in gemm_tasks(job, env):
        c, cycles, bus_cycles = await drv.gemm(env[task.a], env[task.b])
        env[task.out] = c
        records.append({"task": task.name, "m": task.m, "k": task.k, "n": task.n,
                        "cycles": cycles, "bus_cycles": bus_cycles})
    probes = await drv.probe_groups(spec.get("probes", []))
    save_results(job, computed(job.program, job.inputs, env), cycles=records, probes=probes)
