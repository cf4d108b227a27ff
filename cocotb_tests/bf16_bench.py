"""cocotb 2.x bench for the bf16 GEMM core: fill buffers, run, read the fp32 accumulator.

Loaded *inside the simulator process* by cocotb. Reads ``job.json`` from the folder in
``$TILEWRIGHT_JOB`` (written by :func:`tilewright.cosim.bf16_run.run_bf16_gemms`): ``jobs``, a list
of ``{"m", "k", "n", "a_words", "b_words", "acc_words"}``. For each job it writes the A and B
buffer words through the write ports, pulses ``start``, waits for ``busy`` to fall and reads
``acc_words`` accumulator words. Writes ``results.json``: per job ``acc`` (ints) and ``cycles``.

Cycle convention (as the int8 core's bench): the cycles of a GEMM are those ``busy`` is high,
measured from simulation time between the rising edge that samples ``start`` and the one that
drops ``busy``, and by the core's ``cycles`` counter; the bench asserts both agree. Signals are
driven and sampled on the falling clock edge.
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


async def _write(clk, en, addr, data, words: list[int]) -> None:
    for i, w in enumerate(words):
        en.value, addr.value, data.value = 1, i, w
        await FallingEdge(clk)
    en.value = 0


async def _gemm(dut, job: dict) -> dict:
    clk = dut.clk
    await _write(clk, dut.a_wr_en, dut.a_wr_addr, dut.a_wr_data, job["a_words"])
    await _write(clk, dut.b_wr_en, dut.b_wr_addr, dut.b_wr_data, job["b_words"])
    dut.m.value, dut.k.value, dut.n.value, dut.start.value = job["m"], job["k"], job["n"], 1
    await RisingEdge(clk)
    t_start = get_sim_time("ns")
    await FallingEdge(clk)
    dut.start.value = 0
    assert int(dut.busy.value) == 1, "bf16 core did not go busy after start"
    await FallingEdge(dut.busy)
    by_time = round((get_sim_time("ns") - t_start) / CLOCK_PERIOD_NS)
    await FallingEdge(clk)
    by_counter = int(dut.cycles.value)
    assert by_time == by_counter, f"cycle counter {by_counter} != measured {by_time}"
    count, acc = job["acc_words"], []
    dut.acc_rd_addr.value = 0
    await FallingEdge(clk)
    for i in range(count):
        acc.append(int(dut.acc_rd_data.value))
        dut.acc_rd_addr.value = min(i + 1, count - 1)
        await FallingEdge(clk)
    return {"acc": acc, "cycles": by_counter}


@cocotb.test()
async def bf16_gemms(dut) -> None:
    folder = Path(os.environ["TILEWRIGHT_JOB"])
    jobs = json.loads((folder / "job.json").read_text())["jobs"]
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    for sig in (dut.a_wr_en, dut.b_wr_en, dut.start):
        sig.value = 0
    dut.rst.value = 1
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    await FallingEdge(dut.clk)
    results = [await _gemm(dut, job) for job in jobs]
    (folder / "results.json").write_text(json.dumps({"jobs": results}))
