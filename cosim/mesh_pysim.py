"""Run a :class:`~tilewright.compiler.mesh_codegen.MeshJob` on the RTL mesh in Amaranth's own
Python simulator — no Verilator build; for tiny meshes and unit tests (about 10^3 cycles/s).

The testbench drives the same host ports, with the same protocol, as the cocotb bench
(:mod:`tilewright.cocotb_tests.mesh_bench`), and measures the busy cycles twice: by counting clock
ticks while ``busy`` is high and by the mesh's ``cycles`` counter (asserted equal).
"""

from __future__ import annotations

from amaranth.sim import Simulator

from tilewright.arch import ArchSpec
from tilewright.compiler.mesh_codegen import MeshJob
from tilewright.rtl.mesh import Mesh

__all__ = ["run_mesh_job_pysim"]


def run_mesh_job_pysim(arch: ArchSpec, job: MeshJob) -> dict:
    """Simulate ``job`` on the mesh of ``arch``; returns ``{"cycles", "reads", "arrivals"}``
    like the ``mesh`` top's run (:func:`tilewright.cosim.sim.run`) records per job
    (``arrivals``: sorted (cycle, tile, ejection lane) of every flit delivered, from the
    ``ej_seen`` port; cycle = the ``cycles`` counter then)."""
    dut = Mesh(arch, imem_depth=max(2, job.n_phases))
    out: dict = {}

    async def bench(ctx):
        for t, base, words in job.loads:
            ctx.set(dut.ld_tile, t)
            for i, w in enumerate(words):
                ctx.set(dut.ld_addr, base + i)
                ctx.set(dut.ld_data, int(w))
                ctx.set(dut.ld_we, 1)
                await ctx.tick()
        ctx.set(dut.ld_we, 0)
        for t, words in enumerate(job.instrs):
            ctx.set(dut.ld_tile, t)
            for ph, w in enumerate(words):
                ctx.set(dut.im_addr, ph)
                ctx.set(dut.im_data, int(w))
                ctx.set(dut.im_we, 1)
                await ctx.tick()
        ctx.set(dut.im_we, 0)
        ctx.set(dut.n_phases, job.n_phases)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ticks, arrivals, lanes = 0, [], 2
        while ctx.get(dut.busy):
            seen = ctx.get(dut.ej_seen)
            if seen:
                cyc = ctx.get(dut.cycles)
                arrivals += [(cyc, b // lanes, b % lanes) for b in range(seen.bit_length())
                             if seen >> b & 1]
            await ctx.tick()
            ticks += 1
        counter = ctx.get(dut.cycles)
        assert counter == ticks, f"cycle counter {counter} != {ticks} ticks while busy"
        reads = {}
        for name, regs in job.reads.items():
            reads[name] = []
            for t, base, count in regs:
                ctx.set(dut.rd_tile, t)
                words = []
                for i in range(count):
                    ctx.set(dut.rd_addr, base + i)
                    words.append(ctx.get(dut.rd_data))
                reads[name].append(words)
        out.update(cycles=ticks, reads=reads, arrivals=sorted(arrivals))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out
