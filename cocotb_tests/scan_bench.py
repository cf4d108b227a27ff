"""cocotb 2.x bench for the scan unit: stream sequences through it, collect h, count cycles.

Loaded *inside the simulator process* by cocotb. Reads ``job.json`` from the folder in
``$TILEWRIGHT_JOB`` (written by :func:`tilewright.cosim.scan_jobs.prepare_scan`):
``{"params": {lanes, a_bits, h_bits, frac_bits}, "jobs": [...]}``, each job
``{"mode": "stream" | "random", "seed": int, "beats": [[a_word, b_word, c_word, first, h0_word],
...]}`` with the lane vectors already packed into port words (lane 0 in the LSBs). It writes
``results.json``: per job ``{"out": [h_out payload word per beat], "cycles": int}``.

``stream`` mode holds ``s_in.valid`` (while beats remain) and ``h_out.ready`` high; ``random``
mode (seeded) inserts idle input cycles and drops ``h_out.ready`` at random, obeying the stream
rules (a presented beat stays, unchanged, until it transfers).

Cycle convention: rising edges from the one that transfers the first beat to the one that
transfers the last result, inclusive. Signals are driven on the falling edge and transfers are
read in the settled (read-only) phase after it, i.e. for the next rising edge.
"""

from __future__ import annotations

import random

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly

from tilewright.cocotb_tests.bench_io import reset, start_clock
from tilewright.cosim.job import load_job, save_results


def _payload(a_word: int, b_word: int, c_word: int, first: int, params: dict) -> int:
    """Pack ``s_in``'s struct payload: a (LSBs), then b, then c, then first."""
    abits = params["lanes"] * params["a_bits"]
    hbits = params["lanes"] * params["h_bits"]
    return a_word | (b_word << abits) | (c_word << (abits + hbits)) | (first << (abits + 2 * hbits))


async def _run_job(dut, job: dict, params: dict) -> dict:
    beats = job["beats"]
    random_mode = job["mode"] == "random"
    rng = random.Random(job["seed"])
    n, i, edge = len(beats), 0, 0
    outs: list[int] = []
    first_in = last_out = None
    pending = False                      # a presented beat that has not transferred yet
    limit = 20 * n + 100
    while len(outs) < n:
        assert edge < limit, f"scan unit stalled: {len(outs)} of {n} results after {edge} cycles"
        if i < n and (pending or not random_mode or rng.random() < 0.7):
            a_word, b_word, c_word, first, h0_word = beats[i]
            dut.s_in__payload.value = _payload(a_word, b_word, c_word, first, params)
            dut.h0.value = h0_word
            dut.s_in__valid.value = 1
            valid = True
        else:
            dut.s_in__valid.value = 0
            valid = False
        out_ready = 1 if not random_mode or rng.random() < 0.6 else 0
        dut.h_out__ready.value = out_ready
        await ReadOnly()
        take_in = valid and int(dut.s_in__ready.value) == 1
        if out_ready and int(dut.h_out__valid.value) == 1:
            outs.append(int(dut.h_out__payload.value))
            last_out = edge
        if take_in:
            first_in = edge if first_in is None else first_in
            i += 1
        pending = valid and not take_in
        await FallingEdge(dut.clk)
        edge += 1
    dut.s_in__valid.value = 0
    dut.h_out__ready.value = 0
    await FallingEdge(dut.clk)
    return {"out": outs, "cycles": last_out - first_in + 1}


@cocotb.test()
async def run_scan_jobs(dut):
    """Run every job of ``job.json`` through the scan unit."""
    job = load_job()
    start_clock(dut)
    await reset(dut, dut.s_in__valid, dut.h_out__ready)
    save_results(job, results=[await _run_job(dut, j, job.spec["params"])
                               for j in job.spec["jobs"]])
