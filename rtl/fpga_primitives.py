"""Vendor primitives the generated RTL instantiates for one FPGA family, and their simulation models.

The FPGA flow (``tilewright fpga --target ecp5``) elaborates a design with :class:`FpgaFamily`
as Amaranth's ``platform``; a component that has a primitive for that family uses it, and builds
the same registers in the fabric everywhere else (simulation, iCE40, the xc7 estimate). So far
one: the int8 PE's registered multiplier (:func:`registered_product`) becomes one ECP5
``MULT18X18D`` whose own input and output registers hold the operand and product stages of
``tensor_engine.pipeline`` — Yosys 0.70's ``synth_ecp5`` maps a multiply onto the DSP but
absorbs no flip-flop into it, and the routing between fabric registers and the DSP columns is
what bounds the array's clock (docs/fpga.md, "Timing closure").

Verilator cannot simulate a vendor primitive without a model: :func:`with_sim_models` appends
to a netlist the behavioural Verilog of the primitives it instantiates (:data:`SIM_MODELS`,
written here from Lattice's "ECP5 and ECP5-5G sysDSP Usage Guide", FPGA-TN-02205 (TN1267): an
18 x 18 multiplier whose A and B inputs, product pipeline and output each pass an optional
register clocked by CLK0; every register enabled by CE0 and cleared by a synchronous RST0 under
RESETMODE "SYNC"). The model refuses, at elaboration, any setting it does not model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amaranth.hdl import ClockSignal, Instance, Module, Signal, signed

__all__ = ["FpgaFamily", "family_of", "registered_product", "ECP5_MULT_WIDTH",
           "SIM_MODELS", "sim_models_for", "with_sim_models", "RDWR_UNDEFINED_ATTR", "RDWR_UNDEFINED"]

#: attribute a generator puts on a memory none of whose read ports is transparent and none of
#: whose reads ever meets a write to the same word in one cycle: its read-during-write result is
#: undefined, and the FPGA flow lets Yosys map it without the logic that would otherwise emulate
#: read-old-data across the block RAM's ports (Yosys' ``RD_COLLISION_X_MASK``)
RDWR_UNDEFINED_ATTR = "tw_rdwr_undefined"
#: the ``attrs`` of such a ``lib.memory.Memory``
RDWR_UNDEFINED = {RDWR_UNDEFINED_ATTR: 1}

#: operand width (bits) of the ECP5 MULT18X18D's A and B inputs
ECP5_MULT_WIDTH = 18


@dataclass(frozen=True)
class FpgaFamily:
    """The Amaranth ``platform`` of an FPGA flow: ``name`` is the family ("ice40", "ecp5",
    "xc7"). Components read it with :func:`family_of`."""

    name: str


def family_of(platform) -> str | None:
    """The FPGA family ``platform`` targets (an :class:`FpgaFamily`), or None (simulation, or
    any other platform)."""
    return platform.name if isinstance(platform, FpgaFamily) else None


def registered_product(m: Module, name: str, a, w, *, operand: bool, product: bool,
                       family: str | None = None):
    """``a * w`` (signed operands; the exact product, ``len(a) + len(w)`` bits) delayed by
    ``operand + product`` cycles: registers on both operands before the multiply (``operand``)
    and on the product after it (``product``). On ``family`` "ecp5" one MULT18X18D instance
    named ``mult_<name>`` whose ``REG_INPUTA_CLK``/``REG_INPUTB_CLK`` (operand) and
    ``REG_OUTPUT_CLK`` (product) registers are those stages (operands up to 18 bits);
    otherwise fabric flip-flops ``opa_<name>``, ``opw_<name>`` and ``prod_<name>``."""
    if not (operand or product):
        raise ValueError("registered_product: neither operand nor product register is on")
    width = len(a) + len(w)
    if family == "ecp5":
        if max(len(a), len(w)) > ECP5_MULT_WIDTH:
            raise ValueError(f"registered_product: {len(a)} x {len(w)} bits exceeds the ECP5 "
                             f"MULT18X18D's {ECP5_MULT_WIDTH} x {ECP5_MULT_WIDTH}")
        p = Signal(2 * ECP5_MULT_WIDTH, name=f"mult_{name}_p")
        reg = lambda on: "CLK0" if on else "NONE"  # noqa: E731
        ports = {f"i_{port}{k}": bit for port, sig in (("A", a), ("B", w))
                 for k, bit in enumerate(_sign_extend(sig, ECP5_MULT_WIDTH))}
        ports.update({f"i_C{k}": 0 for k in range(ECP5_MULT_WIDTH)})
        ports.update({f"o_P{k}": p[k] for k in range(2 * ECP5_MULT_WIDTH)})
        m.submodules[f"mult_{name}"] = Instance(
            "MULT18X18D",
            p_REG_INPUTA_CLK=reg(operand), p_REG_INPUTB_CLK=reg(operand),
            p_REG_OUTPUT_CLK=reg(product), p_GSR="DISABLED",
            i_SIGNEDA=1, i_SIGNEDB=1, i_SOURCEA=0, i_SOURCEB=0,
            i_CLK0=ClockSignal("sync"), i_CE0=1, i_RST0=0, **ports)
        out = Signal(signed(width), name=f"prod_{name}")
        m.d.comb += out.eq(p[:width])
        return out
    if operand:
        a_q = Signal.like(a, name=f"opa_{name}")
        w_q = Signal.like(w, name=f"opw_{name}")
        m.d.sync += [a_q.eq(a), w_q.eq(w)]
        a, w = a_q, w_q
    prod = a * w
    if not product:
        return prod
    out = Signal(prod.shape(), name=f"prod_{name}")
    m.d.sync += out.eq(prod)
    return out


def _sign_extend(sig, width: int) -> list:
    """The bits of the signed ``sig`` sign-extended to ``width`` (LSB first)."""
    return [sig[k] if k < len(sig) else sig[-1] for k in range(width)]


def _mult18x18d_model() -> str:
    """Behavioural Verilog of the ECP5 MULT18X18D (module docstring)."""
    n = ECP5_MULT_WIDTH
    ins = ", ".join(f"input {p}{k}" for p in "ABC" for k in range(n))
    outs = ", ".join(f"output P{k}" for k in range(2 * n))
    cat = lambda p, w: "{" + ", ".join(f"{p}{k}" for k in reversed(range(w))) + "}"  # noqa: E731
    regs = ("REG_INPUTA", "REG_INPUTB", "REG_PIPELINE", "REG_OUTPUT")
    params = ",\n  ".join([f'parameter {r}_CLK = "NONE", {r}_CE = "CE0", {r}_RST = "RST0"'
                           for r in regs]
                          + ['parameter REG_INPUTC_CLK = "NONE"', 'parameter GSR = "ENABLED"',
                             'parameter RESETMODE = "SYNC"', 'parameter CAS_MATCH_REG = "FALSE"',
                             'parameter SOURCEB_MODE = "B_SHIFT"',
                             'parameter MULT_BYPASS = "DISABLED"'])
    checks = "\n".join(
        f'    if ({r}_CLK != "NONE" && !({r}_CLK == "CLK0" && {r}_CE == "CE0" && '
        f'{r}_RST == "RST0")) $fatal(1, "MULT18X18D model: {r}_CLK/CE/RST other than '
        f'NONE or CLK0/CE0/RST0 is not modelled");' for r in regs)
    return f"""// Behavioural model of the Lattice ECP5 MULT18X18D for simulation (tilewright.rtl.fpga_primitives):
// 18 x 18 multiply (SIGNEDA/SIGNEDB), optional A, B, pipeline and output registers on CLK0/CE0/RST0,
// RESETMODE "SYNC". C input, cascade and shift-register ports are not modelled.
module MULT18X18D #(
  {params}
) ({ins}, input SIGNEDA, input SIGNEDB, input SOURCEA, input SOURCEB,
  input CLK0, input CE0, input RST0, {outs});
  initial begin
{checks}
    if (RESETMODE != "SYNC" || REG_INPUTC_CLK != "NONE" || MULT_BYPASS != "DISABLED")
      $fatal(1, "MULT18X18D model: only RESETMODE SYNC, no C register and no bypass are modelled");
  end
  wire [{n - 1}:0] a_in = {cat("A", n)};
  wire [{n - 1}:0] b_in = {cat("B", n)};
  reg [{n - 1}:0] a_q = 0, b_q = 0;
  reg sa_q = 0, sb_q = 0;
  always @(posedge CLK0) if (RST0) begin a_q <= 0; sa_q <= 0; end
                         else if (CE0) begin a_q <= a_in; sa_q <= SIGNEDA; end
  always @(posedge CLK0) if (RST0) begin b_q <= 0; sb_q <= 0; end
                         else if (CE0) begin b_q <= b_in; sb_q <= SIGNEDB; end
  wire ra = REG_INPUTA_CLK == "CLK0", rb = REG_INPUTB_CLK == "CLK0";
  wire [{n - 1}:0] a = ra ? a_q : a_in;
  wire [{n - 1}:0] b = rb ? b_q : b_in;
  wire sa = ra ? sa_q : SIGNEDA, sb = rb ? sb_q : SIGNEDB;
  wire signed [{2 * n + 1}:0] full = $signed({{{{({n + 1}){{sa & a[{n - 1}]}}}}, a}}) * $signed({{{{({n + 1}){{sb & b[{n - 1}]}}}}, b}});
  wire [{2 * n - 1}:0] prod = full[{2 * n - 1}:0];
  reg [{2 * n - 1}:0] pipe_q = 0, out_q = 0;
  wire [{2 * n - 1}:0] piped = REG_PIPELINE_CLK == "CLK0" ? pipe_q : prod;
  always @(posedge CLK0) if (RST0) pipe_q <= 0; else if (CE0) pipe_q <= prod;
  always @(posedge CLK0) if (RST0) out_q <= 0; else if (CE0) out_q <= piped;
  assign {cat("P", 2 * n)} = REG_OUTPUT_CLK == "CLK0" ? out_q : piped;
endmodule
"""


#: behavioural models of the vendor primitives the generators instantiate, by module name
SIM_MODELS: dict[str, str] = {"MULT18X18D": _mult18x18d_model()}


def sim_models_for(netlist: str) -> str:
    """The behavioural models (Verilog) of the :data:`SIM_MODELS` primitives ``netlist``
    instantiates; "" when it instantiates none."""
    used = [name for name in SIM_MODELS if re.search(rf"^\s*{name}\b", netlist, re.M)]
    return "".join("\n" + SIM_MODELS[name] for name in used)


def with_sim_models(netlist: str) -> str:
    """``netlist`` (Verilog) followed by :func:`sim_models_for` it, for a simulator."""
    return netlist + sim_models_for(netlist)


# ---------------------------------------------------------------------------------------------
# ECP5 block RAM with its output register (DP16KD, REGMODE "OUTREG")

#: DP16KD data widths (bits) and the address shift of each (the RAM addresses 16,384 bit cells;
#: a W-bit word's index sits in ADx[13:shift], as Yosys' ``lattice/brams_map_16kd.v`` wires it)
ECP5_RAM_SHIFT = {1: 0, 2: 1, 4: 2, 9: 3, 18: 4}
#: words a DP16KD holds at each data width
ECP5_RAM_DEPTH = {w: 16384 >> s for w, s in ECP5_RAM_SHIFT.items()}


class RamPort:
    """The ``addr``/``data``/``en`` signals of one port of :func:`ecp5_ram`;
    ``registered``: the read data passes the RAM's output register (two cycles after the
    address instead of one)."""

    def __init__(self, name: str, abits: int, width: int, *, write: bool = False,
                 registered: bool = False):
        self.addr = Signal(abits, name=f"{name}_addr")
        self.data = Signal(width, name=f"{name}_data")
        # a write port's write enable; a read port's enable (both RAM registers hold while it
        # is low; 1 when the caller does not drive it)
        self.en = Signal(name=f"{name}_en", init=0 if write else 1)
        self.registered = registered


def ecp5_ram_width(depth: int) -> int | None:
    """The widest DP16KD data width (bits) that holds ``depth`` words in one RAM deep, or None
    when ``depth`` exceeds 16,384 (the memory would need a depth multiplexer)."""
    fits = [w for w, d in ECP5_RAM_DEPTH.items() if d >= depth]
    return max(fits) if fits else None


def ecp5_ram(m: Module, name: str, width: int, depth: int, reads: tuple[bool, ...], *,
             out_always: bool = False):
    """A ``width``-bit x ``depth``-word memory of DP16KD tiles with one write port and one read
    port per entry of ``reads`` (True: through the RAM's output register, data two cycles after
    the address; False: one cycle). A read port's enable holds both RAM registers; with
    ``out_always`` the output register loads every cycle instead (OCE high), so a read's word
    is out two cycles after its enable whatever the enable does in between (a read pipeline
    whose enable only starts reads). Each read port has its own copy of the tiles (port A writes,
    port B reads); a read that meets a write to its word in one cycle is undefined (the caller
    never does one). Returns (write port, [read ports]) as :class:`RamPort`. ValueError when
    ``depth`` needs more than one RAM deep (:func:`ecp5_ram_width`)."""
    tw = ecp5_ram_width(depth)
    if tw is None:
        raise ValueError(f"ecp5_ram {name}: {depth} words exceed one DP16KD deep (16384)")
    abits = max(1, (depth - 1).bit_length())
    shift = ECP5_RAM_SHIFT[tw]
    w = RamPort(f"{name}_w", abits, width, write=True)
    rs = [RamPort(f"{name}_r{i}", abits, width, registered=reg) for i, reg in enumerate(reads)]
    tiles = -(-width // tw)
    for i, (r, reg) in enumerate(zip(rs, reads)):
        for t in range(tiles):
            lo, hi = t * tw, min((t + 1) * tw, width)
            do = Signal(18, name=f"{name}_r{i}_t{t}_do")
            ports = {}
            for k in range(14):      # word index in ADx[13:shift]; x18's ADx[1:0] are byte writes
                wa = w.addr[k - shift] if shift <= k < shift + abits else (
                    1 if tw == 18 and k < 2 else 0)
                ra = r.addr[k - shift] if shift <= k < shift + abits else (
                    1 if tw == 18 and k < 2 else 0)
                ports[f"i_ADA{k}"], ports[f"i_ADB{k}"] = wa, ra
            for k in range(18):
                ports[f"i_DIA{k}"] = w.data[lo + k] if lo + k < hi else 0
                ports[f"i_DIB{k}"] = 0
                ports[f"o_DOB{k}"] = do[k]
            m.submodules[f"{name}_r{i}_t{t}"] = Instance(
                "DP16KD", p_DATA_WIDTH_A=tw, p_DATA_WIDTH_B=tw,
                p_REGMODE_A="NOREG", p_REGMODE_B="OUTREG" if reg else "NOREG",
                p_RESETMODE="SYNC", p_WRITEMODE_A="NORMAL", p_WRITEMODE_B="NORMAL",
                p_GSR="DISABLED",
                i_CLKA=ClockSignal("sync"), i_CEA=1, i_OCEA=1, i_WEA=w.en, i_RSTA=0,
                i_CSA0=0, i_CSA1=0, i_CSA2=0,
                i_CLKB=ClockSignal("sync"), i_CEB=r.en, i_OCEB=1 if out_always else r.en,
                i_WEB=0, i_RSTB=0,
                i_CSB0=0, i_CSB1=0, i_CSB2=0, **ports)
            m.d.comb += r.data[lo:hi].eq(do[:hi - lo])
    return w, rs


def _dp16kd_model() -> str:
    """Behavioural Verilog of the ECP5 DP16KD, as :func:`ecp5_ram` uses it (module docstring)."""
    ins = ", ".join([f"input DI{p}{k}" for p in "AB" for k in range(18)]
                    + [f"input AD{p}{k}" for p in "AB" for k in range(14)])
    outs = ", ".join(f"output DO{p}{k}" for p in "AB" for k in range(18))
    cat = lambda p, w: "{" + ", ".join(f"{p}{k}" for k in reversed(range(w))) + "}"  # noqa: E731
    return f"""// Behavioural model of the Lattice ECP5 DP16KD for simulation (tilewright.rtl.fpga_primitives):
// one 16,384-bit array, both ports at one DATA_WIDTH (1, 2, 4, 9 or 18; x18 byte enables on
// ADx[1:0] must be 11), word index ADx[13:shift]; a write (WEx & CEx) stores DIx; a read (CEx &
// ~WEx) loads DOx one clock later, and with REGMODE_x "OUTREG" through a second register
// (OCEx); RSTx, chip selects and a read that meets the other port's write are not modelled.
module DP16KD #(
  parameter DATA_WIDTH_A = 18, DATA_WIDTH_B = 18, REGMODE_A = "NOREG", REGMODE_B = "NOREG",
  parameter RESETMODE = "SYNC", WRITEMODE_A = "NORMAL", WRITEMODE_B = "NORMAL", GSR = "ENABLED"
) ({ins}, input CLKA, CEA, OCEA, WEA, RSTA, CSA0, CSA1, CSA2,
  input CLKB, CEB, OCEB, WEB, RSTB, CSB0, CSB1, CSB2, {outs});
  localparam W = DATA_WIDTH_A;
  localparam S = W == 1 ? 0 : W == 2 ? 1 : W == 4 ? 2 : W == 9 ? 3 : 4;
  initial begin
    if (DATA_WIDTH_B != DATA_WIDTH_A || !(W == 1 || W == 2 || W == 4 || W == 9 || W == 18))
      $fatal(1, "DP16KD model: DATA_WIDTH_A = DATA_WIDTH_B in 1, 2, 4, 9, 18 only");
    if ((REGMODE_A != "NOREG" && REGMODE_A != "OUTREG") || (REGMODE_B != "NOREG" && REGMODE_B != "OUTREG"))
      $fatal(1, "DP16KD model: REGMODE NOREG or OUTREG only");
  end
  reg [17:0] mem [0:(16384 >> S) - 1];
  wire [13:0] ada = {cat("ADA", 14)}, adb = {cat("ADB", 14)};
  wire [17:0] dia = {cat("DIA", 18)}, dib = {cat("DIB", 18)};
  wire [13:0] wa = ada >> S, wb = adb >> S;
  reg [17:0] qa = 0, qb = 0, oa = 0, ob = 0;
  always @(posedge CLKA) if (CEA) begin
    if (WEA) mem[wa] <= dia; else qa <= mem[wa];
  end
  always @(posedge CLKB) if (CEB) begin
    if (WEB) mem[wb] <= dib; else qb <= mem[wb];
  end
  always @(posedge CLKA) if (OCEA) oa <= qa;
  always @(posedge CLKB) if (OCEB) ob <= qb;
  assign {cat("DOA", 18)} = REGMODE_A == "OUTREG" ? oa : qa;
  assign {cat("DOB", 18)} = REGMODE_B == "OUTREG" ? ob : qb;
endmodule
"""


SIM_MODELS["DP16KD"] = _dp16kd_model()
