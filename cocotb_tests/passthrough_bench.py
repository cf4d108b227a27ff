"""cocotb 2.x bench for the passthrough top (:mod:`tilewright.rtl.passthrough`): stream words in,
collect words out, note the cycle of every transfer.

Loaded *inside the simulator process* by cocotb. Reads ``job.json`` (``words``: ints, one per
cycle from cycle 0) from ``$TILEWRIGHT_JOB`` and writes ``results.json``: the words seen on
``o`` in order, the cycle each entered and each left. Cycle c is the clock period after the c-th
rising edge following reset; inputs are driven on the falling edge and sampled after they settle
(``ReadOnly``), as the other benches do.
"""

from __future__ import annotations

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly

from tilewright.cocotb_tests.bench_io import reset, start_clock
from tilewright.cosim.job import load_job, save_results


@cocotb.test()
async def passthrough_words(dut) -> None:
    job = load_job()
    words, max_cycles = job.spec["words"], job.spec["max_cycles"]
    start_clock(dut)
    await reset(dut, dut.i__valid)
    outs, in_cycles, out_cycles = [], [], []
    cycle = 0
    while len(outs) < len(words):
        assert cycle < max_cycles, f"passthrough: {len(outs)} of {len(words)} words after {cycle}"
        if cycle < len(words):
            dut.i__valid.value, dut.i__payload.value = 1, words[cycle]
        else:
            dut.i__valid.value = 0
        await ReadOnly()
        if cycle < len(words):
            in_cycles.append(cycle)
        if int(dut.o__valid.value):
            outs.append(int(dut.o__payload.value))
            out_cycles.append(cycle)
        await FallingEdge(dut.clk)
        cycle += 1
    save_results(job, results={"outputs": outs, "in_cycles": in_cycles,
                               "out_cycles": out_cycles})
