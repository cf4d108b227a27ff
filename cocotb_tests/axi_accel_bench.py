"""cocotb 2.x bench: a Program on the Verilated ``tw_axi_accel_top``, driven only through its buses.

Loaded *inside the simulator process* by cocotb. The job folder (``$TILEWRIGHT_JOB``) holds
``arch.yaml``, ``program/`` (a saved Program), ``inputs.npz`` and ``job.json``:

* ``raw_runs``: runs after the Program, each ``{"words": {index: word}, "entry": int}`` —
  instruction words written through the window, then START at ``entry`` (how a bad instruction
  is tested);
* ``probes``: groups of raw AXI4-Lite accesses ``{"op": "read"|"write", "addr", "data"}`` run
  last; the accesses of one group are issued concurrently;
* ``pause_seed`` (int or null): when set, every channel of the AxiRam gets a seeded random pause
  generator (AWREADY/WREADY/ARREADY low and BVALID/RVALID held back at random), so the top must
  cope with back-pressure and late data (its cycles then exceed the always-ready model).

The CPU flow, with cocotbext-axi: an ``AxiLiteMaster`` on ``s_axil`` and an ``AxiRam`` on
``m_axi`` as the external memory. The bench writes IRQ_EN, writes every instruction word of
:func:`tilewright.compiler.codegen.codegen` through the instruction-memory window, and for each
``gemm`` task writes the segment's image (A and B blocks, :meth:`IsaProgram.image`) into the
AxiRam, writes ENTRY and CTRL.START, waits for ``irq``, checks STATUS (DONE only), reads CYCLES
and RETIRED, clears DONE (``irq`` must drop) and reads C back from the AxiRam. Other tasks run
on the functional model. A monitor counts AXI4 handshakes per run (AR/AW bursts, R/W beats).
Results: ``outputs.npz``, ``cycles.json`` (per segment), ``raw_runs.json``, ``probes.json``.
"""

from __future__ import annotations

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, RisingEdge, with_timeout
from cocotbext.axi import AxiBus, AxiRam

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import codegen
from tilewright.cocotb_tests.bench_io import CLOCK_PERIOD_NS, start_clock
from tilewright.cocotb_tests.axil_host import AxiLiteHost, add_random_pauses, channels, quiet
from tilewright.cosim.job import computed, gemm_tasks, load_job, save_results
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.rtl.axi_accel_top import IMEM_BASE, STATUS_BITS, AxiAccelMap

BUSY, DONE = 1 << STATUS_BITS["BUSY"], 1 << STATUS_BITS["DONE"]


class AxiCounter:
    """Counts AXI4 handshakes on ``m_axi`` (sampled at each rising edge)."""

    NAMES = ("ar", "aw", "r", "w", "b")

    def __init__(self, dut):
        self.dut = dut
        self.counts = dict.fromkeys(self.NAMES, 0)

    async def run(self) -> None:
        d = self.dut
        sigs = {n: (getattr(d, f"m_axi_{n}valid"), getattr(d, f"m_axi_{n}ready"))
                for n in self.NAMES}
        while True:
            await RisingEdge(d.clk)
            for n, (v, r) in sigs.items():
                if int(v.value) and int(r.value):
                    self.counts[n] += 1

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


class AxiAccelDriver(AxiLiteHost):
    """A CPU's view of the top: AXI4-Lite accesses; the AxiRam is the shared memory (pauses on
    every channel of the AxiRam when ``pause_seed`` is set; the AXI4-Lite master never
    pauses)."""

    def __init__(self, dut, arch: ArchSpec, pause_seed: int | None = None):
        super().__init__(dut, AxiAccelMap.for_arch(arch))
        self.arch, self.w = arch, self.map.data_bytes
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                          size=1 << self.map.axi_addr_width)
        quiet(self.ram.write_if, self.ram.read_if)
        if pause_seed is not None:
            add_random_pauses(channels(self.ram), pause_seed)

    async def load_words(self, words: dict[int, int]) -> None:
        """Write instruction words (index -> 64-bit word) through the window; a run of
        consecutive indices is one multi-beat write (low half before high half)."""
        idx = sorted(words)
        start = 0
        while start < len(idx):
            end = start
            while end + 1 < len(idx) and idx[end + 1] == idx[end] + 1:
                end += 1
            blob = b"".join(int(words[i]).to_bytes(8, "little") for i in idx[start:end + 1])
            await self.write(IMEM_BASE + 8 * idx[start], blob)
            start = end + 1

    # ---- the external memory (W-byte words) --------------------------------------------------
    def mem_write(self, image: dict[int, int]) -> None:
        for addr, value in image.items():
            self.ram.write(addr * self.w, int(value).to_bytes(self.w, "little"))

    def mem_read(self, addr: int, count: int) -> list[int]:
        data = self.ram.read(addr * self.w, count * self.w)
        return [int.from_bytes(data[i * self.w:(i + 1) * self.w], "little")
                for i in range(count)]

    async def run(self, entry: int, watchdog_cycles: int) -> dict:
        """ENTRY, START, wait for ``irq``; return STATUS, CYCLES, RETIRED, PC; clear DONE."""
        await self.write_reg("ENTRY", entry)
        await self.write_reg("CTRL", 1)
        if not int(self.dut.irq.value):
            await with_timeout(RisingEdge(self.dut.irq), watchdog_cycles * CLOCK_PERIOD_NS, "ns")
        rec = {"status": await self.read_reg("STATUS"), "cycles": await self.read_reg("CYCLES"),
               "retired": await self.read_reg("RETIRED"), "pc": await self.read_reg("PC")}
        await self.write_reg("STATUS", DONE)
        await FallingEdge(self.dut.clk)
        assert int(self.dut.irq.value) == 0, "irq still high after DONE was cleared"
        return rec


@cocotb.test()
async def run_job(dut):
    """Execute the job folder's Program through the AXI ports, then its raw runs and probes."""
    job = load_job()
    arch, spec = job.arch, job.spec
    isa = codegen(job.program, arch)
    start_clock(dut)
    drv = AxiAccelDriver(dut, arch, spec.get("pause_seed"))
    counter = AxiCounter(dut)
    await drv.reset()
    cocotb.start_soon(counter.run())
    await drv.write_reg("IRQ_EN", 1)
    await drv.load_words(dict(enumerate(isa.words)))
    env = job.env
    records = []
    for task in gemm_tasks(job, env):
        seg = isa.segment(task.name)
        drv.mem_write(isa.image(arch, seg, np.asarray(env[task.a]), np.asarray(env[task.b])))
        before = counter.snapshot()
        # watchdog only (a hang fails instead of running forever)
        rec = await drv.run(seg.entry, 4 * predict_segment(isa, seg, arch).cycles + 10_000)
        after = counter.snapshot()
        assert rec["status"] == DONE, \
            f"task {task.name}: STATUS {rec['status']:#x} after irq, expected DONE only"
        rec.update(task=task.name, m=task.m, k=task.k, n=task.n, tiles=len(seg.tiles),
                   **{f"axi_{n}": after[n] - before[n] for n in AxiCounter.NAMES})
        env[task.out] = isa.c_result(arch, seg, drv.mem_read)
        records.append(rec)
    raw = []
    for run in spec.get("raw_runs", []):
        await drv.load_words({int(i): int(w) for i, w in run["words"].items()})
        raw.append(await drv.run(int(run["entry"]), 10_000))
    probes = await drv.probe_groups(spec.get("probes", []))
    save_results(job, computed(job.program, job.inputs, env), cycles=records, raw_runs=raw,
                 probes=probes)
