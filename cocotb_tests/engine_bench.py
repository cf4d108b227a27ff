"""cocotb 2.x bench for the tile-MAC tensor engines: stream GEMM beats in, collect tiles and cycles.

Loaded *inside the simulator process* by cocotb. Reads ``job.json`` from the folder in
``$TILEWRIGHT_JOB`` (written by :func:`tilewright.cosim.engine_jobs.prepare_engine`): ``jobs``, a
list of ``{"beats": [ops_in payloads (ints)], "expected_outputs": int, "max_cycles": int}``. Each
job's beats go in back to back, one per cycle; the bench then waits for the job's output tiles
and two idle cycles before the next job. Writes ``results.json``: per job the ``c_out`` payloads
in order, the cycle of each, and ``cycles`` (last output cycle + 1).

Cycle convention: cycle 0 of a job is the cycle its first beat is on ``ops_in``; the rising edge
that ends cycle c captures what was driven in cycle c. Inputs are driven on the falling edge, then
the bench waits for the values to settle (``ReadOnly``) and samples ``c_out`` for that cycle.
"""

from __future__ import annotations


import cocotb
from cocotb.triggers import FallingEdge, ReadOnly

from tilewright.cocotb_tests.bench_io import reset, start_clock
from tilewright.cosim.job import load_job, save_results


async def _run_job(dut, job: dict) -> dict:
    beats, expected, max_cycles = job["beats"], job["expected_outputs"], job["max_cycles"]
    outs, out_cycles = [], []
    cycle, driven = 0, None           # driven: the payload on the port now (write only on change)
    while len(outs) < expected:
        assert cycle < max_cycles, (f"engine: {len(outs)} of {expected} tiles after "
                                    f"{cycle} cycles")
        if cycle < len(beats):
            if cycle == 0:
                dut.ops_in__valid.value = 1
            if beats[cycle] != driven:
                dut.ops_in__payload.value = driven = beats[cycle]
        elif cycle == len(beats):
            dut.ops_in__valid.value = 0
        await ReadOnly()
        if int(dut.c_out__valid.value):
            outs.append(int(dut.c_out__payload.value))
            out_cycles.append(cycle)
        await FallingEdge(dut.clk)
        cycle += 1
    dut.ops_in__valid.value = 0
    for _ in range(2):
        await ReadOnly()
        assert not int(dut.c_out__valid.value), "engine: a tile appeared after the last one"
        await FallingEdge(dut.clk)
    return {"outputs": outs, "out_cycles": out_cycles, "cycles": out_cycles[-1] + 1}


@cocotb.test()
async def engine_gemms(dut) -> None:
    job = load_job()
    start_clock(dut)
    dut.c_out__ready.value = 1
    await reset(dut, dut.ops_in__valid, dut.ops_in__payload)
    save_results(job, results=[await _run_job(dut, j) for j in job.spec["jobs"]])
