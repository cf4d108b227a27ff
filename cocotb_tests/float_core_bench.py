"""cocotb 2.x bench for the floating-point GEMM cores (bf16, fp8, MX): fill buffers, run, read
the fp32 accumulator.

Loaded *inside the simulator process* by cocotb. Reads ``job.json`` from the folder in
``$TILEWRIGHT_JOB`` (written by :func:`tilewright.cosim.float_core_jobs.prepare_float_gemms`, for
:func:`~tilewright.cosim.bf16_jobs.prepare_bf16`, :func:`~tilewright.cosim.fp8_jobs.prepare_fp8`
and :func:`~tilewright.cosim.mx_jobs.prepare_mx`): ``jobs``, a list of ``{"m", "k", "n",
"a_words", "b_words", "acc_words"}``, for the fp8 core with ``"scale_a"`` and ``"scale_b"`` (fp32
bit patterns). For each job it writes the A and B buffer words through the write ports, pulses
``start``, waits for ``busy`` to fall, sets ``scale_a``/``scale_b`` when the job has them (the
fp8 core then reads ``fl32(acc * fl32(scale_a * scale_b))``) and reads ``acc_words`` accumulator
words. Writes ``results.json``: per job ``acc`` (ints) and ``cycles``.

Cycle convention (as the int8 core's bench): the cycles of a GEMM are those ``busy`` is high,
measured from simulation time between the rising edge that samples ``start`` and the one that
drops ``busy``, and by the core's ``cycles`` counter; the bench asserts both agree. Signals are
driven and sampled on the falling clock edge.
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
    cycles = await start_and_measure(dut, "floating-point core")
    if "scale_a" in job:
        dut.scale_a.value, dut.scale_b.value = job["scale_a"], job["scale_b"]
    acc = await read_words(clk, dut.acc_rd_addr, dut.acc_rd_data, job["acc_words"])
    return {"acc": acc, "cycles": cycles}


@cocotb.test()
async def float_core_gemms(dut) -> None:
    job = load_job()
    start_clock(dut)
    await reset(dut, dut.a_wr_en, dut.b_wr_en, dut.start)
    save_results(job, results=[await _gemm(dut, j) for j in job.spec["jobs"]])
