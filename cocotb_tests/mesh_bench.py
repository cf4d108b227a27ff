"""cocotb 2.x bench for the RTL mesh: load SRAMs and phase programs, run, read back, count cycles.

Loaded *inside the simulator process* by cocotb. Reads ``jobs.json`` from the folder in
``$TILEWRIGHT_JOB`` (written by :func:`tilewright.cosim.mesh_run.run_mesh_jobs`): a list of
jobs, each with ``loads`` ([tile, word address, [words]]), ``instrs`` (per tile, one int per
phase), ``n_phases`` and ``reads`` (name -> [[tile, address, words]]). For each job it writes
the loads and instructions through the host ports, pulses ``start``, waits for ``busy`` to drop
and reads the regions back; it writes ``results.json`` (per job: ``cycles`` and the words read).

Cycle convention: the cycles ``busy`` is high, measured from simulation time (rising edge that
samples ``start`` to the one that drops ``busy``) and by the mesh's ``cycles`` counter; the bench
asserts both agree. Signals are driven and sampled on the falling clock edge.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge
from cocotb.utils import get_sim_time

CLOCK_PERIOD_NS = 10


async def _reset(dut) -> None:
    for sig in (dut.ld_we, dut.im_we, dut.start):
        sig.value = 0
    dut.rst.value = 1
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    await FallingEdge(dut.clk)


async def _load(dut, job: dict) -> None:
    for t, base, words in job["loads"]:
        dut.ld_tile.value = t
        for i, w in enumerate(words):
            dut.ld_addr.value, dut.ld_data.value, dut.ld_we.value = base + i, w, 1
            await FallingEdge(dut.clk)
        dut.ld_we.value = 0
    for t, words in enumerate(job["instrs"]):
        dut.ld_tile.value = t
        for p, w in enumerate(words):
            dut.im_addr.value, dut.im_data.value, dut.im_we.value = p, w, 1
            await FallingEdge(dut.clk)
        dut.im_we.value = 0
    await FallingEdge(dut.clk)


async def _run(dut, n_phases: int) -> int:
    dut.n_phases.value, dut.start.value = n_phases, 1
    await RisingEdge(dut.clk)
    t_start = get_sim_time("ns")
    await FallingEdge(dut.clk)
    dut.start.value = 0
    assert int(dut.busy.value) == 1, "mesh did not go busy after start"
    await FallingEdge(dut.busy)
    by_time = round((get_sim_time("ns") - t_start) / CLOCK_PERIOD_NS)
    await FallingEdge(dut.clk)
    by_counter = int(dut.cycles.value)
    assert by_time == by_counter, f"cycle counter {by_counter} != measured {by_time}"
    return by_counter


async def _read(dut, tile: int, base: int, count: int) -> list[int]:
    out = []
    dut.rd_tile.value = tile
    for i in range(count):
        dut.rd_addr.value = base + i
        await FallingEdge(dut.clk)
        out.append(int(dut.rd_data.value))
    return out


@cocotb.test()
async def run_mesh_jobs(dut):
    """Run every job of ``jobs.json`` on the mesh."""
    folder = Path(os.environ["TILEWRIGHT_JOB"])
    jobs = json.loads((folder / "jobs.json").read_text())
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    await _reset(dut)
    results = []
    for job in jobs:
        await _load(dut, job)
        cycles = await _run(dut, job["n_phases"])
        reads = {name: [await _read(dut, *reg) for reg in regs]
                 for name, regs in job["reads"].items()}
        results.append({"cycles": cycles, "reads": reads})
    (folder / "results.json").write_text(json.dumps(results))
