"""``tw_axi_accel_top``: the programmable accelerator behind AXI — AXI4-Lite control, AXI4 memory.

:class:`AxiAccelTop` = :class:`~tilewright.rtl.accel_top.AccelTop` (controller + DMA +
double-buffered GEMM core) with

* an AXI4-Lite subordinate port ``s_axil_*`` (32-bit data, :data:`ADDR_WIDTH` address bits;
  handshakes of :class:`~tilewright.rtl.axi_lite.AxiLiteBridge`): the registers of
  :data:`REGISTERS` and a write-only window onto the controller's instruction memory;
* an AXI4 manager port ``m_axi_*`` (:class:`AxiMasterBridge`): the DMA's one external-memory
  port as INCR bursts, data width ``8 * W`` bits (``W = beat_bytes(arch)`` bytes, a power of two
  from 1 to 128 — AXI4 allows 8 to 1024-bit data buses), byte addresses ``W * word address``;
* ``irq`` (level): ``STATUS.DONE & IRQ_EN[0]``.

Address map of ``s_axil`` (byte addresses)
    ``0x0000 .. 0x1FFF``: registers (:data:`REGISTERS`; any other offset, or an offset that is not
    a multiple of 4, answers DECERR). ``IMEM_BASE = 0x2000 ..``: instruction-memory window,
    write-only: instruction word ``i`` (64 bits) is written as two 32-bit halves, low half at
    ``IMEM_BASE + 8 i``, high half at ``IMEM_BASE + 8 i + 4``. The low half goes to a staging
    register; the write of the high half writes the whole word (staged low half + this write)
    into the instruction memory. Write the low half first. Responses: SLVERR for a write to a
    read-only register, a read of the window, a window write or a START while the accelerator is
    BUSY (the write is dropped); DECERR as above.

Run semantics
    START (CTRL bit 0) starts the controller at ENTRY and clears DONE, ERROR and BUS_ERROR.
    BUSY (STATUS bit 0) is high from START until the controller has executed END *and* every
    write burst of the AXI port has been answered on B; then DONE is set (and ``irq`` rises if
    IRQ_EN). So when DONE is seen, every STORE's data is in memory. ERROR: the run stopped at an
    unknown opcode (PC holds its address). BUS_ERROR: some R or B beat of the run answered
    other than OKAY (data is still transferred; the flag is sticky until START or W1C).
    CYCLES and RETIRED are the controller's (``busy`` cycles, instructions issued): the timing
    contract of :mod:`tilewright.rtl.accel_top` applies, with the memory latency the AXI port
    sees (:class:`AxiMasterBridge`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.compiler.codegen import IMEM_WORDS, WORD_BITS, beat_bytes
from tilewright.rtl.accel_top import ACCEL_GENERATOR_VERSION, AccelTop
from tilewright.rtl.axi_lite import (AxiLiteBridge, AxiLiteSignature, AxiResp, Field,
                                     RegBusSignature, Register,
                                     decode_registers, describe_registers, manifest_ports,
                                     register_named, register_offset, strobe_merge,
                                     verilog_ports, version_word)
from tilewright.rtl.controller import PC_BITS
from tilewright.rtl.regmap import systemrdl, write_register_map
from tilewright.rtl.dma import ADDR_BITS
from tilewright.rtl.emit import write_verilog

__all__ = ["AXI_ACCEL_TOP_NAME", "AXI_ACCEL_VERSION", "REGISTERS", "Register", "IMEM_BASE",
           "ADDR_WIDTH", "STATUS_BITS", "AxiSignature", "AxiMasterBridge", "AccelRegs",
           "AxiAccelTop", "MEM_PORT_OUT", "MEM_PORT_IN", "AxiAccelMap",
           "axi_data_bytes", "generate_axi_accel_verilog", "write_axi_accel_top"]

#: name of the generated top-level Verilog module
AXI_ACCEL_TOP_NAME = "tw_axi_accel_top"
#: bump when the register map or the top's behaviour changes (VERSION[31:24])
AXI_ACCEL_VERSION = 1
#: byte address of the instruction-memory window (a power of two >= IMEM_WORDS * 8)
IMEM_BASE = 1 << (IMEM_WORDS * WORD_BITS // 8 - 1).bit_length()
#: AXI4-Lite address bits: registers below IMEM_BASE, the window above
ADDR_WIDTH = (IMEM_BASE - 1).bit_length() + 1
#: AXI4 limits: beats per INCR burst, bytes a burst may not cross
MAX_BURST_BEATS = 256
PAGE_BYTES = 4096
#: the manager's AxPROT (unprivileged, non-secure, data) and AxCACHE (normal non-cacheable
#: bufferable)
AXPROT, AXCACHE = 0b010, 0b0011


REGISTERS: tuple[Register, ...] = (
    Register("ID", 0x00, "ro", "low 32 bits of the ArchSpec content hash"),
    Register("VERSION", 0x04, "ro", "[31:24] AXI accelerator top version, [23:16].[15:8].[7:0] "
             "accelerator generator version", (
                 Field("PATCH", 0, 8, "ro", "accelerator generator version, patch"),
                 Field("MINOR", 8, 8, "ro", "accelerator generator version, minor"),
                 Field("MAJOR", 16, 8, "ro", "accelerator generator version, major"),
                 Field("TOP", 24, 8, "ro", "AXI accelerator top version"))),
    Register("CTRL", 0x08, "wo", "write bit 0 = 1: START at ENTRY (SLVERR while BUSY); reads 0",
             (Field("START", 0, 1, "wo", "1: start the Program at ENTRY (SLVERR while BUSY)"),)),
    Register("STATUS", 0x0C, "rw1c", "bit 0 BUSY (ro); bit 1 DONE (W1C); bit 2 ERROR (ro: "
             "unknown opcode); bit 3 BUS_ERROR (W1C: an R/B response was not OKAY); START "
             "clears bits 1-3", (
                 Field("BUSY", 0, 1, "ro", "the controller is running a Program"),
                 Field("DONE", 1, 1, "w1c", "a Program reached END; START clears it"),
                 Field("ERROR", 2, 1, "ro", "an unknown opcode stopped the Program; START "
                       "clears it"),
                 Field("BUS_ERROR", 3, 1, "w1c", "an AXI4 R/B response was not OKAY; START "
                       "clears it"))),
    Register("ENTRY", 0x10, "rw", f"instruction index START begins at ({PC_BITS} bits)",
             (Field("INDEX", 0, PC_BITS, "rw", "instruction index START begins at"),)),
    Register("PC", 0x14, "ro", "the controller's program counter"),
    Register("CYCLES", 0x18, "ro", "cycles the controller was busy in the last run"),
    Register("RETIRED", 0x1C, "ro", "instructions issued in the last run (END included)"),
    Register("IRQ_EN", 0x20, "rw", "bit 0: irq = STATUS.DONE when set (reset 0)",
             (Field("DONE", 0, 1, "rw", "drive irq with STATUS.DONE"),)),
    Register("CONFIG", 0x24, "ro", "[7:0] rows R, [15:8] cols C, [16] dataflow (0 ws, 1 os), "
             "[31:24] AXI data bytes W", (
                 Field("ROWS", 0, 8, "ro", "tensor-engine rows R"),
                 Field("COLS", 8, 8, "ro", "tensor-engine columns C"),
                 Field("DATAFLOW", 16, 1, "ro", "0 weight stationary, 1 output stationary"),
                 Field("DATA_BYTES", 24, 8, "ro", "W: bytes per AXI4 beat of the memory port"))),
    Register("IMEM_WORDS", 0x28, "ro", "instruction memory depth (64-bit words)"),
)
#: STATUS bit positions (from the STATUS register's fields)
STATUS_BITS = {f.name: f.lsb for f in register_named(REGISTERS, "STATUS").field_list()}




def axi_data_bytes(arch: ArchSpec) -> int:
    """W: bytes per AXI4 beat of the memory port (= the DMA's beat). Raises ArchSpecError when
    W is beyond AXI4's 1024-bit bus."""
    w = beat_bytes(arch)
    if w > 128:
        raise ArchSpecError(f"{arch.name}: offchip.bandwidth_gbps={arch.offchip.bandwidth_gbps} "
                            f"at clock_mhz={arch.clock_mhz} gives {w}-byte beats; the AXI4 "
                            f"memory port accepts 1 to 128 bytes (8 to 1024 bits)")
    return w


@dataclass(frozen=True)
class AxiAccelMap:
    """The register values and addresses of the top for one ArchSpec (module docstring)."""

    rows: int
    cols: int
    dataflow: str
    data_bytes: int          #: W, bytes per AXI4 beat
    arch_id: int             #: ID register value

    @classmethod
    def for_arch(cls, arch: ArchSpec) -> "AxiAccelMap":
        te = arch.tensor_engine
        if not te.systolic:     # CONFIG describes a systolic array (rows, cols, dataflow)
            raise ArchSpecError(f"{arch.name}: tensor_engine.kind = {te.kind!r}: the AXI "
                             f"accelerator top's CONFIG register describes a systolic array; "
                             f"accepted: 'systolic' (the tile-MAC kinds run on the accelerator "
                             f"top without AXI: tilewright sim --rtl --top accel)")
        return cls(te.rows, te.cols, te.dataflow, axi_data_bytes(arch),
                   int(arch.content_hash(), 16) & 0xFFFF_FFFF)

    @property
    def axi_addr_width(self) -> int:
        """``m_axi`` address bits: the DMA's word address scaled to bytes."""
        return ADDR_BITS + (self.data_bytes - 1).bit_length()

    @staticmethod
    def reg(name: str) -> int:
        """Byte address of register ``name``."""
        return register_offset(REGISTERS, name)

    @staticmethod
    def imem_addr(index: int, high: bool = False) -> int:
        """Byte address of the low (or high) half of instruction word ``index``."""
        if not 0 <= index < IMEM_WORDS:
            raise ValueError(f"instruction index {index}: accepted 0 .. {IMEM_WORDS - 1}")
        return IMEM_BASE + 8 * index + 4 * bool(high)

    def reset_values(self) -> dict[str, int]:
        """Each identification register's value (what a CPU reads after reset)."""
        return {"ID": self.arch_id,
                "VERSION": version_word(AXI_ACCEL_VERSION, ACCEL_GENERATOR_VERSION),
                "CONFIG": register_named(REGISTERS, "CONFIG").pack(
                    ROWS=self.rows, COLS=self.cols, DATAFLOW=int(self.dataflow == "os"),
                    DATA_BYTES=self.data_bytes),
                "IMEM_WORDS": IMEM_WORDS}

    def describe(self) -> dict[str, Any]:
        """JSON-ready description for manifests and drivers."""
        return {"s_axil": {"addr_width": ADDR_WIDTH, "data_width": 32, "imem_base": IMEM_BASE,
                           "imem_words": IMEM_WORDS,
                           "registers": describe_registers(REGISTERS),
                           "reset_values": self.reset_values()},
                "m_axi": {"addr_width": self.axi_addr_width, "data_width": 8 * self.data_bytes,
                          "id_width": 1, "burst": "INCR", "max_burst_beats": MAX_BURST_BEATS,
                          "page_bytes": PAGE_BYTES}}


class AxiSignature(wiring.Signature):
    """AXI4 (full) from the manager's side: AW, W, B, AR, R with ``id_width`` ID bits, 8-bit
    AxLEN, AxSIZE, AxBURST, AxLOCK, AxCACHE, AxPROT, AxQOS; no user signals."""

    def __init__(self, *, addr_width: int, data_width: int, id_width: int = 1):
        if data_width not in tuple(8 << i for i in range(8)):
            raise ValueError(f"AXI4 data_width must be a power of two from 8 to 1024 bits, not "
                             f"{data_width!r}")
        self._addr_width, self._data_width = addr_width, data_width
        members: dict[str, Any] = {}
        for ch in ("aw", "ar"):
            members.update({f"{ch}id": Out(id_width), f"{ch}addr": Out(addr_width),
                            f"{ch}len": Out(8), f"{ch}size": Out(3), f"{ch}burst": Out(2),
                            f"{ch}lock": Out(1), f"{ch}cache": Out(4), f"{ch}prot": Out(3),
                            f"{ch}qos": Out(4), f"{ch}valid": Out(1), f"{ch}ready": In(1)})
            if ch == "aw":
                members.update({"wdata": Out(data_width), "wstrb": Out(data_width // 8),
                                "wlast": Out(1), "wvalid": Out(1), "wready": In(1),
                                "bid": In(id_width), "bresp": In(2), "bvalid": In(1),
                                "bready": Out(1)})
        members.update({"rid": In(id_width), "rdata": In(data_width), "rresp": In(2),
                        "rlast": In(1), "rvalid": In(1), "rready": Out(1)})
        super().__init__(members)

    def __eq__(self, other):
        return (isinstance(other, AxiSignature) and other._addr_width == self._addr_width
                and other._data_width == self._data_width)

    def __repr__(self):
        return f"AxiSignature(addr_width={self._addr_width}, data_width={self._data_width})"


class AxiMasterBridge(wiring.Component):
    """The DMA's external-memory port (:mod:`tilewright.rtl.dma`) -> an AXI4 manager ``axi``.

    Timing contract (``sync`` domain)
        * ``mem_req_ready`` is high while no AR or AW burst of an earlier request is still to
          be issued; a request is taken in the cycle it is valid and ready.
        * From the next cycle, the request's ``len`` beats go out as INCR bursts (AxSIZE =
          log2 W, all strobes set) of at most 256 beats that never cross a 4 KiB boundary, one
          AR (or AW) after the other, each held until its ready. IDs are 0: R data comes back
          in order.
        * Read data is passed through: ``mem_rd_valid = rvalid``, ``rready = mem_rd_ready``.
          Write data likewise (``wvalid = mem_wr_valid``, ``mem_wr_ready = wready``), ``wlast``
          computed from the same burst rule. So with a subordinate that is always ready and
          answers the first R beat ``k`` cycles after the AR handshake, one beat per cycle,
          the DMA sees a read latency ``L = k + 1`` (AR valid in the cycle after the request).
        * ``bready`` is always high. ``writes_pending``: an AW is still to be issued or a B is
          outstanding. ``bus_error`` pulses for one cycle per R or B beat whose response is not
          OKAY.
    """

    def __init__(self, *, data_bytes: int):
        if data_bytes not in tuple(1 << i for i in range(8)):
            raise ValueError(f"data_bytes must be a power of two from 1 to 128, not "
                             f"{data_bytes!r}")
        self._w = data_bytes
        self._shift = (data_bytes - 1).bit_length()
        W = 8 * data_bytes
        super().__init__({
            "mem_req_valid": In(1), "mem_req_ready": Out(1), "mem_req_write": In(1),
            "mem_req_addr": In(ADDR_BITS), "mem_req_len": In(32),
            "mem_rd_valid": Out(1), "mem_rd_ready": In(1), "mem_rd_data": Out(W),
            "mem_wr_valid": In(1), "mem_wr_ready": Out(1), "mem_wr_data": In(W),
            "writes_pending": Out(1), "bus_error": Out(1),
            "axi": Out(AxiSignature(addr_width=ADDR_BITS + self._shift, data_width=W)),
        })

    @staticmethod
    def _burst_limit(to_page):
        """min(256, ``to_page``): the beats a burst from here may have (``to_page``: beats to
        the 4 KiB boundary)."""
        return Mux(to_page < MAX_BURST_BEATS, to_page, MAX_BURST_BEATS)

    def _beats_to_page(self, byte_addr):
        """Beats from ``byte_addr`` to the next 4 KiB boundary."""
        return (PAGE_BYTES - byte_addr[:12]) >> self._shift

    def elaborate(self, platform):
        m = Module()
        axi, w, shift = self.axi, self._w, self._shift
        abits = ADDR_BITS + shift
        m.d.comb += [axi.awsize.eq(shift), axi.arsize.eq(shift), axi.awburst.eq(1),
                     axi.arburst.eq(1), axi.awcache.eq(AXCACHE), axi.arcache.eq(AXCACHE),
                     axi.awprot.eq(AXPROT), axi.arprot.eq(AXPROT),
                     axi.wstrb.eq(Const(-1, w)), axi.bready.eq(1)]
        # AR and AW issuers: the bursts still to be issued of the current request
        issuers = {}
        for ch in ("ar", "aw"):
            active = Signal(name=f"{ch}_active")
            addr = Signal(abits, name=f"{ch}_next_addr")
            left = Signal(32, name=f"{ch}_left")
            # beats from addr to the 4 KiB boundary, kept with addr (not derived from it in
            # the cycle the burst issues: that subtract led the ECP5 critical path), and
            # lim = min(256, to_page) kept with it (the compare led it next, into AxLEN)
            to_page = Signal(range(PAGE_BYTES // w + 1), name=f"{ch}_to_page")
            lim = Signal(range(MAX_BURST_BEATS + 1), name=f"{ch}_lim")
            # more bursts follow: left > lim, from a 9-bit compare and the high bits' OR (not
            # a 32-bit carry chain); this burst then has lim beats, else left
            more = Signal(name=f"{ch}_more")
            lo = MAX_BURST_BEATS.bit_length()               # bits of a burst's beat count
            m.d.comb += more.eq((left[lo:] != 0) | (left[:lo] > lim))
            valid, ready = getattr(axi, f"{ch}valid"), getattr(axi, f"{ch}ready")
            m.d.comb += [valid.eq(active), getattr(axi, f"{ch}addr").eq(addr),
                         getattr(axi, f"{ch}len").eq(Mux(more, lim, left[:len(lim)]) - 1)]
            # the next state of both cases computed side by side, chosen by `more` (a burst
            # of lim beats with more to come; or the last burst, after which they are unused)
            with m.If(valid & ready):
                next_page = Mux(lim == to_page, PAGE_BYTES // w, to_page - lim)
                m.d.sync += [addr.eq(addr + (lim << shift)), left.eq(left - lim),
                             to_page.eq(next_page), lim.eq(self._burst_limit(next_page))]
                with m.If(~more):
                    m.d.sync += active.eq(0)
            issuers[ch] = (active, addr, left, to_page, lim)
        m.d.comb += self.mem_req_ready.eq(~issuers["ar"][0] & ~issuers["aw"][0])

        # write-data side: wlast by the same burst rule
        w_addr = Signal(abits)
        w_left = Signal(32)
        w_idx = Signal(range(MAX_BURST_BEATS))
        page_end = Signal()
        m.d.comb += page_end.eq((w_addr[:12] + w)[:12] == 0)
        m.d.comb += [axi.wvalid.eq(self.mem_wr_valid), axi.wdata.eq(self.mem_wr_data),
                     self.mem_wr_ready.eq(axi.wready),
                     axi.wlast.eq((w_left == 1) | page_end | (w_idx == MAX_BURST_BEATS - 1))]
        with m.If(axi.wvalid & axi.wready):
            m.d.sync += [w_addr.eq(w_addr + w), w_left.eq(w_left - 1),
                         w_idx.eq(Mux(axi.wlast, 0, w_idx + 1))]

        with m.If(self.mem_req_valid & self.mem_req_ready & (self.mem_req_len != 0)):
            byte_addr = Cat(Const(0, shift), self.mem_req_addr) if shift else self.mem_req_addr
            first = self._beats_to_page(byte_addr)
            with m.If(self.mem_req_write):
                active, addr, left, to_page, lim = issuers["aw"]
                m.d.sync += [active.eq(1), addr.eq(byte_addr), left.eq(self.mem_req_len),
                             to_page.eq(first), lim.eq(self._burst_limit(first)),
                             w_addr.eq(byte_addr), w_left.eq(self.mem_req_len), w_idx.eq(0)]
            with m.Else():
                active, addr, left, to_page, lim = issuers["ar"]
                m.d.sync += [active.eq(1), addr.eq(byte_addr), left.eq(self.mem_req_len),
                             to_page.eq(first), lim.eq(self._burst_limit(first))]

        # read data pass-through
        m.d.comb += [self.mem_rd_valid.eq(axi.rvalid), self.mem_rd_data.eq(axi.rdata),
                     axi.rready.eq(self.mem_rd_ready)]
        # outstanding write responses
        outstanding = Signal(16)
        aw_fire, b_fire = axi.awvalid & axi.awready, axi.bvalid & axi.bready
        with m.If(aw_fire & ~b_fire):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(b_fire & ~aw_fire):
            m.d.sync += outstanding.eq(outstanding - 1)
        m.d.comb += [self.writes_pending.eq(issuers["aw"][0] | (outstanding != 0)),
                     self.bus_error.eq((b_fire & (axi.bresp != 0))
                                       | (axi.rvalid & axi.rready & (axi.rresp != 0)))]
        return m


#: the AccelTop memory-port signals AccelRegs passes through (outputs, then inputs)
MEM_PORT_OUT = ("mem_req_valid", "mem_req_write", "mem_req_addr", "mem_req_len",
                "mem_rd_ready", "mem_wr_valid", "mem_wr_data")
MEM_PORT_IN = ("mem_req_ready", "mem_rd_valid", "mem_rd_data", "mem_wr_ready")


class AccelRegs(wiring.Component):
    """AccelTop + the register map of the module docstring on a register bus ``reg``
    (:class:`~tilewright.rtl.axi_lite.RegBusSignature`, :data:`ADDR_WIDTH` bits, zero wait
    states: ``ack = req``), the AccelTop's memory port passed through (``mem_*``, the DMA's),
    ``writes_pending`` (in: the memory still owes write responses; DONE waits for it),
    ``bus_error`` (in: a one-cycle pulse sets STATUS.BUS_ERROR) and ``irq``. The AXI top puts
    AXI4-Lite and AXI4 around it; the UART bridge drives ``reg`` and ``mem_*`` directly."""

    def __init__(self, arch: ArchSpec):
        if not isinstance(arch, ArchSpec):
            raise TypeError(f"AccelRegs takes an ArchSpec, not {type(arch).__name__}")
        self._map = AxiAccelMap.for_arch(arch)          # W checked here
        self._accel = AccelTop(arch)
        acc = self._accel.signature.members
        super().__init__({
            "reg": In(RegBusSignature(addr_width=ADDR_WIDTH)),
            **{n: Out(acc[n].shape) for n in MEM_PORT_OUT},
            **{n: In(acc[n].shape) for n in MEM_PORT_IN},
            "writes_pending": In(1), "bus_error": In(1), "irq": Out(1)})

    @property
    def map(self) -> AxiAccelMap:
        return self._map

    def elaborate(self, platform):
        m = Module()
        accel = self._accel
        m.submodules.accel = accel
        for name in MEM_PORT_OUT:
            m.d.comb += getattr(self, name).eq(getattr(accel, name))
        for name in MEM_PORT_IN:
            m.d.comb += getattr(accel, name).eq(getattr(self, name))

        bus = self.reg
        resp, ack, rdata = Signal(AxiResp), Signal(), Signal(32)
        m.d.comb += [bus.ack.eq(ack), bus.rdata.eq(rdata), bus.resp.eq(resp)]
        merged = strobe_merge(bus)

        # run state: `pending` from START until the controller is done and writes are answered
        pending, done, bus_err = Signal(), Signal(), Signal()
        entry, irq_en = Signal(len(accel.entry)), Signal()
        busy = Signal()
        m.d.comb += [busy.eq(pending | accel.busy), accel.entry.eq(entry),
                     self.irq.eq(done & irq_en)]
        with m.If(pending & ~accel.busy & ~self.writes_pending):
            m.d.sync += [pending.eq(0), done.eq(1)]
        with m.If(self.bus_error):
            m.d.sync += bus_err.eq(1)
        status = Cat(busy, done, accel.error, bus_err)
        ro = {**self._map.reset_values(), "STATUS": status, "PC": accel.pc,
              "CYCLES": accel.cycles, "RETIRED": accel.retired}
        staging = Signal(32)
        region = bus.addr[ADDR_WIDTH - 1]

        with m.If(bus.req):
            m.d.comb += ack.eq(1)
            with m.If(region == 0):
                self._registers(m, bus, resp, rdata, ro, {"ENTRY": entry, "IRQ_EN": irq_en},
                                merged, busy, accel.start, pending, done, bus_err)
            with m.Else():                                      # instruction-memory window
                with m.If(~bus.we | busy):
                    m.d.comb += resp.eq(AxiResp.SLVERR)
                with m.Elif(bus.addr[2] == 0):
                    m.d.sync += staging.eq(merged(staging))
                with m.Else():
                    m.d.comb += [accel.imem_wr_en.eq(1),
                                 accel.imem_wr_addr.eq(bus.addr[3:ADDR_WIDTH - 1]),
                                 accel.imem_wr_data.eq(Cat(staging, merged(Const(0, 32))))]
        return m

    @staticmethod
    def _registers(m, bus, resp, rdata, ro, rw_regs, merged, busy, start, pending, done,
                   bus_err):
        """Registers below :data:`IMEM_BASE`: decode ``bus.addr`` against :data:`REGISTERS`
        (``ro["STATUS"]`` is the STATUS value)."""
        def ctrl_status(r):
            if r.name == "CTRL":
                with m.If(bus.we & bus.wstrb[0] & bus.wdata[0]):
                    with m.If(busy):
                        m.d.comb += resp.eq(AxiResp.SLVERR)
                    with m.Else():
                        m.d.comb += start.eq(1)
                        m.d.sync += [pending.eq(1), done.eq(0), bus_err.eq(0)]
            else:                                   # STATUS
                m.d.comb += rdata.eq(ro["STATUS"])
                with m.If(bus.we & bus.wstrb[0]):
                    with m.If(bus.wdata[STATUS_BITS["DONE"]]):
                        m.d.sync += done.eq(0)
                    with m.If(bus.wdata[STATUS_BITS["BUS_ERROR"]]):
                        m.d.sync += bus_err.eq(0)

        decode_registers(m, bus, bus.addr, REGISTERS, resp=resp, rdata=rdata, ro_values=ro,
                         rw_regs=rw_regs, merged=merged, other=ctrl_status)



class AxiAccelTop(wiring.Component):
    """AccelRegs + AXI4-Lite registers (:class:`AxiLiteBridge`) + AXI4 memory manager
    (:class:`AxiMasterBridge`) for one ArchSpec (module docstring)."""

    def __init__(self, arch: ArchSpec):
        if not isinstance(arch, ArchSpec):
            raise TypeError(f"AxiAccelTop takes an ArchSpec, not {type(arch).__name__}")
        self._regs = AccelRegs(arch)                    # W checked here
        self._map = self._regs.map
        self._master = AxiMasterBridge(data_bytes=self._map.data_bytes)
        super().__init__({
            "s_axil": In(AxiLiteSignature(addr_width=ADDR_WIDTH)),
            "m_axi": Out(self._master.signature.members["axi"].signature),
            "irq": Out(1)})

    @property
    def map(self) -> AxiAccelMap:
        return self._map

    def elaborate(self, platform):
        m = Module()
        regs, master = self._regs, self._master
        m.submodules.regs, m.submodules.master = regs, master
        m.submodules.bridge = bridge = AxiLiteBridge(addr_width=ADDR_WIDTH)
        wiring.connect(m, wiring.flipped(self.s_axil), bridge.axi)
        wiring.connect(m, wiring.flipped(self.m_axi), master.axi)
        wiring.connect(m, bridge.reg, regs.reg)
        for name in MEM_PORT_OUT:
            m.d.comb += getattr(master, name).eq(getattr(regs, name))
        for name in MEM_PORT_IN:
            m.d.comb += getattr(regs, name).eq(getattr(master, name))
        m.d.comb += [regs.writes_pending.eq(master.writes_pending),
                     regs.bus_error.eq(master.bus_error), self.irq.eq(regs.irq)]
        return m


def generate_axi_accel_verilog(arch: ArchSpec, platform=None) -> tuple[str, AxiAccelTop]:
    """Elaborate the top for ``arch``; return (Verilog text, component). Ports are named
    ``s_axil_<signal>`` and ``m_axi_<signal>``. Raises ArchSpecError for a memory beat wider
    than AXI4 allows."""

    axi_data_bytes(arch)                 # a beat wider than AXI4: the error before elaborating
    top = AxiAccelTop(arch)
    text = verilog.convert(top, name=AXI_ACCEL_TOP_NAME, ports=verilog_ports(top),
                           emit_src=False, platform=platform)
    return text, top


def register_map_rdl(arch: ArchSpec) -> str:
    """SystemRDL of the control port for ``arch``: :data:`REGISTERS` (identification registers
    with their values for ``arch`` as reset values) and the instruction-memory window (two
    32-bit halves per 64-bit instruction word, low half first)."""
    return systemrdl(AXI_ACCEL_TOP_NAME, REGISTERS,
                     doc=f"tilewright programmable accelerator, AXI4-Lite control port "
                         f"({arch.name})",
                     window=("IMEM", IMEM_BASE, 2 * IMEM_WORDS, 32),
                     reset=AxiAccelMap.for_arch(arch).reset_values())


def write_axi_accel_top(arch: ArchSpec, out_dir: str | Path, platform=None) -> dict[str, Any]:
    """Write ``tw_axi_accel_top.v``, the register map (:func:`register_map_rdl` as SystemRDL, C
    header, HTML and IP-XACT: :func:`tilewright.rtl.regmap.write_register_map`) and
    ``manifest.json`` (ports, address map, register-map files) to ``out_dir``; return the
    manifest."""

    t0 = time.perf_counter()
    text, top = generate_axi_accel_verilog(arch, platform)
    ports = manifest_ports(top)
    regmap = write_register_map(out_dir, AXI_ACCEL_TOP_NAME, register_map_rdl(arch))
    return write_verilog(out_dir, AXI_ACCEL_TOP_NAME, text, {
        "register_map": regmap,
        "top": AXI_ACCEL_TOP_NAME,
        "generator": "tilewright.rtl.axi_accel_top.AxiAccelTop",
        "generator_version": f"{AXI_ACCEL_VERSION}/{ACCEL_GENERATOR_VERSION}",
        "arch": arch.model_dump(mode="json"),
        "arch_hash": arch.content_hash(),
        "ports": ports,
        "address_map": top.map.describe(),
        "generation_seconds": round(time.perf_counter() - t0, 3),
    })
