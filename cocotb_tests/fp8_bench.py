"""cocotb 2.x bench for the fp8 GEMM core: fill buffers, run, read the scaled fp32 results.

Loaded *inside the simulator process* by cocotb. Reads ``job.json`` from ``$TILEWRIGHT_JOB``
(written by :func:`tilewright.cosim.fp8_jobs.prepare_fp8`): ``jobs``, a list of ``{"m", "k", "n",
"a_words", "b_words", "acc_words", "scale_a", "scale_b"}`` (scales as fp32 bit patterns). For each
job it writes the A and B buffer words, pulses ``start``, waits for ``busy`` to fall, sets
``scale_a``/``scale_b`` and reads ``acc_words`` words of ``fl32(acc * fl32(scale_a * scale_b))``.
Writes ``results.json``: per job ``acc`` (ints) and ``cycles`` (as the bf16 bench: simulation
time and the core's counter, asserted equal). Signals are driven and sampled on the falling edge.
"""

from __future__ import annotations

import cocotb
from tilewright.cocotb_tests.bench_io import (read_words, reset, start_and_measure, start_clock,
                                              write_words)
from tilewright.cosim.job import load_job, save_results


async def _gemm(dut, job: dict) -> dict:
    clk = dut.clk
    await write_words(clk, dut.a_wr_en, dut.a_wr_addr, dut.a_wr_data, job["a_words"])
    await write_words(clk, dut.b_wr_en, dut.b_wr_addr, dut.b_wr_data, job["b_words"])
    dut.m.value, dut.k.value, dut.n.value = job["m"], job["k"], job["n"]
    cycles = await start_and_measure(dut, "fp8 core")
    dut.scale_a.value, dut.scale_b.value = job["scale_a"], job["scale_b"]
    acc = await read_words(clk, dut.acc_rd_addr, dut.acc_rd_data, job["acc_words"])
    return {"acc": acc, "cycles": cycles}


@cocotb.test()
async def fp8_gemms(dut) -> None:
    job = load_job()
    start_clock(dut)
    await reset(dut, dut.a_wr_en, dut.b_wr_en, dut.start)
    save_results(job, results=[await _gemm(dut, j) for j in job.spec["jobs"]])
