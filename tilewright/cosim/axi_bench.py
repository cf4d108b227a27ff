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

import json
import logging
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiResp

from tilewright.arch import ArchSpec
from tilewright.compiler.program import GemmTask, Program
from tilewright.cosim.gemm_commands import GemmCommand
from tilewright.dataflow_sim.functional import run_vector
from tilewright.rtl.axi_gemm_top import AxiGemmMap

CLOCK_PERIOD_NS = 10
#: STATUS bits
BUSY, DONE = 1, 2


def _pauses(rng: random.Random):
    """Endless random pause pattern: pause about one cycle in three."""
    while True:
        yield rng.random() < 0.35


class AxiGemmDriver:
    """A CPU's view of the top: register and window accesses through cocotbext-axi."""

    def __init__(self, dut, arch: ArchSpec, pause_seed: int | None = None):
        self.dut, self.arch, self.map = dut, arch, AxiGemmMap.for_arch(arch)
        self.axi = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        for side in (self.axi.write_if, self.axi.read_if):   # one INFO line per access is
            side.log.setLevel(logging.WARNING)               # most of the run time otherwise
        if pause_seed is not None:
            rng = random.Random(pause_seed)
            for ch in (self.axi.write_if.aw_channel, self.axi.write_if.w_channel,
                       self.axi.write_if.b_channel, self.axi.read_if.ar_channel,
                       self.axi.read_if.r_channel):
                ch.set_pause_generator(_pauses(random.Random(rng.random())))

    async def reset(self) -> None:
        self.dut.rst.value = 1
        for _ in range(3):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    # ---- raw accesses -------------------------------------------------------------------
    async def write(self, addr: int, data: bytes) -> None:
        resp = await self.axi.write(addr, data)
        assert resp.resp == AxiResp.OKAY, f"write at {addr:#x}: {resp.resp!r}"

    async def read(self, addr: int, length: int) -> bytes:
        resp = await self.axi.read(addr, length)
        assert resp.resp == AxiResp.OKAY, f"read at {addr:#x}: {resp.resp!r}"
        return resp.data

    async def write_reg(self, name: str, value: int) -> None:
        await self.write(self.map.reg(name), int(value).to_bytes(4, "little"))

    async def read_reg(self, name: str) -> int:
        return int.from_bytes(await self.read(self.map.reg(name), 4), "little")

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

    async def probe(self, access: dict) -> dict:
        """One raw access; returns its response code and (reads) data."""
        if access["op"] == "write":
            r = await self.axi.write(access["addr"], int(access["data"]).to_bytes(4, "little"))
            return {"resp": int(r.resp), "data": None}
        r = await self.axi.read(access["addr"], 4)
        return {"resp": int(r.resp), "data": int.from_bytes(r.data, "little")}


@cocotb.test()
async def run_job(dut):
    """Execute the job folder's Program through the AXI4-Lite port, then its probes."""
    job = Path(os.environ["TILEWRIGHT_JOB"])
    arch = ArchSpec.from_yaml((job / "arch.yaml").read_text(), source=str(job / "arch.yaml"))
    program = Program.load(job / "program")
    spec = json.loads((job / "job.json").read_text())
    with np.load(job / "inputs.npz") as npz:
        inputs = {k: npz[k] for k in npz.files}
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    drv = AxiGemmDriver(dut, arch, spec.get("pause_seed"))
    await drv.reset()
    env = {**program.constants, **inputs}
    records = []
    for task in program.tasks:
        if isinstance(task, GemmTask):
            c, cycles, bus_cycles = await drv.gemm(env[task.a], env[task.b])
            env[task.out] = c
            records.append({"task": task.name, "m": task.m, "k": task.k, "n": task.n,
                            "cycles": cycles, "bus_cycles": bus_cycles})
        else:
            env[task.out] = run_vector(task, env)
    probes = []
    for group in spec.get("probes", []):
        tasks = [cocotb.start_soon(drv.probe(acc)) for acc in group]
        probes.append([await t for t in tasks])
    computed = {k: v for k, v in env.items() if k not in program.constants and k not in inputs}
    np.savez(job / "outputs.npz", **computed)
    (job / "cycles.json").write_text(json.dumps(records, indent=1))
    (job / "probes.json").write_text(json.dumps(probes, indent=1))
