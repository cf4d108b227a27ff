"""cocotb 2.x bench: runs a Program, or vector kernels, on the Verilated accelerator top through its
external memory.

Loaded *inside the simulator process* by cocotb. It reads a job folder (``$TILEWRIGHT_JOB``):
``arch.yaml``, ``job.json`` and either ``program/`` (a saved Program) and ``inputs.npz``, or
(``job.json`` has ``kernels``) vector kernels.

Program: it compiles the Program with
:func:`tilewright.compiler.codegen.codegen`, loads the instruction words through the control port
and runs every task in order: for a ``gemm`` task it writes the task's A/B blocks (the memory
image of its segment) into the external-memory model, starts the controller at the segment's
entry, waits for ``done`` and reads C back from the external memory; other tasks run on the
functional model. It writes ``outputs.npz`` and ``cycles.json`` (per segment: cycles by the top's
counter, which the bench asserts equal to the simulation time from ``start`` to ``busy`` low,
and instructions retired).

Kernels: ``job.json``'s ``kernels`` are batches of
:class:`~tilewright.compiler.vector_codegen.VectorKernel` (each batch's code fits the instruction
memory) and ``inputs.npz`` holds ``<kernel>_<i>``, raw Q8.8 operand ``i``. For each batch it
compiles the kernels with :func:`~tilewright.compiler.vector_codegen.codegen_vector` and loads the
code; for each kernel it writes its operands into the external-memory model, runs its segment
and reads the result back. It writes ``outputs.npz`` (``<kernel>``: raw result; a scan's final
state as ``<kernel>__state``) and ``cycles.json`` (per kernel: cycles, retired, read/write beats).

External-memory model (:class:`ExtMemory`): always ready; a read request seen in cycle ``x``
returns beat ``j`` in cycle ``x + L + j`` (``L = memory_latency_cycles(arch)``), one W-byte beat
per cycle; write beats are stored as they arrive (posted). Signals are driven and sampled on the
falling clock edge.

With ``timeline`` in ``job.json`` every record also carries ``events``: the run's timeline as the
C++ fast driver records it (:mod:`tilewright.cosim.accel_commands`) — (cycle, kind, value) for
each instruction issued (kind 0, value its address) and each change of ``gemm_busy``/``dma_busy``/
``vec_busy`` (kinds 1/2/3, value the new level), cycle 0 the one that samples ``start``; sampled
at each falling edge of the run (:func:`_timeline`).
"""

from __future__ import annotations

import time
from collections import deque

import cocotb
from cocotb.triggers import FallingEdge, RisingEdge

from tilewright.cocotb_tests.bench_io import reset, start_and_measure, start_clock
from tilewright.compiler.codegen import codegen, memory_latency_cycles
from tilewright.compiler.vector_codegen import PAIR_KINDS, VectorKernel, codegen_vector
from tilewright.cosim.job import (STATE_SUFFIX, Job, computed, gemm_tasks, load_job, operands,
                                  save_results)
from tilewright.dataflow_sim.accel_timing import predict_segment


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

    def __init__(self, dut, arch):
        self.dut, self.arch = dut, arch

    async def reset(self) -> None:
        d = self.dut
        await reset(d, d.imem_wr_en, d.start, d.entry, *((d.idx,) if self.has_idx else ()))

    @property
    def has_idx(self) -> bool:
        """The top has the index register input (``LOAD_VI``; tops with a vector unit)."""
        return self.arch.vector_unit is not None

    async def load_program(self, words) -> None:
        d = self.dut
        for i, w in enumerate(words):
            d.imem_wr_en.value, d.imem_wr_addr.value, d.imem_wr_data.value = 1, i, int(w)
            await FallingEdge(d.clk)
        d.imem_wr_en.value = 0

    async def run(self, entry: int, max_cycles: int, idx: int = 0,
                  timeline: bool = False) -> dict:
        """Start at ``entry`` with ``idx`` in the index register, wait for ``done`` (at most
        ``max_cycles``, a watchdog); return cycles (both measurements asserted equal), retired
        and error (with ``timeline`` also the run's ``events``, :func:`_timeline`)."""
        d = self.dut
        d.entry.value = entry
        if self.has_idx:
            d.idx.value = idx
        else:
            assert idx == 0, f"this top has no index register (no vector unit); idx {idx}"
        events: list[list[int]] = []
        monitor = cocotb.start_soon(_timeline(d, events)) if timeline else None
        cycles = await start_and_measure(d, "controller", max_cycles)
        assert int(d.done.value) == 1, "busy dropped without done"
        rec = {"cycles": cycles, "retired": int(d.retired.value),
               "error": int(d.error.value), "pc": int(d.pc.value)}
        if monitor is not None:
            await monitor
            rec["events"] = events
        return rec


async def _timeline(d, events: list[list[int]]) -> None:
    """Record one run's events (module docstring), started just before ``start`` is sampled:
    after the edge that ends cycle ``n`` the outputs describe cycle ``n + 1``, and a ``retired``
    count that moved means the instruction at the previous ``pc`` issued in cycle ``n`` (the
    fast driver's rule, ``accel_main.cpp``)."""
    await RisingEdge(d.clk)           # samples start: cycle 0 ends
    await FallingEdge(d.clk)          # the fetch cycle, 1
    retired, pc, level = int(d.retired.value), int(d.pc.value), [0, 0, 0]

    def levels(cycle: int) -> None:
        for u, sig in enumerate((d.gemm_busy, d.dma_busy, d.vec_busy)):
            v = int(sig.value)
            if v != level[u]:
                events.append([cycle, 1 + u, v])
                level[u] = v

    levels(1)
    n = 0
    while int(d.busy.value):
        await FallingEdge(d.clk)
        n += 1
        if int(d.retired.value) != retired:
            events.append([n, 0, pc])
            retired = int(d.retired.value)
        pc = int(d.pc.value)
        levels(n + 1)


@cocotb.test()
async def run_job(dut):
    """Execute the job folder's Program (GEMMs on the accelerator top) or kernels."""
    job = load_job()
    start_clock(dut)
    drv = AccelDriver(dut, job.arch)
    await drv.reset()
    mem = ExtMemory(dut, memory_latency_cycles(job.arch))
    cocotb.start_soon(mem.serve())
    if "kernels" in job.spec:
        await _run_kernels(job, drv, mem)
    else:
        await _run_program(job, drv, mem)


async def _run_segment(drv: AccelDriver, mem: ExtMemory, isa, seg, image: dict[int, int],
                       name: str, idx: int = 0, timeline: bool = False) -> dict:
    """Store a segment's memory image, run it from its entry; its record (cycles, retired,
    error, pc, read/write beats; with ``timeline`` its ``events``)."""
    mem.words.update(image)
    r0, w0 = mem.reads, mem.writes
    # watchdog only (a hang fails instead of running forever): 4x the model's cycles
    rec = await drv.run(seg.entry, 4 * predict_segment(isa, seg, drv.arch).cycles + 10_000, idx,
                        timeline)
    assert rec["error"] == 0, f"{name}: controller stopped with error at pc {rec['pc']}"
    rec.update(read_beats=mem.reads - r0, write_beats=mem.writes - w0)
    return rec


async def _run_program(job: Job, drv: AccelDriver, mem: ExtMemory) -> None:
    arch = job.arch
    isa = codegen(job.program, arch)
    await drv.load_program(isa.words)
    env = job.env
    records = []
    for task in gemm_tasks(job, env):
        seg = isa.segment(task.name)
        t0 = time.perf_counter()
        rec = await _run_segment(drv, mem, isa, seg, isa.image(arch, seg, *operands(task, env)),
                                 f"task {task.name}", timeline=job.spec.get("timeline", False))
        rec.update(task=task.name, m=task.m, k=task.k, n=task.n, tiles=len(seg.tiles),
                   run_seconds=time.perf_counter() - t0)
        env[task.out] = isa.c_result(arch, seg, mem.read)
        records.append(rec)
    save_results(job, computed(job.program, job.inputs, env), cycles=records)


async def _run_kernels(job: Job, drv: AccelDriver, mem: ExtMemory) -> None:
    arch = job.arch
    outputs, records = {}, []
    for batch in job.spec["kernels"]:
        kernels = [VectorKernel(k["name"], k["kind"], k["op"], tuple(k["shape"])) for k in batch]
        isa = codegen_vector(arch, kernels)
        await drv.load_program(isa.words)
        for k in kernels:
            seg = isa.segment(k.name)
            ops = [job.inputs[f"{k.name}_{i}"] for i in range(k.operands)]
            rec = await _run_segment(drv, mem, isa, seg, seg.image(arch, *ops), f"kernel {k.name}",
                                     seg.index(*ops), job.spec.get("timeline", False))
            rec.update(task=k.name)
            res = seg.result(arch, mem.read)
            if k.kind in PAIR_KINDS:     # scan: (y, final state); quantize: (codes, shift)
                outputs[k.name], outputs[k.name + STATE_SUFFIX] = res
            else:
                outputs[k.name] = res
            records.append(rec)
    save_results(job, outputs, cycles=records)
