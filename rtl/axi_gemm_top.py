"""``tw_axi_gemm_top``: the GEMM core behind an AXI4-Lite subordinate port, ready for an SoC.

A CPU drives the core (:class:`tilewright.rtl.gemm_core.GemmCore`) through 32-bit AXI4-Lite
accesses: it writes the A and B buffers, the sizes and START, polls STATUS (or waits for ``irq``),
reads CYCLES and the accumulator. The register and window map is :class:`AxiGemmMap` (one
definition, used by the RTL, the cocotb bench and ``docs/axi.md``).

Ports: ``clk``, ``rst`` (synchronous, active high), ``s_axil_*`` (AXI4-Lite, 32-bit data,
``AxiGemmMap.addr_width`` address bits; timing of :mod:`tilewright.rtl.axi_lite`) and ``irq``
(level: STATUS.DONE).

Address map (byte addresses; the top two address bits select a region of ``2**window_bits``
bytes):

* region 0, registers (:data:`REGISTERS`); any other offset answers DECERR.
* region 1, A buffer window, write-only; region 2, B buffer window, write-only; region 3,
  accumulator window, read-only. Buffer word ``w``, 32-bit chunk ``j`` sits at
  ``base + (w * stride + j) * 4`` where ``stride`` is the chunk count rounded up to a power of
  two. An int8 buffer word of L lanes is ``ceil(L/4)`` chunks, lanes 4j..4j+3 in chunk ``j``
  (lane 4j in bits 7:0); an accumulator word is one chunk per int32 lane. Buffer layouts:
  :mod:`tilewright.compiler.layout`.
* Buffer writes combine in a staging register: a write to chunk ``j`` stores its bytes (per
  WSTRB) in staging chunk ``j``; a write to the word's last chunk also writes the whole staged
  word into the buffer. Write a word's chunks in ascending order, last chunk last. The staging
  register is shared by A and B.
* Responses: OKAY; SLVERR for a write to a read-only register or window, a read of a write-only
  window, or a buffer write while BUSY (the write is dropped); DECERR for an unmapped offset, a
  word beyond a buffer's depth or a chunk beyond a word's chunks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from math import ceil
from pathlib import Path
from typing import Any

from amaranth import Cat, Const, Module, Signal
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec
from tilewright.compiler.layout import GemmLayout
from tilewright.rtl.axi_lite import (AxiLiteBridge, AxiLiteSignature, AxiResp, Register,
                                     decode_registers, describe_registers, manifest_ports,
                                     register_offset, strobe_merge, verilog_ports, version_word)
from tilewright.rtl.emit import write_verilog
from tilewright.rtl.gemm_core import GENERATOR_VERSION, GemmCore

__all__ = ["AXI_TOP_NAME", "AXI_TOP_VERSION", "Register", "REGISTERS", "AxiGemmMap",
           "AxiGemmTop", "generate_axi_verilog", "write_axi_top"]

#: name of the generated top-level Verilog module
AXI_TOP_NAME = "tw_axi_gemm_top"
#: bump when the register map or the top's behaviour changes (VERSION[31:24])
AXI_TOP_VERSION = 1
DATA_BITS = 32
#: smallest region: 4 KiB (one page)
MIN_WINDOW_BITS = 12


REGISTERS: tuple[Register, ...] = (
    Register("ID", 0x00, "ro", "low 32 bits of the ArchSpec content hash (16 hex digits)"),
    Register("VERSION", 0x04, "ro", "[31:24] AXI top version, [23:16].[15:8].[7:0] GEMM-core "
             "generator version"),
    Register("CTRL", 0x08, "wo", "write bit 0 = 1: START a GEMM with M, K, N (ignored while "
             "BUSY); reads 0"),
    Register("STATUS", 0x0C, "rw1c", "bit 0 BUSY (read-only); bit 1 DONE: set when a GEMM "
             "finishes, cleared by START or by writing 1 to it"),
    Register("M", 0x10, "rw", "GEMM M, 16 bits (sampled at START)"),
    Register("K", 0x14, "rw", "GEMM K, 16 bits (sampled at START)"),
    Register("N", 0x18, "rw", "GEMM N, 16 bits (sampled at START)"),
    Register("CYCLES", 0x1C, "ro", "cycles BUSY was high during the last GEMM"),
    Register("CONFIG", 0x20, "ro", "[7:0] rows R, [15:8] cols C, [16] dataflow (0 ws, 1 os)"),
    Register("A_WORDS", 0x24, "ro", "A buffer depth in words"),
    Register("B_WORDS", 0x28, "ro", "B buffer depth in words"),
    Register("ACC_WORDS", 0x2C, "ro", "accumulator depth in words"),
    Register("WINDOW", 0x30, "ro", "window_bits: each region is 2**window_bits bytes"),
)


def _log2_ceil(x: int) -> int:
    return max(0, (x - 1).bit_length())


@dataclass(frozen=True)
class AxiGemmMap:
    """Where everything sits in the top's address space, for one ArchSpec (module docstring)."""

    rows: int
    cols: int
    dataflow: str
    depth_a: int             #: A buffer words
    depth_b: int
    depth_acc: int
    arch_id: int             #: ID register value
    window_bits: int         #: log2 of each region's size in bytes

    @classmethod
    def for_arch(cls, arch: ArchSpec) -> "AxiGemmMap":
        te = arch.tensor_engine
        da, db, dc = GemmLayout.depths(arch)
        rows, cols = te.rows, te.cols
        need = [_log2_ceil(d) + _log2_ceil(s) + 2 for d, s in
                ((da, 1 << _log2_ceil(ceil(rows / 4))), (db, 1 << _log2_ceil(ceil(cols / 4))),
                 (dc, 1 << _log2_ceil(cols)))]
        return cls(rows, cols, te.dataflow, da, db, dc,
                   int(arch.content_hash(), 16) & 0xFFFF_FFFF, max(MIN_WINDOW_BITS, *need))

    # ---- geometry --------------------------------------------------------------------------
    @property
    def addr_width(self) -> int:
        """AXI address bits: 2 region bits above the window."""
        return self.window_bits + 2

    def chunks(self, buf: str) -> int:
        """32-bit chunks per word of buffer ``buf`` ("a", "b" or "acc")."""
        return {"a": ceil(self.rows / 4), "b": ceil(self.cols / 4), "acc": self.cols}[buf]

    def stride(self, buf: str) -> int:
        """Chunk slots per word in the window (chunks rounded up to a power of two)."""
        return 1 << _log2_ceil(self.chunks(buf))

    def depth(self, buf: str) -> int:
        return {"a": self.depth_a, "b": self.depth_b, "acc": self.depth_acc}[buf]

    def base(self, buf: str) -> int:
        """Byte address of buffer ``buf``'s window (region 1, 2 or 3)."""
        return {"a": 1, "b": 2, "acc": 3}[buf] << self.window_bits

    def addr(self, buf: str, word: int, chunk: int = 0) -> int:
        """Byte address of ``chunk`` of ``word`` in buffer ``buf``."""
        return self.base(buf) + (word * self.stride(buf) + chunk) * 4

    @staticmethod
    def reg(name: str) -> int:
        """Byte address of register ``name``."""
        return register_offset(REGISTERS, name)

    def reset_values(self) -> dict[str, int]:
        """Value of each read-only identification register (what a CPU reads after reset)."""
        return {"ID": self.arch_id, "VERSION": version_word(AXI_TOP_VERSION, GENERATOR_VERSION),
                "CONFIG": self.rows | (self.cols << 8) | ((self.dataflow == "os") << 16),
                "A_WORDS": self.depth_a, "B_WORDS": self.depth_b, "ACC_WORDS": self.depth_acc,
                "WINDOW": self.window_bits}

    def describe(self) -> dict[str, Any]:
        """JSON-ready description for manifests and drivers."""
        return {
            "addr_width": self.addr_width, "data_width": DATA_BITS,
            "window_bits": self.window_bits,
            "registers": describe_registers(REGISTERS),
            "windows": {b: {"base": self.base(b), "words": self.depth(b),
                            "chunks_per_word": self.chunks(b), "stride_chunks": self.stride(b),
                            "access": "ro" if b == "acc" else "wo"} for b in ("a", "b", "acc")},
            "reset_values": self.reset_values(),
        }


class AxiGemmTop(wiring.Component):
    """GemmCore + AXI4-Lite register file for one ArchSpec (module docstring)."""

    def __init__(self, arch: ArchSpec):
        if not isinstance(arch, ArchSpec):
            raise TypeError(f"AxiGemmTop takes an ArchSpec, not {type(arch).__name__}")
        self._core = GemmCore(arch)          # validates formats and buffer sizes
        self._map = AxiGemmMap.for_arch(arch)
        super().__init__({"s_axil": In(AxiLiteSignature(addr_width=self._map.addr_width)),
                          "irq": Out(1)})

    @property
    def map(self) -> AxiGemmMap:
        return self._map

    def elaborate(self, platform):
        m = Module()
        mp, core = self._map, self._core
        m.submodules.core = core
        m.submodules.bridge = bridge = AxiLiteBridge(addr_width=mp.addr_width)
        wiring.connect(m, wiring.flipped(self.s_axil), bridge.axi)
        bus = bridge.reg
        wb = mp.window_bits
        region = bus.addr[wb:wb + 2]
        offset = bus.addr[:wb]

        # the write data merged into a 32-bit old value under the byte strobes
        merged = strobe_merge(bus)

        resp = Signal(AxiResp)
        ack, rdata = Signal(), Signal(DATA_BITS)
        m.d.comb += [bus.ack.eq(ack), bus.rdata.eq(rdata), bus.resp.eq(resp)]

        # ---- control and status registers ----------------------------------------------------
        size = {name: Signal(16, name=f"reg_{name.lower()}") for name in ("M", "K", "N")}
        done, busy_q = Signal(), Signal()
        start = Signal()
        m.d.comb += [core.m.eq(size["M"]), core.k.eq(size["K"]), core.n.eq(size["N"]),
                     core.start.eq(start), self.irq.eq(done)]
        m.d.sync += busy_q.eq(core.busy)
        with m.If(busy_q & ~core.busy):
            m.d.sync += done.eq(1)
        fixed = mp.reset_values()
        ro_values = {**fixed, "STATUS": Cat(core.busy, done), "CYCLES": core.cycles}

        # ---- buffer windows -------------------------------------------------------------------
        max_chunks = max(mp.chunks("a"), mp.chunks("b"))
        staging = Signal(32 * max_chunks)
        # cycles an accumulator read has waited; the data is there after `latency` of them
        latency = self._core.arch.tensor_engine.pipeline.host_read_latency
        acc_wait = Signal(range(latency + 1))
        if latency > 1:        # pipeline.host_read: the read's registers always advance
            m.d.comb += core.acc_rd_en.eq(1)

        def word_chunk(buf):
            bits = _log2_ceil(mp.stride(buf))
            return offset[2 + bits:], offset[2:2 + bits] if bits else Const(0, 1)

        acc_word, acc_chunk = word_chunk("acc")
        m.d.comb += core.acc_rd_addr.eq(acc_word)

        def out_of_range(buf, word, chunk):
            """DECERR condition, or None when no address of the window is out of range
            (comparisons that cannot be true are left out: lint CMPCONST/CASEOVERLAP)."""
            conds = []
            if mp.depth(buf) < 1 << len(word):
                conds.append(word >= mp.depth(buf))
            if mp.chunks(buf) < mp.stride(buf):
                conds.append(chunk >= mp.chunks(buf))
            return None if not conds else conds[0] if len(conds) == 1 else conds[0] | conds[1]

        def decerr_then(buf, word, chunk):
            """Answer DECERR when out of range; return the If/Elif for the next condition."""
            oor = out_of_range(buf, word, chunk)
            if oor is None:
                return m.If
            with m.If(oor):
                m.d.comb += resp.eq(AxiResp.DECERR)
            return m.Elif

        with m.If(bus.req):
            m.d.comb += ack.eq(1)                       # zero wait states unless noted
            with m.If(region == 0):
                self._registers(m, bus, offset, resp, rdata, ro_values, size, start, done,
                                merged)
            for idx, buf in ((1, "a"), (2, "b")):
                with m.Elif(region == idx):
                    word, chunk = word_chunk(buf)
                    wr = core.a_wr_en if buf == "a" else core.b_wr_en
                    wr_addr = core.a_wr_addr if buf == "a" else core.b_wr_addr
                    wr_data = core.a_wr_data if buf == "a" else core.b_wr_data
                    last = mp.chunks(buf) - 1
                    with decerr_then(buf, word, chunk)(~bus.we | core.busy):
                        m.d.comb += resp.eq(AxiResp.SLVERR)
                    with m.Else():
                        for j in range(mp.chunks(buf)):
                            with m.If(chunk == j):
                                m.d.sync += staging[32 * j:32 * j + 32].eq(
                                    merged(staging[32 * j:32 * j + 32]))
                        with m.If(chunk == last):
                            full = Cat(staging[:32 * last],
                                       merged(staging[32 * last:32 * last + 32]))
                            m.d.comb += [wr.eq(1), wr_addr.eq(word),
                                         wr_data.eq(full[:len(wr_data)])]
            with m.Else():                                  # region 3: accumulator
                with decerr_then("acc", acc_word, acc_chunk)(bus.we):
                    m.d.comb += resp.eq(AxiResp.SLVERR)
                with m.Elif(acc_wait != latency if latency > 1 else ~acc_wait):
                    m.d.comb += ack.eq(0)                   # read port: data `latency` later
                    m.d.sync += acc_wait.eq(acc_wait + 1 if latency > 1 else 1)
                with m.Else():
                    m.d.sync += acc_wait.eq(0)
                    m.d.comb += rdata.eq(core.acc_rd_data.word_select(acc_chunk, 32))
        return m

    @staticmethod
    def _registers(m, bus, offset, resp, rdata, ro_values, size, start, done, merged):
        """Region 0: decode ``offset`` against :data:`REGISTERS`."""
        def ctrl_status(r):
            if r.name == "CTRL":
                with m.If(bus.we & bus.wstrb[0] & bus.wdata[0]):
                    m.d.comb += start.eq(1)
                    m.d.sync += done.eq(0)
            else:                                   # STATUS
                m.d.comb += rdata.eq(ro_values["STATUS"])
                with m.If(bus.we & bus.wstrb[0] & bus.wdata[1]):
                    m.d.sync += done.eq(0)

        decode_registers(m, bus, offset, REGISTERS, resp=resp, rdata=rdata, ro_values=ro_values,
                         rw_regs=size, merged=merged, other=ctrl_status)


def generate_axi_verilog(arch: ArchSpec, platform=None) -> tuple[str, AxiGemmTop]:
    """Elaborate the AXI top for ``arch``; return (Verilog text, component). AXI ports are named
    ``s_axil_<channel signal>`` (single underscore)."""

    top = AxiGemmTop(arch)
    text = verilog.convert(top, name=AXI_TOP_NAME, ports=verilog_ports(top), emit_src=False,
                           platform=platform)
    return text, top


def write_axi_top(arch: ArchSpec, out_dir: str | Path, platform=None) -> dict[str, Any]:
    """Write ``tw_axi_gemm_top.v`` and ``manifest.json`` (ports, address map) to ``out_dir``;
    return the manifest."""

    t0 = time.perf_counter()
    text, top = generate_axi_verilog(arch, platform)
    ports = manifest_ports(top)
    return write_verilog(out_dir, AXI_TOP_NAME, text, {
        "top": AXI_TOP_NAME,
        "generator": "tilewright.rtl.axi_gemm_top.AxiGemmTop",
        "generator_version": f"{AXI_TOP_VERSION}/{GENERATOR_VERSION}",
        "arch": arch.model_dump(mode="json"),
        "arch_hash": arch.content_hash(),
        "ports": ports,
        "address_map": top.map.describe(),
        "generation_seconds": round(time.perf_counter() - t0, 3),
    })
