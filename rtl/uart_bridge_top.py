"""``tw_uart_bridge_top``: the programmable accelerator behind a UART, for a PC on a board's serial
port.

:class:`UartBridgeTop` = :class:`~tilewright.rtl.axi_accel_top.AccelRegs` (the AXI top's
register map and instruction-memory window, unchanged, on its register bus: no AXI4-Lite
adapter) + :class:`BridgeRam` (an on-chip memory of ``mem_words`` words of
``W = beat_bytes(arch)`` bytes on the DMA's memory port: no AXI4 adapter) + a UART
(:mod:`tilewright.rtl.uart`, 8N1, ``divisor = round(clock_hz / baud)`` from the ArchSpec's
``clock_mhz`` and :attr:`UartLink.baud`) + :class:`CommandEngine`, which decodes the framed
commands below into register-bus accesses and memory accesses. Ports: ``rx`` (in), ``tx``
(out), ``irq`` (the register block's). The AXI top (:class:`~tilewright.rtl.axi_accel_top.
AxiAccelTop`) is the same register block behind AXI4-Lite and AXI4; the bridge leaves the two
adapters out because they are most of its logic (docs/fpga.md: 3,574 of the 2×2 bridge's
LUT4 before, 2,134 after).

Protocol (bytes on the line; every multi-byte field little-endian)
    A request is a command byte (:class:`Cmd`) and its header (:data:`HEADER_BYTES`), then for the
    two write bursts their data. Each request gets one reply: a status byte (:class:`Status`),
    then, when the status is OK, the data a read returns. The PC waits for the reply before the
    next request (half duplex).

    ============ ===================== ===================== ====================================
    command      header                data after header     reply
    ============ ===================== ===================== ====================================
    REG_WRITE    addr:2, value:4       —                     status (the register's response)
    REG_READ     addr:2                —                     status (RRESP), value:4 (always)
    REG_BURST    addr:2, count:2       count x 4 bytes       status (worst BRESP); word ``i`` is
                                                             written at ``addr + 4 i``
    MEM_WRITE    addr:4, count:2       count x W bytes       status (RANGE: nothing written)
    MEM_READ     addr:4, count:2       —                     status; when OK count x W bytes
    ============ ===================== ===================== ====================================

    Register addresses are the AXI top's byte addresses (:data:`~tilewright.rtl.axi_accel_top.
    REGISTERS`; ``IMEM_BASE + 8 i`` the instruction window: REG_BURST writes Program words, low
    half first); an address at or above ``2 ** ADDR_WIDTH`` answers DECERR without a bus access.
    Memory addresses count W-byte words (the DMA's addresses, :mod:`tilewright.compiler.codegen`);
    ``addr + count > mem_words`` answers RANGE. An unknown command byte answers BAD_CMD at once.
    Start a Program: REG_WRITE ENTRY, then CTRL = 1; poll: REG_READ STATUS until DONE.

Memory timing
    :class:`BridgeRam` reads the first word in the cycle after the DMA's request (a registered
    read), so the DMA sees a read latency of :data:`BRIDGE_READ_LATENCY` cycles, then one beat
    per cycle, and takes write beats from the cycle after the request on: CYCLES follows the
    accelerator cycle model on ``axi_timing_arch(arch, BRIDGE_READ_LATENCY)``. The UART side
    uses the memory's one read and one write port only when the DMA leaves them free; memory
    commands while a Program runs wait for a free cycle (a byte arriving while the previous one
    still waits is lost): load and read memory between runs.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amaranth import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import beats_per_word
from tilewright.rtl.axi_accel_top import (ADDR_WIDTH, AXI_ACCEL_VERSION, MEM_PORT_IN,
                                          MEM_PORT_OUT, AccelRegs, AxiAccelMap)
from tilewright.rtl.accel_top import ACCEL_GENERATOR_VERSION
from tilewright.rtl.axi_lite import RegBusSignature, manifest_ports, verilog_ports
from tilewright.rtl.dma import COUNT_BITS
from tilewright.rtl.emit import write_verilog
from tilewright.rtl.uart import BITS_PER_BYTE, UartRx, UartTx, baud_divisor

__all__ = ["UART_BRIDGE_TOP_NAME", "UART_BRIDGE_VERSION", "Cmd", "Status", "HEADER_BYTES",
           "BRIDGE_READ_LATENCY", "SIM_CLOCKS_PER_BIT", "DEFAULT_MEM_WORDS", "UartLink",
           "BridgeRam", "CommandEngine", "UartBridgeTop", "generate_uart_bridge_verilog",
           "write_uart_bridge_top", "as_link"]

#: name of the generated top-level Verilog module
UART_BRIDGE_TOP_NAME = "tw_uart_bridge_top"
#: bump when the protocol or the top's behaviour changes
UART_BRIDGE_VERSION = 2
#: read latency the DMA sees on :class:`BridgeRam` (request cycle -> the word's address is read
#: in the next cycle -> the registered word is valid one cycle later)
#: (1 cycle request -> ARVALID, AR handshake, registered read: first beat 2 cycles later)
BRIDGE_READ_LATENCY = 2
#: clock cycles per bit of a simulation link (``UartLink(arch)`` without a baud): the fastest
#: the receiver takes, so a co-simulation spends 40 cycles per byte
SIM_CLOCKS_PER_BIT = 4
#: on-chip memory words when none is given (W bytes each)
DEFAULT_MEM_WORDS = 4096


class Cmd(enum.IntEnum):
    """Command bytes (module docstring)."""

    REG_WRITE = 0x01
    REG_READ = 0x02
    REG_BURST = 0x03
    MEM_WRITE = 0x04
    MEM_READ = 0x05


class Status(enum.IntEnum):
    """Reply status bytes: the AXI4 response codes, then the bridge's own."""

    OK = 0x00
    SLVERR = 0x02
    DECERR = 0x03
    RANGE = 0x10
    BAD_CMD = 0x11


#: header bytes after each command byte
HEADER_BYTES = {Cmd.REG_WRITE: 6, Cmd.REG_READ: 2, Cmd.REG_BURST: 4, Cmd.MEM_WRITE: 6,
                Cmd.MEM_READ: 6}


@dataclass(frozen=True)
class UartLink:
    """The params of the UART bridge top: the ArchSpec, the line's baud rate (None:
    ``clock / SIM_CLOCKS_PER_BIT``, the fastest, for simulation) and the on-chip memory depth
    (W-byte words, a power of two)."""

    arch: ArchSpec
    baud: float | None = None
    mem_words: int = DEFAULT_MEM_WORDS

    def __post_init__(self):
        if not isinstance(self.arch, ArchSpec):
            raise TypeError(f"UartLink takes an ArchSpec, not {type(self.arch).__name__}")
        if (not isinstance(self.mem_words, int) or self.mem_words < 2
                or self.mem_words & (self.mem_words - 1)):
            raise ValueError(f"mem_words must be a power of two >= 2, not {self.mem_words!r}")
        self.divisor                       # the baud is checked here

    @property
    def clock_hz(self) -> float:
        return self.arch.clock_mhz * 1e6

    @property
    def divisor(self) -> int:
        """Clock cycles per bit (:func:`tilewright.rtl.uart.baud_divisor`)."""
        if self.baud is None:
            return SIM_CLOCKS_PER_BIT
        return baud_divisor(self.clock_hz, self.baud)

    @property
    def line_baud(self) -> float:
        """The baud rate the top runs at: ``clock_hz / divisor``."""
        return self.clock_hz / self.divisor

    @property
    def map(self) -> AxiAccelMap:
        return AxiAccelMap.for_arch(self.arch)

    def key(self) -> str:
        return f"{self.arch.content_hash()}-d{self.divisor}-m{self.mem_words}"

    def describe(self) -> str:
        return (f"the UART bridge top for {self.arch.name} ({self.line_baud:g} baud, "
                f"{self.mem_words} x {self.map.data_bytes}-byte memory)")

    def cycles_per_byte(self) -> int:
        return BITS_PER_BYTE * self.divisor


def as_link(params: "UartLink | ArchSpec") -> UartLink:
    """``params`` as a :class:`UartLink`: an ArchSpec alone is the simulation link
    (``UartLink(arch)``: 4 clocks per bit, :data:`DEFAULT_MEM_WORDS` words), so the top runs
    wherever the registry's Program tops run with an ArchSpec (the test ladder)."""
    if isinstance(params, ArchSpec):
        return UartLink(params)
    if not isinstance(params, UartLink):
        raise TypeError(f"the UART bridge top takes a UartLink (an ArchSpec, a baud, a memory "
                        f"depth) or an ArchSpec, not {type(params).__name__}")
    return params


class BridgeRam(wiring.Component):
    """On-chip memory of ``depth`` words of ``data_bytes`` bytes on the accelerator's memory port
    (``mem_*``, the DMA's: :mod:`tilewright.rtl.dma`) and a host port (``host_*``), one
    registered read port and one write port shared between them.

    Memory port (``mem_req_addr`` counts words; ``mem_req_len`` beats, at most ``len_bits``
    bits): ``mem_req_ready`` while no earlier request still has words to read or write. A read
    request taken in cycle ``c`` gives its beats from cycle ``c + BRIDGE_READ_LATENCY`` on, one
    per cycle while ``mem_rd_ready`` (``mem_rd_valid``/``mem_rd_data``); a write request taken in
    cycle ``c`` takes its beats from ``c + 1`` on (``mem_wr_ready`` high until the last). A
    request that leaves the memory (``addr + len > depth``) reads zeros, writes nothing and
    pulses ``bus_error`` on each of its beats.

    Host port: ``host_req`` with ``host_we``, ``host_addr``, ``host_wdata``; ``host_ack`` (same
    cycle) when the port was free: a write is done, a read's word is on ``host_rdata`` in the
    next cycle. The memory port has priority.
    """

    def __init__(self, *, depth: int, data_bytes: int, addr_bits: int, len_bits: int):
        self._depth, self._w = depth, data_bytes
        W = 8 * data_bytes
        self._abits = (depth - 1).bit_length()
        self._len_bits = len_bits
        super().__init__({
            "mem_req_valid": In(1), "mem_req_ready": Out(1), "mem_req_write": In(1),
            "mem_req_addr": In(addr_bits), "mem_req_len": In(len_bits),
            "mem_rd_valid": Out(1), "mem_rd_ready": In(1), "mem_rd_data": Out(W),
            "mem_wr_valid": In(1), "mem_wr_ready": Out(1), "mem_wr_data": In(W),
            "bus_error": Out(1),
            "host_req": In(1), "host_we": In(1), "host_addr": In(self._abits),
            "host_wdata": In(W), "host_ack": Out(1), "host_rdata": Out(W)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=unsigned(8 * self._w), depth=self._depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="sync")
        req = self.mem_req_valid & self.mem_req_ready
        err = Signal()                          # the request being taken leaves the memory
        m.d.comb += err.eq(self.mem_req_addr + self.mem_req_len > self._depth)

        # ---- read side
        r_active, r_err, rvalid, rerr = Signal(), Signal(), Signal(), Signal()
        r_addr, r_left = Signal(self._abits), Signal(self._len_bits)
        w_active, w_err = Signal(), Signal()
        w_addr, w_left = Signal(self._abits), Signal(self._len_bits)
        advance = ~rvalid | self.mem_rd_ready
        issue = r_active & advance
        m.d.comb += [self.mem_req_ready.eq(~r_active & ~w_active),
                     self.mem_rd_valid.eq(rvalid),
                     self.mem_rd_data.eq(Mux(rerr, 0, rp.data))]
        host_rd = self.host_req & ~self.host_we & ~r_active & advance
        m.d.comb += [rp.en.eq(issue | host_rd), rp.addr.eq(Mux(issue, r_addr, self.host_addr))]
        with m.If(advance):
            m.d.sync += [rvalid.eq(issue), rerr.eq(r_err)]
        with m.If(issue):
            m.d.sync += [r_addr.eq(r_addr + 1), r_left.eq(r_left - 1)]
            with m.If(r_left == 1):
                m.d.sync += r_active.eq(0)
        with m.If(req & (self.mem_req_len != 0)):
            with m.If(self.mem_req_write):
                m.d.sync += [w_active.eq(1), w_addr.eq(self.mem_req_addr),
                             w_left.eq(self.mem_req_len), w_err.eq(err)]
            with m.Else():
                m.d.sync += [r_active.eq(1), r_addr.eq(self.mem_req_addr),
                             r_left.eq(self.mem_req_len), r_err.eq(err)]

        # ---- write side
        w_fire = self.mem_wr_valid & w_active
        m.d.comb += self.mem_wr_ready.eq(w_active)
        host_wr = self.host_req & self.host_we & ~w_fire
        m.d.comb += [wp.en.eq(Mux((w_fire & ~w_err) | host_wr, Const(-1, len(wp.en)), 0)),
                     wp.addr.eq(Mux(w_fire, w_addr, self.host_addr)),
                     wp.data.eq(Mux(w_fire, self.mem_wr_data, self.host_wdata))]
        with m.If(w_fire):
            m.d.sync += [w_addr.eq(w_addr + 1), w_left.eq(w_left - 1)]
            with m.If(w_left == 1):
                m.d.sync += w_active.eq(0)

        m.d.comb += [self.bus_error.eq((rvalid & self.mem_rd_ready & rerr) | (w_fire & w_err)),
                     self.host_ack.eq(host_rd | host_wr), self.host_rdata.eq(rp.data)]
        return m


class CommandEngine(wiring.Component):
    """The protocol of the module docstring: bytes in (``rx_data``/``rx_valid``, one-cycle
    pulses from :class:`~tilewright.rtl.uart.UartRx`), bytes out (``tx_*`` to
    :class:`~tilewright.rtl.uart.UartTx`), the register bus ``reg`` of
    :class:`~tilewright.rtl.axi_accel_top.AccelRegs` (one access at a time, done when ``ack``)
    and :class:`BridgeRam`'s host port ``mem_*``. A received byte waits in a one-byte buffer
    until the engine takes it."""

    def __init__(self, *, data_bytes: int, mem_words: int, addr_width: int = ADDR_WIDTH):
        self._w, self._depth, self._aw = data_bytes, mem_words, addr_width
        self._abits = (mem_words - 1).bit_length()
        super().__init__({
            "rx_data": In(8), "rx_valid": In(1),
            "tx_data": Out(8), "tx_valid": Out(1), "tx_ready": In(1),
            "reg": Out(RegBusSignature(addr_width=addr_width)),
            "mem_req": Out(1), "mem_we": Out(1), "mem_addr": Out(self._abits),
            "mem_wdata": Out(8 * data_bytes), "mem_ack": In(1), "mem_rdata": In(8 * data_bytes)})

    def elaborate(self, platform):
        m = Module()
        W, reg = self._w, self.reg
        # the one-byte receive buffer
        rxb, rxv, take = Signal(8), Signal(), Signal()
        with m.If(self.rx_valid):
            m.d.sync += [rxb.eq(self.rx_data), rxv.eq(1)]
        with m.Elif(take):
            m.d.sync += rxv.eq(0)

        cmd, hdr, hidx = Signal(8), Signal(48), Signal(3)
        addr, count = Signal(self._abits), Signal(17)
        word = Signal(max(8 * W, 32))
        widx = Signal(range(max(W, 4)))
        status = Signal(8)
        out = Signal(8 * max(W, 5))
        out_left = Signal(range(max(W, 5) + 1))
        axaddr, axdata = Signal(16), Signal(32)
        hlen = Array(Const(HEADER_BYTES.get(c, 1), 3) for c in range(8))

        def worst(resp):                  # keep the larger (worse) response
            return status.eq(Mux(resp > status, resp, status))

        def reply(value, nbytes=1):
            m.d.sync += [out.eq(value), out_left.eq(nbytes)]
            m.next = "SEND"

        # MEM_*: the header's 32-bit address and 16-bit count inside the memory (hdr is held
        # until the next command)
        in_range = Signal()
        m.d.comb += in_range.eq(hdr[:32] + hdr[32:48] <= self._depth)

        reg_ok = axaddr[self._aw:] == 0
        m.d.comb += [reg.addr.eq(axaddr[:self._aw]), reg.wdata.eq(axdata), reg.wstrb.eq(0xF),
                     self.mem_addr.eq(addr), self.mem_wdata.eq(word[:8 * W])]

        with m.FSM():
            with m.State("CMD"):
                with m.If(rxv):
                    m.d.comb += take.eq(1)
                    m.d.sync += [cmd.eq(rxb), hidx.eq(0), status.eq(0), widx.eq(0)]
                    with m.If((rxb >= min(Cmd)) & (rxb <= max(Cmd))):
                        m.next = "HDR"
                    with m.Else():
                        reply(Status.BAD_CMD)
            with m.State("HDR"):
                with m.If(rxv):
                    m.d.comb += take.eq(1)
                    m.d.sync += [hdr.word_select(hidx, 8).eq(rxb), hidx.eq(hidx + 1)]
                    with m.If(hidx == hlen[cmd[:3]] - 1):
                        m.next = "EXEC"
            with m.State("EXEC"):
                m.d.sync += [axaddr.eq(hdr[:16]), axdata.eq(hdr[16:48])]
                with m.Switch(cmd):
                    with m.Case(Cmd.REG_WRITE):
                        m.next = "AXW"
                    with m.Case(Cmd.REG_READ):
                        m.next = "AXR"
                    with m.Case(Cmd.REG_BURST):
                        m.d.sync += count.eq(hdr[16:32])
                        with m.If(hdr[16:32] == 0):
                            reply(Status.OK)
                        with m.Else():
                            m.next = "BURST_DATA"
                    with m.Case(Cmd.MEM_WRITE, Cmd.MEM_READ):
                        m.d.sync += [addr.eq(hdr[:self._abits]), count.eq(hdr[32:48])]
                        m.next = "MEM_CHECK"
            with m.State("MEM_CHECK"):
                with m.If(~in_range):
                    m.d.sync += status.eq(Status.RANGE)
                with m.If(cmd == Cmd.MEM_READ):
                    with m.If(in_range):
                        reply(Status.OK)
                    with m.Else():
                        m.d.sync += count.eq(0)
                        reply(Status.RANGE)
                with m.Elif(count == 0):
                    reply(Status.OK)
                with m.Else():
                    m.next = "MW_DATA"
            # ---- register accesses (the register bus: one access, answered when ack)
            with m.State("AXW"):
                with m.If(~reg_ok):
                    m.d.sync += worst(Status.DECERR)
                    m.next = "AXW_DONE"
                with m.Else():
                    m.d.comb += [reg.req.eq(1), reg.we.eq(1)]
                    with m.If(reg.ack):
                        m.d.sync += worst(reg.resp.as_value())
                        m.next = "AXW_DONE"
            with m.State("AXW_DONE"):
                with m.If(cmd == Cmd.REG_WRITE):
                    reply(status)
                with m.Else():                          # REG_BURST
                    m.d.sync += [axaddr.eq(axaddr + 4), count.eq(count - 1)]
                    with m.If(count == 1):
                        reply(status)
                    with m.Else():
                        m.next = "BURST_DATA"
            with m.State("AXR"):
                with m.If(~reg_ok):
                    reply(Status.DECERR, 5)
                with m.Else():
                    m.d.comb += reg.req.eq(1)
                    with m.If(reg.ack):
                        reply(Cat(reg.resp.as_value(), Const(0, 6), reg.rdata), 5)
            with m.State("BURST_DATA"):
                with m.If(rxv):
                    m.d.comb += take.eq(1)
                    m.d.sync += [word.eq(Cat(word[8:], rxb)), widx.eq(widx + 1)]
                    with m.If(widx == 3):
                        m.d.sync += [widx.eq(0), axdata.eq(Cat(word[len(word) - 24:], rxb))]
                        m.next = "AXW"
            # ---- memory
            with m.State("MW_DATA"):
                with m.If(rxv):
                    m.d.comb += take.eq(1)
                    m.d.sync += [word.eq(Cat(word[8:], rxb)), widx.eq(widx + 1)]
                    with m.If(widx == W - 1):
                        m.d.sync += widx.eq(0)
                        m.next = "MW_WRITE"
            with m.State("MW_WRITE"):
                # the word is complete in the top W bytes of `word`: move it down first
                go = Signal()
                m.d.comb += go.eq(status == Status.OK)
                with m.If(go):
                    m.d.comb += [self.mem_req.eq(1), self.mem_we.eq(1),
                                 self.mem_wdata.eq(word[len(word) - 8 * W:])]
                with m.If(~go | self.mem_ack):
                    m.d.sync += [addr.eq(addr + 1), count.eq(count - 1)]
                    with m.If(count == 1):
                        reply(status)
                    with m.Else():
                        m.next = "MW_DATA"
            with m.State("MR_ISSUE"):
                m.d.comb += [self.mem_req.eq(1), self.mem_we.eq(0)]
                with m.If(self.mem_ack):
                    m.d.sync += [addr.eq(addr + 1), count.eq(count - 1)]
                    m.next = "MR_WAIT"
            with m.State("MR_WAIT"):
                reply(self.mem_rdata, W)
            # ---- reply bytes, low first
            with m.State("SEND"):
                m.d.comb += [self.tx_valid.eq(1), self.tx_data.eq(out[:8])]
                with m.If(self.tx_ready):
                    m.d.sync += [out.eq(out >> 8), out_left.eq(out_left - 1)]
                    with m.If(out_left == 1):
                        with m.If((cmd == Cmd.MEM_READ) & (count != 0)):
                            m.next = "MR_ISSUE"
                        with m.Else():
                            m.next = "CMD"
        return m


class UartBridgeTop(wiring.Component):
    """AccelRegs + BridgeRam + UART + CommandEngine for one :class:`UartLink` (module
    docstring). Ports: ``rx``, ``tx``, ``irq``."""

    def __init__(self, link: UartLink):
        if not isinstance(link, UartLink):
            raise TypeError(f"UartBridgeTop takes a UartLink, not {type(link).__name__}")
        self._link = link
        self._regs = AccelRegs(link.arch)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "irq": Out(1)})

    @property
    def link(self) -> UartLink:
        return self._link

    def elaborate(self, platform):
        m = Module()
        link, mp, regs = self._link, self._regs.map, self._regs
        m.submodules.accel = regs
        # request lengths: at most COUNT_BITS words of the most beats per on-chip word
        max_len = (2 ** COUNT_BITS - 1) * max(beats_per_word(link.arch).values())
        m.submodules.ram = ram = BridgeRam(depth=link.mem_words, data_bytes=mp.data_bytes,
                                           addr_bits=len(regs.mem_req_addr),
                                           len_bits=max_len.bit_length())
        m.submodules.rx = rx = UartRx(divisor=link.divisor)
        m.submodules.tx = tx = UartTx(divisor=link.divisor)
        m.submodules.engine = eng = CommandEngine(data_bytes=mp.data_bytes,
                                                  mem_words=link.mem_words)
        wiring.connect(m, eng.reg, regs.reg)
        for name in MEM_PORT_OUT:
            m.d.comb += getattr(ram, name).eq(getattr(regs, name))
        for name in MEM_PORT_IN:
            m.d.comb += getattr(regs, name).eq(getattr(ram, name))
        m.d.comb += [regs.writes_pending.eq(0), regs.bus_error.eq(ram.bus_error),
                     rx.rx.eq(self.rx), self.tx.eq(tx.tx), self.irq.eq(regs.irq),
                     eng.rx_data.eq(rx.data), eng.rx_valid.eq(rx.valid),
                     tx.data.eq(eng.tx_data), tx.valid.eq(eng.tx_valid),
                     eng.tx_ready.eq(tx.ready),
                     ram.host_req.eq(eng.mem_req), ram.host_we.eq(eng.mem_we),
                     ram.host_addr.eq(eng.mem_addr), ram.host_wdata.eq(eng.mem_wdata),
                     eng.mem_ack.eq(ram.host_ack), eng.mem_rdata.eq(ram.host_rdata)]
        return m


def generate_uart_bridge_verilog(link: UartLink, platform=None) -> tuple[str, UartBridgeTop]:
    """Elaborate the top for ``link``; return (Verilog text, component)."""
    top = UartBridgeTop(link)
    text = verilog.convert(top, name=UART_BRIDGE_TOP_NAME, ports=verilog_ports(top),
                           emit_src=False, platform=platform)
    return text, top


def write_uart_bridge_top(link: UartLink | ArchSpec, out_dir: str | Path,
                          platform=None) -> dict[str, Any]:
    """Write ``tw_uart_bridge_top.v`` and ``manifest.json`` (ports, the link: divisor, baud,
    memory, the protocol's command and status bytes) to ``out_dir``; return the manifest. An
    ArchSpec is the simulation link (:func:`as_link`)."""
    t0 = time.perf_counter()
    link = as_link(link)
    text, top = generate_uart_bridge_verilog(link, platform)
    mp = link.map
    return write_verilog(out_dir, UART_BRIDGE_TOP_NAME, text, {
        "top": UART_BRIDGE_TOP_NAME,
        "generator": "tilewright.rtl.uart_bridge_top.UartBridgeTop",
        "generator_version": f"{UART_BRIDGE_VERSION}/{AXI_ACCEL_VERSION}/"
                             f"{ACCEL_GENERATOR_VERSION}",
        "arch": link.arch.model_dump(mode="json"),
        "arch_hash": link.arch.content_hash(),
        "ports": manifest_ports(top),
        "link": {"divisor": link.divisor, "baud": link.line_baud, "format": "8N1",
                 "mem_words": link.mem_words, "mem_word_bytes": mp.data_bytes,
                 "commands": {c.name: int(c) for c in Cmd},
                 "status": {s.name: int(s) for s in Status},
                 "header_bytes": {c.name: n for c, n in HEADER_BYTES.items()}},
        "address_map": mp.describe()["s_axil"],
        "generation_seconds": round(time.perf_counter() - t0, 3),
    })
