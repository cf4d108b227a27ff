"""``tw_uart_bridge_top``: the programmable accelerator behind a UART, for a PC on a board's serial
port.

:class:`UartBridgeTop` = :class:`~tilewright.rtl.axi_accel_top.AxiAccelTop` (its AXI4-Lite
register map and instruction-memory window, unchanged) + :class:`BridgeRam` (an on-chip memory of
``mem_words`` words of ``W = beat_bytes(arch)`` bytes on the top's AXI4 manager port) + a UART
(:mod:`tilewright.rtl.uart`, 8N1, ``divisor = round(clock_hz / baud)`` from the ArchSpec's
``clock_mhz`` and :attr:`UartLink.baud`) + :class:`CommandEngine`, which decodes the framed
commands below into AXI4-Lite accesses and memory accesses. Ports: ``rx`` (in), ``tx`` (out),
``irq`` (the AXI top's).

Protocol (bytes on the line; every multi-byte field little-endian)
    A request is a command byte (:class:`Cmd`) and its header (:data:`HEADER_BYTES`), then for the
    two write bursts their data. Each request gets one reply: a status byte (:class:`Status`),
    then, when the status is OK, the data a read returns. The PC waits for the reply before the
    next request (half duplex).

    ============ ===================== ===================== ====================================
    command      header                data after header     reply
    ============ ===================== ===================== ====================================
    REG_WRITE    addr:2, value:4       —                     status (the AXI4-Lite BRESP)
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
    :class:`BridgeRam` answers the first R beat 2 cycles after the AR handshake (a registered
    read), then one beat per cycle, and takes W beats from the AW cycle on: the same as
    cocotbext-axi's AxiRam behind the AXI top, so the DMA sees a read latency of
    :data:`BRIDGE_READ_LATENCY` cycles and CYCLES follows the accelerator cycle model on
    ``axi_timing_arch(arch, BRIDGE_READ_LATENCY)``. The UART side uses the memory's one read and
    one write port only when the AXI side leaves them free; memory commands while a Program runs
    wait for a free cycle (a byte arriving while the previous one still waits is lost): load and
    read memory between runs.
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
from tilewright.rtl.axi_accel_top import (ADDR_WIDTH, AXI_ACCEL_VERSION, AxiAccelMap,
                                          AxiAccelTop, AxiSignature)
from tilewright.rtl.accel_top import ACCEL_GENERATOR_VERSION
from tilewright.rtl.axi_lite import AxiLiteSignature, manifest_ports, verilog_ports
from tilewright.rtl.emit import write_verilog
from tilewright.rtl.uart import BITS_PER_BYTE, UartRx, UartTx, baud_divisor

__all__ = ["UART_BRIDGE_TOP_NAME", "UART_BRIDGE_VERSION", "Cmd", "Status", "HEADER_BYTES",
           "BRIDGE_READ_LATENCY", "SIM_CLOCKS_PER_BIT", "DEFAULT_MEM_WORDS", "UartLink",
           "BridgeRam", "CommandEngine", "UartBridgeTop", "generate_uart_bridge_verilog",
           "write_uart_bridge_top", "as_link"]

#: name of the generated top-level Verilog module
UART_BRIDGE_TOP_NAME = "tw_uart_bridge_top"
#: bump when the protocol or the top's behaviour changes
UART_BRIDGE_VERSION = 1
#: read latency the DMA sees through the AXI top's manager bridge with :class:`BridgeRam`
#: (1 cycle request -> ARVALID, AR handshake, registered read: first beat 2 cycles later)
BRIDGE_READ_LATENCY = 3
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
    """On-chip memory of ``depth`` words of ``data_bytes`` bytes: an AXI4 subordinate port ``axi``
    and a host port (``host_*``), one registered read port and one write port shared between them.

    AXI4 (INCR bursts, AxSIZE = log2 W, IDs ignored; timing in the module docstring): AR is taken
    while no burst is being read or in the cycle the last beat of one is read; R beats come out
    one per cycle while RREADY; AW is taken while no write burst is open (or with the open one's
    last W beat), W from the AW cycle on. A burst that leaves the memory answers DECERR on every
    R beat (data 0) or on its B, and writes nothing. B: one per burst, in order.

    Host port: ``host_req`` with ``host_we``, ``host_addr``, ``host_wdata``; ``host_ack`` (same
    cycle) when the port was free: a write is done, a read's word is on ``host_rdata`` in the
    next cycle. The AXI side has priority.
    """

    def __init__(self, *, depth: int, data_bytes: int, addr_width: int):
        self._depth, self._w = depth, data_bytes
        self._shift = (data_bytes - 1).bit_length()
        W = 8 * data_bytes
        self._abits = (depth - 1).bit_length()
        super().__init__({
            "axi": In(AxiSignature(addr_width=addr_width, data_width=W)),
            "host_req": In(1), "host_we": In(1), "host_addr": In(self._abits),
            "host_wdata": In(W), "host_ack": Out(1), "host_rdata": Out(W)})

    def elaborate(self, platform):
        m = Module()
        axi, shift, depth = self.axi, self._shift, self._depth
        m.submodules.mem = mem = Memory(shape=unsigned(8 * self._w), depth=depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="sync")
        m.d.comb += [axi.bid.eq(0), axi.rid.eq(0)]

        def fits(byte_addr, beats):                  # a burst inside the memory
            return (byte_addr >> shift) + beats <= depth

        # ---- read side
        r_active, r_err, rvalid, rlast, rerr = Signal(), Signal(), Signal(), Signal(), Signal()
        r_addr, r_left = Signal(self._abits), Signal(9)
        advance = ~rvalid | axi.rready
        issue = r_active & advance
        m.d.comb += [axi.arready.eq(~r_active | (issue & (r_left == 1))),
                     axi.rvalid.eq(rvalid), axi.rlast.eq(rlast),
                     axi.rresp.eq(Mux(rerr, 3, 0)), axi.rdata.eq(Mux(rerr, 0, rp.data))]
        host_rd = self.host_req & ~self.host_we & ~r_active & advance
        m.d.comb += [rp.en.eq(issue | host_rd), rp.addr.eq(Mux(issue, r_addr, self.host_addr))]
        with m.If(advance):
            m.d.sync += [rvalid.eq(issue), rlast.eq(issue & (r_left == 1)), rerr.eq(r_err)]
        with m.If(issue):
            m.d.sync += [r_addr.eq(r_addr + 1), r_left.eq(r_left - 1)]
            with m.If(r_left == 1):
                m.d.sync += r_active.eq(0)
        with m.If(axi.arvalid & axi.arready):
            m.d.sync += [r_active.eq(1), r_addr.eq(axi.araddr >> shift),
                         r_left.eq(axi.arlen + 1), r_err.eq(~fits(axi.araddr, axi.arlen + 1))]

        # ---- write side
        w_active, w_err = Signal(), Signal()
        w_addr = Signal(self._abits)
        aw_fire = axi.awvalid & axi.awready
        w_fire = axi.wvalid & axi.wready
        m.d.comb += [axi.awready.eq(~w_active | (w_fire & axi.wlast)),
                     axi.wready.eq(w_active | axi.awvalid)]
        # the beat's address and error: the open burst's, else the burst taken this cycle
        cur_addr = Mux(w_active, w_addr, (axi.awaddr >> shift)[:self._abits])
        cur_err = Mux(w_active, w_err, ~fits(axi.awaddr, axi.awlen + 1))
        axi_wr = w_fire & ~cur_err
        host_wr = self.host_req & self.host_we & ~w_fire
        m.d.comb += [wp.en.eq(Mux(axi_wr | host_wr, Const(-1, len(wp.en)), 0)),
                     wp.addr.eq(Mux(w_fire, cur_addr, self.host_addr)),
                     wp.data.eq(Mux(w_fire, axi.wdata, self.host_wdata))]
        with m.If(w_fire):
            m.d.sync += w_addr.eq(cur_addr + 1)
            with m.If(axi.wlast):
                m.d.sync += w_active.eq(0)
        with m.If(aw_fire & ~(w_fire & axi.wlast & ~w_active)):   # a burst stays open
            m.d.sync += [w_active.eq(1), w_err.eq(~fits(axi.awaddr, axi.awlen + 1))]
        with m.If(aw_fire & ~(w_fire & ~w_active)):          # its first beat is still to come
            m.d.sync += w_addr.eq((axi.awaddr >> shift)[:self._abits])
        # B: one per closed burst, in order; the error of each queued in a shift register
        b_count = Signal(8)
        b_errs = Signal(256)
        b_head = Signal(8)
        closed = w_fire & axi.wlast
        b_fire = axi.bvalid & axi.bready
        m.d.comb += [axi.bvalid.eq(b_count != 0), axi.bresp.eq(Mux(b_errs.bit_select(b_head, 1),
                                                                   3, 0))]
        with m.If(closed & ~b_fire):
            m.d.sync += b_count.eq(b_count + 1)
        with m.Elif(b_fire & ~closed):
            m.d.sync += b_count.eq(b_count - 1)
        with m.If(closed):
            m.d.sync += b_errs.bit_select((b_head + b_count)[:8], 1).eq(cur_err)
        with m.If(b_fire):
            m.d.sync += b_head.eq(b_head + 1)

        m.d.comb += [self.host_ack.eq(host_rd | host_wr), self.host_rdata.eq(rp.data)]
        return m


class CommandEngine(wiring.Component):
    """The protocol of the module docstring: bytes in (``rx_data``/``rx_valid``, one-cycle
    pulses from :class:`~tilewright.rtl.uart.UartRx`), bytes out (``tx_*`` to
    :class:`~tilewright.rtl.uart.UartTx`), an AXI4-Lite manager ``axil`` (one access at a time)
    and :class:`BridgeRam`'s host port ``mem_*``. A received byte waits in a one-byte buffer
    until the engine takes it."""

    def __init__(self, *, data_bytes: int, mem_words: int, addr_width: int = ADDR_WIDTH):
        self._w, self._depth, self._aw = data_bytes, mem_words, addr_width
        self._abits = (mem_words - 1).bit_length()
        super().__init__({
            "rx_data": In(8), "rx_valid": In(1),
            "tx_data": Out(8), "tx_valid": Out(1), "tx_ready": In(1),
            "axil": Out(AxiLiteSignature(addr_width=addr_width)),
            "mem_req": Out(1), "mem_we": Out(1), "mem_addr": Out(self._abits),
            "mem_wdata": Out(8 * data_bytes), "mem_ack": In(1), "mem_rdata": In(8 * data_bytes)})

    def elaborate(self, platform):
        m = Module()
        W, axil = self._w, self.axil
        # the one-byte receive buffer
        rxb, rxv, take = Signal(8), Signal(), Signal()
        with m.If(self.rx_valid):
            m.d.sync += [rxb.eq(self.rx_data), rxv.eq(1)]
        with m.Elif(take):
            m.d.sync += rxv.eq(0)

        cmd, hdr, hidx = Signal(8), Signal(48), Signal(3)
        addr, count = Signal(32), Signal(17)
        word = Signal(max(8 * W, 32))
        widx = Signal(range(max(W, 4)))
        status = Signal(8)
        out = Signal(8 * max(W, 5))
        out_left = Signal(range(max(W, 5) + 1))
        axaddr, axdata = Signal(16), Signal(32)
        aw_done, w_done, ar_done = Signal(), Signal(), Signal()
        hlen = Array(Const(HEADER_BYTES.get(c, 1), 3) for c in range(8))

        def worst(resp):                  # keep the larger (worse) AXI response
            return status.eq(Mux(resp > status, resp, status))

        def reply(value, nbytes=1):
            m.d.sync += [out.eq(value), out_left.eq(nbytes)]
            m.next = "SEND"

        def in_range(beats):
            return (addr + beats) <= self._depth   # addr: the header's, count: beats

        axil_ok = axaddr[self._aw:] == 0
        m.d.comb += [axil.awaddr.eq(axaddr), axil.araddr.eq(axaddr), axil.wdata.eq(axdata),
                     axil.wstrb.eq(0xF), axil.bready.eq(1), axil.rready.eq(1),
                     self.mem_addr.eq(addr[:self._abits]), self.mem_wdata.eq(word[:8 * W])]

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
                m.d.sync += [axaddr.eq(hdr[:16]), axdata.eq(hdr[16:48]),
                             aw_done.eq(0), w_done.eq(0), ar_done.eq(0)]
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
                        m.d.sync += [addr.eq(hdr[:32]), count.eq(hdr[32:48])]
                        m.next = "MEM_CHECK"
            with m.State("MEM_CHECK"):
                with m.If(~in_range(count)):
                    m.d.sync += status.eq(Status.RANGE)
                with m.If(cmd == Cmd.MEM_READ):
                    with m.If(in_range(count)):
                        reply(Status.OK)
                    with m.Else():
                        m.d.sync += count.eq(0)
                        reply(Status.RANGE)
                with m.Elif(count == 0):
                    reply(Status.OK)
                with m.Else():
                    m.next = "MW_DATA"
            # ---- AXI4-Lite accesses
            with m.State("AXW"):
                with m.If(~axil_ok):
                    m.d.sync += worst(Status.DECERR)
                    m.next = "AXW_DONE"
                with m.Else():
                    m.d.comb += [axil.awvalid.eq(~aw_done), axil.wvalid.eq(~w_done)]
                    with m.If(axil.awvalid & axil.awready):
                        m.d.sync += aw_done.eq(1)
                    with m.If(axil.wvalid & axil.wready):
                        m.d.sync += w_done.eq(1)
                    with m.If(axil.bvalid):
                        m.d.sync += worst(axil.bresp)
                        m.next = "AXW_DONE"
            with m.State("AXW_DONE"):
                m.d.sync += [aw_done.eq(0), w_done.eq(0)]
                with m.If(cmd == Cmd.REG_WRITE):
                    reply(status)
                with m.Else():                          # REG_BURST
                    m.d.sync += [axaddr.eq(axaddr + 4), count.eq(count - 1)]
                    with m.If(count == 1):
                        reply(status)
                    with m.Else():
                        m.next = "BURST_DATA"
            with m.State("AXR"):
                with m.If(~axil_ok):
                    reply(Status.DECERR, 5)
                with m.Else():
                    m.d.comb += axil.arvalid.eq(~ar_done)
                    with m.If(axil.arvalid & axil.arready):
                        m.d.sync += ar_done.eq(1)
                    with m.If(axil.rvalid):
                        reply(Cat(axil.rresp, Const(0, 6), axil.rdata), 5)
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
    """AxiAccelTop + BridgeRam + UART + CommandEngine for one :class:`UartLink` (module
    docstring). Ports: ``rx``, ``tx``, ``irq``."""

    def __init__(self, link: UartLink):
        if not isinstance(link, UartLink):
            raise TypeError(f"UartBridgeTop takes a UartLink, not {type(link).__name__}")
        self._link = link
        self._axi = AxiAccelTop(link.arch)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "irq": Out(1)})

    @property
    def link(self) -> UartLink:
        return self._link

    def elaborate(self, platform):
        m = Module()
        link, mp = self._link, self._axi.map
        m.submodules.accel = acc = self._axi
        m.submodules.ram = ram = BridgeRam(depth=link.mem_words, data_bytes=mp.data_bytes,
                                           addr_width=mp.axi_addr_width)
        m.submodules.rx = rx = UartRx(divisor=link.divisor)
        m.submodules.tx = tx = UartTx(divisor=link.divisor)
        m.submodules.engine = eng = CommandEngine(data_bytes=mp.data_bytes,
                                                  mem_words=link.mem_words)
        wiring.connect(m, acc.m_axi, ram.axi)
        wiring.connect(m, eng.axil, acc.s_axil)
        m.d.comb += [rx.rx.eq(self.rx), self.tx.eq(tx.tx), self.irq.eq(acc.irq),
                     eng.rx_data.eq(rx.data), eng.rx_valid.eq(rx.valid),
                     tx.data.eq(eng.tx_data), tx.valid.eq(eng.tx_valid),
                     eng.tx_ready.eq(tx.ready),
                     ram.host_req.eq(eng.mem_req), ram.host_we.eq(eng.mem_we),
                     ram.host_addr.eq(eng.mem_addr), ram.host_wdata.eq(eng.mem_wdata),
                     eng.mem_ack.eq(ram.host_ack), eng.mem_rdata.eq(ram.host_rdata)]
        return m


def generate_uart_bridge_verilog(link: UartLink) -> tuple[str, UartBridgeTop]:
    """Elaborate the top for ``link``; return (Verilog text, component)."""
    top = UartBridgeTop(link)
    text = verilog.convert(top, name=UART_BRIDGE_TOP_NAME, ports=verilog_ports(top),
                           emit_src=False)
    return text, top


def write_uart_bridge_top(link: UartLink | ArchSpec, out_dir: str | Path) -> dict[str, Any]:
    """Write ``tw_uart_bridge_top.v`` and ``manifest.json`` (ports, the link: divisor, baud,
    memory, the protocol's command and status bytes) to ``out_dir``; return the manifest. An
    ArchSpec is the simulation link (:func:`as_link`)."""
    t0 = time.perf_counter()
    link = as_link(link)
    text, top = generate_uart_bridge_verilog(link)
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
