"""cocotb 2.x bench for the RTL vector unit: stream beats in, collect result beats, count cycles.

Loaded *inside the simulator process* by cocotb. Reads ``job.json`` from the folder in
``$TILEWRIGHT_JOB`` (written by :func:`tilewright.cosim.vector_jobs.prepare_vector`):
``beats`` (packed ``operands`` payloads, ints) and ``ready`` (a 0/1 pattern for
``results.ready``, repeated cyclically; [1] = never stalls). Writes ``results.json``: the packed
``results`` payloads in order, and the cycle of every operand and result transfer.

Cycle convention: cycle c is the clock period after the c-th rising edge following reset. Inputs
are driven on the falling edge, then the bench waits for the values to settle (``ReadOnly``) and
decides both transfers from ``valid``/``ready`` as the rising edge will see them.
"""

from __future__ import annotations


import cocotb
from cocotb.triggers import FallingEdge, ReadOnly

from tilewright.cocotb_tests.bench_io import reset, start_clock
from tilewright.cosim.job import load_job, save_results


@cocotb.test()
async def vector_beats(dut) -> None:
    folder_job = load_job()
    job = folder_job.spec
    beats, pattern = job["beats"], job["ready"] or [1]
    max_cycles = job["max_cycles"]
    start_clock(dut)
    await reset(dut, dut.operands__valid, dut.results__ready)

    outs, in_cycles, out_cycles = [], [], []
    i, cycle, expected = 0, 0, job["expected_outputs"]
    driven, ready_now = -1, 0          # what the ports hold now (write only on change)
    while len(outs) < expected:
        assert cycle < max_cycles, (f"vector unit: {len(outs)} of {expected} results after "
                                    f"{cycle} cycles")
        if i < len(beats):
            if i != driven:
                dut.operands__valid.value = 1
                dut.operands__payload.value = beats[i]
                driven = i
        elif driven >= 0:
            dut.operands__valid.value = 0
            driven = -1
        ready = pattern[cycle % len(pattern)]
        if ready != ready_now:
            dut.results__ready.value = ready_now = ready
        await ReadOnly()
        if int(dut.results__valid.value) and ready:
            outs.append(int(dut.results__payload.value))
            out_cycles.append(cycle)
        if i < len(beats) and int(dut.operands__ready.value):
            in_cycles.append(cycle)
            i += 1
        await FallingEdge(dut.clk)
        cycle += 1
    save_results(folder_job, results={"outputs": outs, "in_cycles": in_cycles,
                                      "out_cycles": out_cycles, "cycles": cycle})
