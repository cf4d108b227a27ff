"""Amaranth-simulator harness shared by the RTL unit tests (no Verilator).

* :func:`simulate`: run an async testbench on a design with a clock;
* :func:`run_core_gemms`: the host's sequence on any GEMM core's ports (int8 ``GemmCore``, the
  bf16, fp8 and MX cores), GEMM after GEMM: write the A and B buffer words, set M/K/N, pulse
  ``start``, count the cycles ``busy`` is high, optionally set the fp8 core's scales, read the
  accumulator words;
* :func:`ws_stream`: the WS PE array's sequence: preload B's rows, stream A's rows, record each
  result row with its cycle;
* :func:`assert_same_fp32_bits`: two float32 arrays equal bit for bit (NaN as "is a NaN").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.sim import Simulator

from tilewright.compiler.layout import GemmLayout


def simulate(dut, bench, clock: bool = True) -> None:
    """Run ``bench`` (an ``async def bench(ctx)``) on ``dut`` in Amaranth's simulator, with a
    100 MHz clock unless ``clock`` is False (a combinational design)."""
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


async def write_buffer(ctx, en, addr, data, words) -> None:
    """Write ``words`` to addresses 0, 1, ... through a write port (one word a cycle)."""
    for i, w in enumerate(words):
        ctx.set(en, 1)
        ctx.set(addr, i)
        ctx.set(data, w)
        await ctx.tick()
    ctx.set(en, 0)


@dataclass
class CoreRun:
    """What :func:`core_gemm` saw."""

    busy: int              #: cycles ``busy`` was high (counted by the testbench)
    counter: int           #: the core's ``cycles`` output when ``busy`` fell
    acc: list[int]         #: the accumulator words, addresses 0 .. acc_words-1


async def core_gemm(ctx, core, lay: GemmLayout, a_words, b_words,
                    scales: tuple[int, int] | None = None) -> CoreRun:
    """One GEMM of layout ``lay`` on ``core``: buffers written, ``start`` pulsed, ``busy``
    waited out, the fp8 core's ``scale_a``/``scale_b`` set to ``scales`` (fp32 bit patterns)
    when given, then ``lay.acc_words`` accumulator words read (one a cycle)."""
    await write_buffer(ctx, core.a_wr_en, core.a_wr_addr, core.a_wr_data, a_words)
    await write_buffer(ctx, core.b_wr_en, core.b_wr_addr, core.b_wr_data, b_words)
    ctx.set(core.m, lay.m)
    ctx.set(core.k, lay.k)
    ctx.set(core.n, lay.n)
    ctx.set(core.start, 1)
    await ctx.tick()
    ctx.set(core.start, 0)
    high = 0
    while ctx.get(core.busy):
        high += 1
        await ctx.tick()
    counter = ctx.get(core.cycles)
    if scales is not None:
        ctx.set(core.scale_a, scales[0])
        ctx.set(core.scale_b, scales[1])
    acc = []
    latency = 2 if "acc_rd_en" in core.signature.members else 1   # pipeline.host_read
    if latency > 1:
        ctx.set(core.acc_rd_en, 1)
    for i in range(lay.acc_words + latency - 1):
        ctx.set(core.acc_rd_addr, min(i, lay.acc_words - 1))
        await ctx.tick()
        if i >= latency - 1:
            acc.append(ctx.get(core.acc_rd_data))
    return CoreRun(high, counter, acc)


def run_core_gemms(core, gemms, scales=None) -> list[CoreRun]:
    """Each (layout, A buffer words, B buffer words) of ``gemms`` on ``core``, in order, in one
    simulation (:func:`core_gemm`); ``scales``: one (scale_a, scale_b) bit-pattern pair per GEMM
    for the fp8 core."""
    runs = []

    async def bench(ctx):
        for i, (lay, a_words, b_words) in enumerate(gemms):
            runs.append(await core_gemm(ctx, core, lay, a_words, b_words,
                                        scales[i] if scales is not None else None))

    simulate(core, bench)
    return runs


def ws_stream(dut, a: np.ndarray, b: np.ndarray, steps: int) -> list[tuple[int, list[int]]]:
    """Preload ``b``'s rows into the WS array ``dut`` (row R-1 first, one a cycle), then for
    ``steps`` cycles stream ``a``'s rows (``commit`` on the first; idle after the last);
    returns (cycles since the preload ended, result row) for each cycle ``c_out`` is valid."""
    (m, rows), cols = a.shape, b.shape[1]
    seen = []

    async def bench(ctx):
        for r in range(rows - 1, -1, -1):
            ctx.set(dut.w_in.valid, 1)
            for j in range(cols):
                ctx.set(dut.w_in.payload[j], int(b[r, j]))
            await ctx.tick()
        ctx.set(dut.w_in.valid, 0)
        for step in range(steps):
            if step < m:
                ctx.set(dut.a_in.valid, 1)
                ctx.set(dut.a_in.payload.commit, int(step == 0))
                for i in range(rows):
                    ctx.set(dut.a_in.payload.a[i], int(a[step, i]))
            else:
                ctx.set(dut.a_in.valid, 0)
            if ctx.get(dut.c_out.valid):
                seen.append((step, [ctx.get(dut.c_out.payload[j]) for j in range(cols)]))
            await ctx.tick()

    simulate(dut, bench)
    return seen


def assert_same_fp32_bits(got: np.ndarray, ref: np.ndarray, what: str) -> None:
    """``got`` and ``ref`` (both float32) equal bit for bit; a NaN equals any NaN."""
    assert got.dtype == np.float32 and ref.dtype == np.float32, what
    gn, rn = np.isnan(got), np.isnan(ref)
    np.testing.assert_array_equal(gn, rn, err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(got.view(np.uint32)[~rn], ref.view(np.uint32)[~rn],
                                  err_msg=f"{what}: fp32 bit patterns")
