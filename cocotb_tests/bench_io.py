"""cocotb 2.x helpers every bench shares: clock, reset, buffer writes/reads, a measured run.

Loaded only inside the simulator. Signals are driven and sampled on the falling clock edge
(race-free with Verilator); the clock period is :data:`CLOCK_PERIOD_NS`.
"""

from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge, with_timeout
from cocotb.utils import get_sim_time

__all__ = ["CLOCK_PERIOD_NS", "start_clock", "reset", "write_words", "read_words",
           "start_and_measure"]

#: simulated clock period (ns)
CLOCK_PERIOD_NS = 10


def start_clock(dut) -> None:
    """Drive ``dut.clk`` with a :data:`CLOCK_PERIOD_NS` clock."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())


async def reset(dut, *idle) -> None:
    """Set each signal of ``idle`` to 0, hold ``rst`` high for 3 cycles, release it and wait
    one more falling edge."""
    for sig in idle:
        sig.value = 0
    dut.rst.value = 1
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    await FallingEdge(dut.clk)


async def write_words(clk, en, addr, data, words: list[int]) -> None:
    """Write ``words`` from address 0 through a write port (one word per cycle)."""
    for i, w in enumerate(words):
        en.value, addr.value, data.value = 1, i, w
        await FallingEdge(clk)
    en.value = 0


async def read_words(clk, addr, data, count: int, latency: int = 1, en=None) -> list[int]:
    """Read ``count`` words from address 0 of a synchronous read port whose data follows the
    address by ``latency`` cycles (address at one falling edge, data ``latency`` falling edges
    later; the next addresses meanwhile). ``en``: the port's enable, held high while reading."""
    out = []
    if en is not None:
        en.value = 1
    addr.value = 0
    for i in range(1, latency):
        await FallingEdge(clk)
        addr.value = min(i, count - 1)
    await FallingEdge(clk)
    for i in range(count):
        out.append(int(data.value))
        addr.value = min(i + latency, count - 1)
        await FallingEdge(clk)
    return out


async def start_and_measure(dut, what: str, max_cycles: int | None = None) -> int:
    """Pulse ``start`` (the caller has set the other inputs) and wait for ``busy`` to fall (at
    most ``max_cycles``, a watchdog, when given). Returns the cycles ``busy`` was high, measured
    twice — simulation time from the rising edge that samples ``start`` to the one that drops
    ``busy``, and the top's ``cycles`` counter — and asserted equal."""
    clk = dut.clk
    dut.start.value = 1
    await RisingEdge(clk)
    t_start = get_sim_time("ns")
    await FallingEdge(clk)
    dut.start.value = 0
    assert int(dut.busy.value) == 1, f"{what} did not go busy after start"
    if max_cycles is None:
        await FallingEdge(dut.busy)
    else:
        await with_timeout(FallingEdge(dut.busy), max_cycles * CLOCK_PERIOD_NS, "ns")
    by_time = round((get_sim_time("ns") - t_start) / CLOCK_PERIOD_NS)
    await FallingEdge(clk)
    by_counter = int(dut.cycles.value)
    assert by_time == by_counter, f"cycle counter {by_counter} != measured {by_time}"
    return by_counter
