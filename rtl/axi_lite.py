"""AXI4-Lite slave: the bus signature and a bridge from AXI4-Lite to a simple register bus.

:class:`AxiLiteSignature` is the five AXI4-Lite channels (AW, W, B, AR, R) seen from the manager
(master); a subordinate (slave) port is ``In(AxiLiteSignature(...))``. :class:`RegBusSignature` is
a one-access-at-a-time register bus; :class:`AxiLiteBridge` turns AXI4-Lite into it, so a
peripheral only decodes addresses and answers accesses.

Bridge timing contract (all in the ``sync`` domain)
    * AW, W and AR are accepted independently, each into a one-entry holding register:
      ``awready = 1`` while no write address is held, ``wready = 1`` while no write data is held,
      ``arready = 1`` while no read address is held. AW and W may arrive in either order.
    * A write is issued on the register bus once both its AW and W are held and the previous
      write response has been accepted (``bvalid`` low); a read once its AR is held and the
      previous read data has been accepted (``rvalid`` low). When both are ready the bridge
      alternates (after a write, a waiting read goes first, and vice versa).
    * Register bus: ``req`` with ``we``, ``addr``, ``wdata``, ``wstrb`` stay stable until the
      peripheral answers with ``ack`` high for one cycle (``ack`` may be high in the first cycle
      of ``req``: zero wait states), giving ``rdata`` (reads) and ``resp`` in that same cycle.
    * The answer is registered onto B (``bresp``) or R (``rdata``, ``rresp``) at the clock edge
      that ends the ``ack`` cycle and held until ``bready`` / ``rready``. With zero wait states
      ``bvalid``/``rvalid`` rise one cycle after the clock edge of the last AW/W (or AR)
      handshake, and the holding register is free again in that same cycle: one access per
      2 cycles, back to back.

``awprot``/``arprot`` are part of the bus but unused (every access is treated alike).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import _ir
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiResp", "AxiLiteSignature", "RegBusSignature", "AxiLiteBridge", "verilog_ports",
           "manifest_ports",
           "Register", "register_offset", "describe_registers", "version_word", "strobe_merge",
           "decode_registers"]


class AxiResp(enum.Enum, shape=2):
    """AXI response codes (BRESP/RRESP)."""

    OKAY = 0
    EXOKAY = 1     #: not used by AXI4-Lite
    SLVERR = 2     #: subordinate error: the address exists but the access is not allowed
    DECERR = 3     #: decode error: nothing at this address


def _check_widths(addr_width: object, data_width: object) -> None:
    if not isinstance(addr_width, int) or isinstance(addr_width, bool) or not 3 <= addr_width <= 64:
        raise TypeError(f"addr_width must be an integer from 3 to 64, not {addr_width!r}")
    if data_width not in (32, 64) or isinstance(data_width, bool):
        raise ValueError(f"data_width must be 32 or 64 (AXI4-Lite), not {data_width!r}")


class _Widths:
    """``addr_width`` / ``data_width`` (checked by :func:`_check_widths`) of a bus, a bus
    signature or a component with one such port."""

    def _set_widths(self, addr_width: int, data_width: int) -> None:
        _check_widths(addr_width, data_width)
        self._addr_width, self._data_width = addr_width, data_width

    @property
    def addr_width(self) -> int:
        return self._addr_width

    @property
    def data_width(self) -> int:
        return self._data_width


class _BusSignature(_Widths, wiring.Signature):
    """A signature made by ``members(addr_width, data_width)``; equal to another of the same
    class with the same widths."""

    def __init__(self, members: dict, *, addr_width: int, data_width: int):
        self._set_widths(addr_width, data_width)
        super().__init__(members)

    def __eq__(self, other):
        return (isinstance(other, type(self)) and other.addr_width == self.addr_width
                and other.data_width == self.data_width)

    def __repr__(self):
        return (f"{type(self).__name__}(addr_width={self.addr_width}, "
                f"data_width={self.data_width})")


class AxiLiteSignature(_BusSignature):
    """AXI4-Lite, from the manager's side: ``addr_width`` address bits (byte addresses),
    ``data_width`` (32 or 64) data bits, ``data_width // 8`` write strobes."""

    def __init__(self, *, addr_width: int, data_width: int = 32):
        _check_widths(addr_width, data_width)
        super().__init__({
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1),
            "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        }, addr_width=addr_width, data_width=data_width)


class RegBusSignature(_BusSignature):
    """One-access-at-a-time register bus, from the initiator's side (see module docstring)."""

    def __init__(self, *, addr_width: int, data_width: int = 32):
        _check_widths(addr_width, data_width)
        super().__init__({
            "req": Out(1), "we": Out(1), "addr": Out(addr_width), "wdata": Out(data_width),
            "wstrb": Out(data_width // 8),
            "ack": In(1), "rdata": In(data_width), "resp": In(AxiResp),
        }, addr_width=addr_width, data_width=data_width)


class AxiLiteBridge(_Widths, wiring.Component):
    """AXI4-Lite subordinate port ``axi`` -> register bus ``reg`` (timing in module docstring)."""

    def __init__(self, *, addr_width: int, data_width: int = 32):
        self._set_widths(addr_width, data_width)
        super().__init__({
            "axi": In(AxiLiteSignature(addr_width=addr_width, data_width=data_width)),
            "reg": Out(RegBusSignature(addr_width=addr_width, data_width=data_width)),
        })

    def elaborate(self, platform):
        m = Module()
        axi, reg = self.axi, self.reg
        aw_full, w_full, ar_full = Signal(), Signal(), Signal()
        aw_addr = Signal(self._addr_width)
        ar_addr = Signal(self._addr_width)
        w_data = Signal(self._data_width)
        w_strb = Signal(self._data_width // 8)
        bvalid, rvalid = Signal(), Signal()
        bresp, rresp = Signal(2), Signal(2)
        rdata = Signal(self._data_width)
        m.d.comb += [axi.awready.eq(~aw_full), axi.wready.eq(~w_full), axi.arready.eq(~ar_full),
                     axi.bvalid.eq(bvalid), axi.bresp.eq(bresp),
                     axi.rvalid.eq(rvalid), axi.rresp.eq(rresp), axi.rdata.eq(rdata)]
        with m.If(axi.awvalid & ~aw_full):
            m.d.sync += [aw_full.eq(1), aw_addr.eq(axi.awaddr)]
        with m.If(axi.wvalid & ~w_full):
            m.d.sync += [w_full.eq(1), w_data.eq(axi.wdata), w_strb.eq(axi.wstrb)]
        with m.If(axi.arvalid & ~ar_full):
            m.d.sync += [ar_full.eq(1), ar_addr.eq(axi.araddr)]
        with m.If(axi.bready & bvalid):
            m.d.sync += bvalid.eq(0)
        with m.If(axi.rready & rvalid):
            m.d.sync += rvalid.eq(0)

        # one register access at a time; `active` locks the choice until the access is acked.
        # The choice (pick_wr, pick_rd) is a function of the bridge's registers alone, so it is
        # kept in registers itself, loaded with the choice of the next state: the register
        # bus's address and the peripheral's decode start at a flip-flop (this cycle's choice
        # behind bvalid/rvalid and the arbitration led ws8x8's accelerator top on ECP5).
        active_wr, active_rd, prefer_rd = Signal(), Signal(), Signal()
        pick_wr, pick_rd = Signal(name="pick_wr_q"), Signal(name="pick_rd_q")
        m.d.comb += [reg.req.eq(pick_wr | pick_rd), reg.we.eq(pick_wr),
                     reg.addr.eq(Mux(pick_wr, aw_addr, ar_addr)),
                     reg.wdata.eq(w_data), reg.wstrb.eq(w_strb)]
        ack_wr, ack_rd = reg.req & reg.ack & pick_wr, reg.req & reg.ack & ~pick_wr
        wait = reg.req & ~reg.ack
        # the next state of every register the choice reads (the statements above and below)
        nxt = {
            "aw_full": Mux(ack_wr, 0, aw_full | axi.awvalid),
            "w_full": Mux(ack_wr, 0, w_full | axi.wvalid),
            "ar_full": Mux(ack_rd, 0, ar_full | axi.arvalid),
            "bvalid": Mux(ack_wr, 1, bvalid & ~axi.bready),
            "rvalid": Mux(ack_rd, 1, rvalid & ~axi.rready),
            "active_wr": Mux(wait, pick_wr, Mux(reg.req & reg.ack, 0, active_wr)),
            "active_rd": Mux(wait, pick_rd, Mux(reg.req & reg.ack, 0, active_rd)),
            "prefer_rd": Mux(reg.req & reg.ack, pick_wr, prefer_rd),
        }
        wr_ready = nxt["aw_full"] & nxt["w_full"] & ~nxt["bvalid"]
        rd_ready = nxt["ar_full"] & ~nxt["rvalid"]
        m.d.sync += [
            pick_wr.eq(nxt["active_wr"] | (~nxt["active_rd"] & wr_ready
                                           & ~(rd_ready & nxt["prefer_rd"]))),
            pick_rd.eq(~nxt["active_wr"] & (nxt["active_rd"] | (rd_ready & ~(
                wr_ready & ~(rd_ready & nxt["prefer_rd"])))))]
        with m.If(wait):
            m.d.sync += [active_wr.eq(pick_wr), active_rd.eq(pick_rd)]
        with m.If(reg.req & reg.ack):
            m.d.sync += [active_wr.eq(0), active_rd.eq(0), prefer_rd.eq(pick_wr)]
            with m.If(pick_wr):
                m.d.sync += [aw_full.eq(0), w_full.eq(0), bvalid.eq(1), bresp.eq(reg.resp)]
            with m.Else():
                m.d.sync += [ar_full.eq(0), rvalid.eq(1), rresp.eq(reg.resp),
                             rdata.eq(reg.rdata)]
        return m


def verilog_ports(component: wiring.Component, *, separator: str = "_") -> dict:
    """``ports=`` for :func:`amaranth.back.verilog.convert` naming each flattened member
    ``path[0] + separator + path[1] ...`` (Amaranth's default separator is ``__``). With ``"_"``
    an AXI port ``s_axil`` becomes ``s_axil_awaddr`` etc., the names SoC tools and
    ``cocotbext.axi.AxiLiteBus.from_prefix(dut, "s_axil")`` expect."""

    ports = {}
    for path, member, value in component.signature.flatten(component):
        name = separator.join(str(p) for p in path)
        if name in ports:
            raise ValueError(f"verilog_ports: two members flatten to the port name {name!r}")
        direction = _ir.PortDirection.Input if member.flow == In else _ir.PortDirection.Output
        ports[name] = (value.as_value() if hasattr(value, "as_value") else value, direction)
    return ports


def manifest_ports(component: wiring.Component) -> list[dict]:
    """The ports of a generated top for its manifest: ``clk``, ``rst``, then every member of
    ``component``'s signature as named by :func:`verilog_ports` (name, direction, width_bits)."""
    ports = [{"name": "clk", "direction": "input", "width_bits": 1},
             {"name": "rst", "direction": "input", "width_bits": 1}]
    return ports + [{"name": name, "direction": d.value, "width_bits": len(sig)}
                    for name, (sig, d) in verilog_ports(component).items()]


# ---- register files behind the register bus (used by the AXI tops) ---------------------------
@dataclass(frozen=True)
class Field:
    """A bit field of a :class:`Register`: ``width`` bits from bit ``lsb``; ``access`` as the
    software sees it: "ro", "rw", "wo" (reads 0) or "w1c" (read; writing 1 clears it)."""

    name: str
    lsb: int
    width: int
    access: str
    doc: str

    @property
    def mask(self) -> int:
        """The field's bits in the 32-bit register."""
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    """One 32-bit register of a register file on the register bus, with its bit ``fields``
    (none given: one field ``value`` covering the register with the register's access)."""

    name: str
    offset: int          #: byte offset
    access: str          #: "ro", "rw", "wo" (reads 0) or "rw1c" (see ``doc``)
    doc: str
    fields: tuple[Field, ...] = ()

    def field_list(self) -> tuple[Field, ...]:
        """The register's fields, lowest bit first (the default one when none are given)."""
        if self.fields:
            return tuple(sorted(self.fields, key=lambda f: f.lsb))
        return (Field("value", 0, 32, self.access, self.doc),)

    def field(self, name: str) -> Field:
        """Field ``name``; ValueError naming the accepted ones."""
        for f in self.field_list():
            if f.name == name:
                return f
        raise ValueError(f"{self.name}.{name}: accepted: "
                         f"{', '.join(f.name for f in self.field_list())}")

    def pack(self, **values: int) -> int:
        """The register value holding ``values`` (field name -> value) in their fields;
        ValueError when a value does not fit its field."""
        word = 0
        for name, v in values.items():
            f = self.field(name)
            if not 0 <= int(v) < (1 << f.width):
                raise ValueError(f"{self.name}.{name} = {v}: must fit {f.width} bits")
            word |= int(v) << f.lsb
        return word


def register_named(registers: Sequence[Register], name: str) -> Register:
    """Register ``name``; ValueError naming the accepted names otherwise."""
    for r in registers:
        if r.name == name:
            return r
    raise ValueError(f"register {name!r}: accepted: {', '.join(r.name for r in registers)}")


def register_offset(registers: Sequence[Register], name: str) -> int:
    """Byte offset of register ``name``; ValueError naming the accepted names otherwise."""
    for r in registers:
        if r.name == name:
            return r.offset
    raise ValueError(f"register {name!r}: accepted: {', '.join(r.name for r in registers)}")


def describe_registers(registers: Sequence[Register]) -> list[dict]:
    """JSON-ready list of ``registers`` (name, offset, access, doc) for manifests."""
    return [{"name": r.name, "offset": r.offset, "access": r.access, "doc": r.doc}
            for r in registers]


def version_word(top_version: int, generator_version: str) -> int:
    """VERSION register value: [31:24] ``top_version``, [23:16].[15:8].[7:0] the generator's
    ``major.minor.patch``."""
    major, minor, patch = (int(p) for p in generator_version.split("."))
    return (top_version << 24) | (major << 16) | (minor << 8) | patch


def strobe_merge(bus) -> Callable:
    """``merged(old)``: the register bus's 32-bit write data merged into ``old`` under its byte
    strobes (``wstrb`` bit i selects byte i of ``wdata``)."""
    mask = Cat(*(bus.wstrb[i].replicate(8) for i in range(4)))

    def merged(old):
        return (old & ~mask) | (bus.wdata & mask)
    return merged


def decode_registers(m: Module, bus, addr, registers: Sequence[Register], *, resp, rdata,
                     ro_values: Mapping, rw_regs: Mapping, merged: Callable,
                     other: Callable[[Register], None]) -> None:
    """Answer an access at ``addr`` (inside ``bus.req``) against ``registers``: "ro" reads
    ``ro_values[name]`` and SLVERR on writes; "rw" reads ``rw_regs[name]`` and takes
    :func:`strobe_merge`'s ``merged`` value on writes; any other register is ``other(r)``'s (in
    its decode branch); an address with no register answers DECERR."""
    for i, r in enumerate(registers):
        with (m.If if i == 0 else m.Elif)(addr == r.offset):
            if r.access == "ro":
                with m.If(bus.we):
                    m.d.comb += resp.eq(AxiResp.SLVERR)
                with m.Else():
                    m.d.comb += rdata.eq(ro_values[r.name])
            elif r.access == "rw":
                reg = rw_regs[r.name]
                m.d.comb += rdata.eq(reg)
                with m.If(bus.we):
                    m.d.sync += reg.eq(merged(reg)[:len(reg)])
            else:
                other(r)
    with m.Else():
        m.d.comb += resp.eq(AxiResp.DECERR)
