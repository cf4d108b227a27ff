"""cocotb 2.x bench: a Program on the Verilated ``tw_uart_bridge_top``, driven only over its UART
line.

Loaded *inside the simulator process* by cocotb. The job folder (``$TILEWRIGHT_JOB``) holds
``arch.yaml``, ``program/``, ``inputs.npz`` and ``job.json`` (``baud``, ``mem_words``: the
:class:`~tilewright.rtl.uart_bridge_top.UartLink`; ``probes``: raw requests sent after the
Program, each with its reply length).

:class:`CocotbUart` is the host driver's transport (:mod:`tilewright.cosim.uart_host`) on the
simulated line: ``write`` drives ``rx`` bit by bit (8N1, ``divisor`` clock cycles per bit) and a
monitor samples ``tx`` mid-bit into a queue that ``read`` takes bytes from (a stop bit that is not
1 fails the run). The bench runs :meth:`BridgeOps.run_program` through it — the same code a PC
runs over pyserial — then the probes, and writes ``outputs.npz``, ``cycles.json`` (per GEMM
task, with the bytes and clock cycles the task took on the line) and ``probes.json`` (each
reply, hex).
"""

from __future__ import annotations

import cocotb
from cocotb.queue import Queue
from cocotb.triggers import ClockCycles, FallingEdge, Timer
from cocotb.utils import get_sim_time

from tilewright.cocotb_tests.bench_io import CLOCK_PERIOD_NS, start_clock
from tilewright.compiler.codegen import codegen
from tilewright.cosim.job import computed, load_job, save_results
from tilewright.cosim.uart_host import BridgeOps, run_async
from tilewright.cosim.uart_jobs import link_from_spec
from tilewright.rtl.uart import BITS_PER_BYTE


class CocotbUart:
    """8N1 on the DUT's ``rx``/``tx`` at ``divisor`` clock cycles per bit."""

    def __init__(self, dut, divisor: int):
        self.dut, self.div = dut, divisor
        self.rx_queue: Queue[int] = Queue()
        # one timer per bit (a Python wake-up per bit, not per clock cycle)
        self.bit_ns = divisor * CLOCK_PERIOD_NS
        self.sent = self.received = 0
        dut.rx.value = 1

    async def write(self, data: bytes) -> None:
        for byte in data:
            for bit in [0, *((byte >> i) & 1 for i in range(8)), 1]:
                self.dut.rx.value = bit
                await Timer(self.bit_ns, unit="ns")
        self.sent += len(data)

    async def read(self, n: int) -> bytes:
        out = bytearray()
        for _ in range(n):
            out.append(await self.rx_queue.get())
        self.received += n
        return bytes(out)

    async def monitor(self) -> None:
        """Sample ``tx``: a falling edge starts a byte; bits mid-bit."""
        tx = self.dut.tx
        half = lambda: Timer(self.bit_ns // 2, unit="ns")  # noqa: E731
        bit = lambda: Timer(self.bit_ns, unit="ns")  # noqa: E731
        while True:
            if int(tx.value):
                await FallingEdge(tx)
            await half()
            assert int(tx.value) == 0, "tx: start bit did not hold"
            byte = 0
            for i in range(8):
                await bit()
                byte |= int(tx.value) << i
            await bit()
            assert int(tx.value) == 1, f"tx: stop bit of byte {byte:#04x} is 0"
            self.rx_queue.put_nowait(byte)
            # leave the stop bit: the next falling edge is the next start bit
            await Timer(self.bit_ns - self.bit_ns // 2, unit="ns")


def line_meter(line: CocotbUart):
    """A ``meter`` for :meth:`BridgeOps.run_program`: the bytes (both ways) and clock cycles a
    task took on the line."""
    def start():
        nbytes, t0 = line.sent + line.received, get_sim_time("ns")
        return lambda: {"line_bytes": line.sent + line.received - nbytes,
                        "line_cycles": int((get_sim_time("ns") - t0) // CLOCK_PERIOD_NS)}
    return start


@cocotb.test()
async def run_job(dut):
    """Execute the job folder's Program over the UART line."""
    job = load_job()
    link = link_from_spec(job.arch, job.spec)
    isa = codegen(job.program, job.arch)
    start_clock(dut)
    line = CocotbUart(dut, link.divisor)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2 * BITS_PER_BYTE * link.divisor)   # an idle line first
    cocotb.start_soon(line.monitor())
    env = job.env
    records = await run_async(BridgeOps(link).run_program(job.program, isa, env,
                                                          meter=line_meter(line)), line)
    probes = []
    for req, n in job.spec.get("probes", []):      # raw requests, replies as they come
        await line.write(bytes.fromhex(req))
        probes.append((await line.read(n)).hex())
    await ClockCycles(dut.clk, 4 * BITS_PER_BYTE * link.divisor)
    assert line.rx_queue.empty(), "the bridge sent bytes nobody asked for"
    save_results(job, computed(job.program, job.inputs, env), cycles=records, probes=probes)
