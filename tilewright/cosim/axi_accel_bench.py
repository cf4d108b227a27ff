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

import json
import logging
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge, with_timeout
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam, AxiResp

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import codegen
from tilewright.compiler.program import GemmTask, Program
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.dataflow_sim.functional import run_vector
from tilewright.rtl.axi_accel_top import IMEM_BASE, STATUS_BITS, AxiAccelMap

CLOCK_PERIOD_NS = 10
BUSY, DONE = 1 << STATUS_BITS["BUSY"], 1 << STATUS_BITS["DONE"]


def _pauses(rng: random.Random):
    """Endless random pause pattern: pause about one cycle in three."""
    while True:
        yield rng.random() < 0.35


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


class AxiAccelDriver:
    """A CPU's view of the top: AXI4-Lite accesses; the AxiRam is the shared memory."""

    def __init__(self, dut, arch: ArchSpec, pause_seed: int | None = None):
        self.dut, self.arch, self.map = dut, arch, AxiAccelMap.for_arch(arch)
        self.w = self.map.data_bytes
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                          size=1 << self.map.axi_addr_width)
        for side in (self.axil.write_if, self.axil.read_if, self.ram.write_if,
                     self.ram.read_if):       # one INFO line per access otherwise
            side.log.setLevel(logging.WARNING)
        if pause_seed is not None:
            rng = random.Random(pause_seed)
            for ch in (self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                       self.ram.write_if.b_channel, self.ram.read_if.ar_channel,
                       self.ram.read_if.r_channel):
                ch.set_pause_generator(_pauses(random.Random(rng.random())))

    async def reset(self) -> None:
        self.dut.rst.value = 1
        for _ in range(3):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def write(self, addr: int, data: bytes) -> None:
        resp = await self.axil.write(addr, data)
        assert resp.resp == AxiResp.OKAY, f"write at {addr:#x}: {resp.resp!r}"

    async def write_reg(self, name: str, value: int) -> None:
        await self.write(self.map.reg(name), int(value).to_bytes(4, "little"))

    async def read_reg(self, name: str) -> int:
        resp = await self.axil.read(self.map.reg(name), 4)
        assert resp.resp == AxiResp.OKAY, f"read of {name}: {resp.resp!r}"
        return int.from_bytes(resp.data, "little")

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

    async def probe(self, access: dict) -> dict:
        """One raw access; its response code and (reads) data."""
        if access["op"] == "write":
            r = await self.axil.write(access["addr"], int(access["data"]).to_bytes(4, "little"))
            return {"resp": int(r.resp), "data": None}
        r = await self.axil.read(access["addr"], 4)
        return {"resp": int(r.resp), "data": int.from_bytes(r.data, "little")}


@cocotb.test()
async def run_job(dut):
    """Execute the job folder's Program through the AXI ports, then its raw runs and probes."""
    job = Path(os.environ["TILEWRIGHT_JOB"])
    arch = ArchSpec.from_yaml((job / "arch.yaml").read_text(), source=str(job / "arch.yaml"))
    program = Program.load(job / "program")
    spec = json.loads((job / "job.json").read_text())
    with np.load(job / "inputs.npz") as npz:
        inputs = {k: npz[k] for k in npz.files}
    isa = codegen(program, arch)
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    drv = AxiAccelDriver(dut, arch, spec.get("pause_seed"))
    counter = AxiCounter(dut)
    await drv.reset()
    cocotb.start_soon(counter.run())
    await drv.write_reg("IRQ_EN", 1)
    await drv.load_words(dict(enumerate(isa.words)))
    env = {**program.constants, **inputs}
    records = []
    for task in program.tasks:
        if not isinstance(task, GemmTask):
            env[task.out] = run_vector(task, env)
            continue
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
    probes = []
    for group in spec.get("probes", []):
        tasks = [cocotb.start_soon(drv.probe(acc)) for acc in group]
        probes.append([await t for t in tasks])
    computed = {k: v for k, v in env.items() if k not in program.constants and k not in inputs}
    np.savez(job / "outputs.npz", **computed)
    (job / "cycles.json").write_text(json.dumps(records, indent=1))
    (job / "raw_runs.json").write_text(json.dumps(raw, indent=1))
    (job / "probes.json").write_text(json.dumps(probes, indent=1))
