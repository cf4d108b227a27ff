"""The PC's driver for the UART bridge top (:mod:`tilewright.rtl.uart_bridge_top`): the framed
protocol, Program loading and GEMM runs, over any byte transport.

The protocol code is written once, without I/O ("sans-IO"): every operation of
:class:`BridgeOps` is a generator that yields ``("write", bytes)`` to send and ``("read", n)`` to
receive ``n`` bytes (the transport sends them back in). :func:`run_sync` drives an operation on a
blocking :class:`Transport` (a board: :class:`SerialTransport`, pyserial); :func:`run_async` on
an awaitable one (the cocotb bench drives the Verilated top's ``rx`` pin and samples ``tx``:
:mod:`tilewright.cocotb_tests.uart_bench`). :class:`UartHost` is the blocking facade for a PC.

The driver speaks the simulators' Program encoding: the instruction words and the external-memory
images of :func:`tilewright.compiler.codegen.codegen` (:meth:`IsaProgram.image`,
:meth:`IsaProgram.c_result`), the registers of :data:`tilewright.rtl.axi_accel_top.REGISTERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping
from itertools import groupby
from typing import Any, Protocol

import numpy as np

from tilewright.compiler.codegen import IsaProgram, Segment, codegen
from tilewright.compiler.program import GemmTask, Program
from tilewright.dataflow_sim.functional import run_vector
from tilewright.extras import require
from tilewright.rtl.axi_accel_top import IMEM_BASE, STATUS_BITS
from tilewright.rtl.uart_bridge_top import Cmd, Status, UartLink

__all__ = ["LinkError", "Transport", "BridgeOps", "run_sync", "run_async", "SerialTransport",
           "UartHost", "MAX_COUNT", "DONE", "BUSY", "ERROR"]

#: the largest count field of a command (16 bits)
MAX_COUNT = 0xFFFF
BUSY, DONE, ERROR = (1 << STATUS_BITS[n] for n in ("BUSY", "DONE", "ERROR"))

Op = Generator[tuple[str, Any], Any, Any]


class LinkError(RuntimeError):
    """The bridge answered other than OK, or the line timed out."""


class Transport(Protocol):
    """A byte link to the bridge: ``write`` sends, ``read(n)`` returns exactly ``n`` bytes (or
    raises :class:`LinkError`). An async transport has the same methods as coroutines."""

    def write(self, data: bytes) -> None: ...

    def read(self, n: int) -> bytes: ...


def _consecutive_runs(keys: Iterable[int]) -> list[list[int]]:
    """``keys`` in increasing order, cut into runs of consecutive integers."""
    return [[k for _, k in run]
            for _, run in groupby(enumerate(sorted(keys)), key=lambda ik: ik[1] - ik[0])]


def _check(status: int, what: str) -> None:
    if status != Status.OK:
        name = Status(status).name if status in iter(Status) else f"{status:#x}"
        raise LinkError(f"{what}: the bridge answered {name}")


class BridgeOps:
    """The protocol's operations for one :class:`~tilewright.rtl.uart_bridge_top.UartLink`
    (register addresses, W, the memory depth); each method returns a generator (module
    docstring)."""

    def __init__(self, link: UartLink):
        self.link = link
        self.map = link.map
        self.w = self.map.data_bytes

    # ---- the five commands
    def reg_write(self, addr: int, value: int) -> Op:
        yield "write", bytes([Cmd.REG_WRITE]) + addr.to_bytes(2, "little") \
            + (value & 0xFFFF_FFFF).to_bytes(4, "little")
        (status,) = yield "read", 1
        _check(status, f"write of register {addr:#06x}")

    def reg_read(self, addr: int) -> Op:
        yield "write", bytes([Cmd.REG_READ]) + addr.to_bytes(2, "little")
        reply = yield "read", 5
        _check(reply[0], f"read of register {addr:#06x}")
        return int.from_bytes(reply[1:5], "little")

    def reg_burst(self, addr: int, values: Iterable[int]) -> Op:
        values = [int(v) & 0xFFFF_FFFF for v in values]
        for s in range(0, len(values), MAX_COUNT):
            chunk = values[s:s + MAX_COUNT]
            yield "write", (bytes([Cmd.REG_BURST]) + (addr + 4 * s).to_bytes(2, "little")
                            + len(chunk).to_bytes(2, "little")
                            + b"".join(v.to_bytes(4, "little") for v in chunk))
            (status,) = yield "read", 1
            _check(status, f"burst of {len(chunk)} words at register {addr + 4 * s:#06x}")

    def _mem_check(self, addr: int, count: int) -> None:
        if addr < 0 or count < 0 or addr + count > self.link.mem_words:
            raise LinkError(f"memory words {addr} .. {addr + count - 1}: the bridge has "
                            f"{self.link.mem_words}")

    def mem_write(self, addr: int, words: Iterable[int]) -> Op:
        """Write W-byte ``words`` from word address ``addr``."""
        words = [int(v) for v in words]
        self._mem_check(addr, len(words))
        for s in range(0, len(words), MAX_COUNT):
            chunk = words[s:s + MAX_COUNT]
            yield "write", (bytes([Cmd.MEM_WRITE]) + (addr + s).to_bytes(4, "little")
                            + len(chunk).to_bytes(2, "little")
                            + b"".join(v.to_bytes(self.w, "little") for v in chunk))
            (status,) = yield "read", 1
            _check(status, f"memory write of {len(chunk)} words at {addr + s}")

    def mem_read(self, addr: int, count: int) -> Op:
        """``count`` W-byte words from word address ``addr``."""
        self._mem_check(addr, count)
        out: list[int] = []
        for s in range(0, count, MAX_COUNT):
            n = min(MAX_COUNT, count - s)
            yield "write", (bytes([Cmd.MEM_READ]) + (addr + s).to_bytes(4, "little")
                            + n.to_bytes(2, "little"))
            (status,) = yield "read", 1
            _check(status, f"memory read of {n} words at {addr + s}")
            data = yield "read", n * self.w
            out += [int.from_bytes(data[i * self.w:(i + 1) * self.w], "little")
                    for i in range(n)]
        return out

    # ---- named registers and runs
    def read_reg(self, name: str) -> Op:
        return (yield from self.reg_read(self.map.reg(name)))

    def write_reg(self, name: str, value: int) -> Op:
        yield from self.reg_write(self.map.reg(name), value)

    def check_id(self) -> Op:
        """LinkError unless the ID register holds the ArchSpec's (the board runs this design)."""
        want = self.map.reset_values()["ID"]
        got = yield from self.read_reg("ID")
        if got != want:
            raise LinkError(f"ID register {got:#010x}: the bridge runs another design than "
                            f"{self.link.arch.name} (ID {want:#010x})")

    def load_words(self, words: Mapping[int, int] | Iterable[int]) -> Op:
        """Instruction words (index -> 64-bit word, or a sequence from index 0) through the
        window: each run of consecutive indices is one REG_BURST, low half first."""
        words = dict(words) if isinstance(words, Mapping) else dict(enumerate(words))
        for run in _consecutive_runs(words):
            halves = []
            for i in run:
                halves += [words[i] & 0xFFFF_FFFF, (words[i] >> 32) & 0xFFFF_FFFF]
            yield from self.reg_burst(self.map.imem_addr(run[0]), halves)

    def write_image(self, image: Mapping[int, int]) -> Op:
        """External words (address -> value): each run of consecutive addresses is one
        MEM_WRITE."""
        for run in _consecutive_runs(image):
            yield from self.mem_write(run[0], [image[i] for i in run])

    def run(self, entry: int, max_polls: int = 100_000) -> Op:
        """ENTRY, START, poll STATUS until BUSY drops; return STATUS, CYCLES, RETIRED, PC;
        clear DONE (W1C)."""
        yield from self.write_reg("ENTRY", entry)
        yield from self.write_reg("CTRL", 1)
        for _ in range(max_polls):
            status = yield from self.read_reg("STATUS")
            if not status & BUSY:
                break
        else:
            raise LinkError(f"the Program at {entry} still BUSY after {max_polls} polls")
        rec = {"status": status, "cycles": (yield from self.read_reg("CYCLES")),
               "retired": (yield from self.read_reg("RETIRED")),
               "pc": (yield from self.read_reg("PC"))}
        yield from self.write_reg("STATUS", DONE)
        return rec

    def run_gemm(self, isa: IsaProgram, seg: Segment, a: np.ndarray, b: np.ndarray) -> Op:
        """One GEMM segment: its image into memory, the run, C back; return (C, record)."""
        arch = self.link.arch
        yield from self.write_image(isa.image(arch, seg, np.asarray(a), np.asarray(b)))
        rec = yield from self.run(seg.entry)
        if rec["status"] != DONE:
            raise LinkError(f"task {seg.task}: STATUS {rec['status']:#x} after the run, "
                            f"expected DONE only")
        c = yield from self._c_result(isa, seg)
        return c, rec

    def _c_result(self, isa: IsaProgram, seg: Segment) -> Op:
        """C of ``seg`` read over the line: :meth:`IsaProgram.c_result` asks for address
        ranges; each is one MEM_READ."""
        wanted: list[tuple[int, int]] = []
        isa.c_result(self.link.arch, seg, lambda addr, n: wanted.append((addr, n)) or [0] * n)
        got: dict[tuple[int, int], list[int]] = {}
        for addr, n in wanted:
            got[(addr, n)] = yield from self.mem_read(addr, n)
        return isa.c_result(self.link.arch, seg, lambda addr, n: got[(addr, n)])

    def run_program(self, program: Program, isa: IsaProgram, env: dict[str, np.ndarray],
                    meter: Callable[[], Callable[[], dict]] | None = None) -> Op:
        """Every task of ``program`` in order: GEMM tasks on the board (code loaded first),
        the others on the functional model; ``env`` (constants and inputs) receives every
        tensor. Return the per-GEMM records (task, m, k, n, tiles, status, cycles, retired,
        pc). ``meter``: called before each GEMM task, returns a function called after it whose
        dict joins the task's record (e.g. the bytes and time it took on the line)."""
        if isa.ext_words > self.link.mem_words:
            raise LinkError(f"program {program.name} needs {isa.ext_words} memory words; the "
                            f"bridge has {self.link.mem_words}")
        yield from self.check_id()
        yield from self.load_words(isa.words)
        records = []
        for task in program.tasks:
            if not isinstance(task, GemmTask):
                env[task.out] = run_vector(task, env)
                continue
            seg = isa.segment(task.name)
            done = meter() if meter else dict
            c, rec = yield from self.run_gemm(isa, seg, env[task.a], env[task.b])
            env[task.out] = c
            records.append({"task": task.name, "m": task.m, "k": task.k, "n": task.n,
                            "tiles": len(seg.tiles), **rec, **done()})
        return records


def run_sync(op: Op, transport: Transport):
    """Drive the operation ``op`` on a blocking transport; return its result."""
    try:
        kind, arg = next(op)
        while True:
            if kind == "write":
                transport.write(arg)
                kind, arg = op.send(None)
            else:
                kind, arg = op.send(transport.read(arg))
    except StopIteration as stop:
        return stop.value


async def run_async(op: Op, transport):
    """Drive the operation ``op`` on a transport whose ``write``/``read`` are coroutines."""
    try:
        kind, arg = next(op)
        while True:
            if kind == "write":
                await transport.write(arg)
                kind, arg = op.send(None)
            else:
                kind, arg = op.send(await transport.read(arg))
    except StopIteration as stop:
        return stop.value


class SerialTransport:
    """A board's serial port through pyserial (the ``board`` extra): 8N1 at ``baud``; a read
    that gets fewer bytes than asked within ``timeout`` seconds raises :class:`LinkError`."""

    def __init__(self, port: str, baud: float, timeout: float = 2.0):
        serial = require("serial")
        self._ser = serial.Serial(port, baudrate=int(round(baud)), bytesize=8, parity="N",
                                  stopbits=1, timeout=timeout)

    def write(self, data: bytes) -> None:
        self._ser.write(data)

    def read(self, n: int) -> bytes:
        data = self._ser.read(n)
        if len(data) != n:
            raise LinkError(f"serial read: {len(data)} of {n} bytes before the timeout")
        return data

    def close(self) -> None:
        self._ser.close()


class UartHost:
    """The bridge from a PC: :class:`BridgeOps` on a blocking transport (e.g.
    ``UartHost(UartLink(arch, baud=115200), SerialTransport("/dev/ttyUSB1", 115200))``)."""

    def __init__(self, link: UartLink, transport: Transport):
        self.ops, self.transport = BridgeOps(link), transport

    def _do(self, op: Op):
        return run_sync(op, self.transport)

    def read_reg(self, name: str) -> int:
        return self._do(self.ops.read_reg(name))

    def write_reg(self, name: str, value: int) -> None:
        self._do(self.ops.write_reg(name, value))

    def mem_write(self, addr: int, words: Iterable[int]) -> None:
        self._do(self.ops.mem_write(addr, words))

    def mem_read(self, addr: int, count: int) -> list[int]:
        return self._do(self.ops.mem_read(addr, count))

    def run_program(self, program: Program, inputs: Mapping[str, np.ndarray],
                    isa: IsaProgram | None = None) -> tuple[dict[str, np.ndarray], list[dict]]:
        """Run ``program`` (compiled for the link's ArchSpec) with ``inputs``; return every
        tensor and the per-GEMM records."""
        isa = isa if isa is not None else codegen(program, self.ops.link.arch)
        env = {**program.constants, **inputs}
        records = self._do(self.ops.run_program(program, isa, env))
        return env, records
