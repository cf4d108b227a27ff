"""cocotb 2.x bench for the RTL mesh: load SRAMs and phase programs, run, read back, count cycles.

Loaded *inside the simulator process* by cocotb. Reads ``job.json`` from the folder in
``$TILEWRIGHT_JOB`` (written by :func:`tilewright.cosim.mesh_jobs.prepare_mesh`): ``jobs``, a
list of jobs, each with ``loads`` ([tile, word address, [words]]), ``instrs`` (per tile, one int per
phase), ``n_phases`` and ``reads`` (name -> [[tile, address, words]]). For each job it writes
the loads and instructions through the host ports, pulses ``start``, waits for ``busy`` to drop
and reads the regions back; it writes ``results.json`` (per job: ``cycles``, the words read and
``arrivals``: every flit a router delivered to its tile, as [cycle, tile, ejection lane], from
the mesh's ``ej_seen`` observation port sampled each busy cycle; cycle = the ``cycles`` counter).

Cycle convention: the cycles ``busy`` is high, measured from simulation time (rising edge that
samples ``start`` to the one that drops ``busy``) and by the mesh's ``cycles`` counter; the bench
asserts both agree. Signals are driven and sampled on the falling clock edge.
"""

from __future__ import annotations


import cocotb
from cocotb.triggers import FallingEdge

from tilewright.cocotb_tests.bench_io import reset, start_and_measure, start_clock
from tilewright.cosim.job import load_job, save_results


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


async def _watch(dut, arrivals: list, stop: list) -> None:
    """Record [cycle, tile, lane] for every set bit of ``ej_seen`` while the mesh is busy."""
    while not stop:
        await FallingEdge(dut.clk)
        if int(dut.busy.value):
            seen = int(dut.ej_seen.value)
            if seen:
                cyc = int(dut.cycles.value)
                arrivals += [[cyc, b // 2, b % 2] for b in range(seen.bit_length())
                             if seen >> b & 1]


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
    """Run every job of ``job.json`` on the mesh."""
    job = load_job()
    start_clock(dut)
    await reset(dut, dut.ld_we, dut.im_we, dut.start)
    results = []
    for mesh_job in job.spec["jobs"]:
        await _load(dut, mesh_job)
        dut.n_phases.value = mesh_job["n_phases"]
        arrivals, stop = [], []
        watcher = cocotb.start_soon(_watch(dut, arrivals, stop))
        cycles = await start_and_measure(dut, "mesh")
        stop.append(True)
        await watcher
        reads = {name: [await _read(dut, *reg) for reg in regs]
                 for name, regs in mesh_job["reads"].items()}
        results.append({"cycles": cycles, "reads": reads, "arrivals": sorted(arrivals)})
    save_results(job, results=results)
