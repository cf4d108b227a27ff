"""Hand-off files for other flows: a FuseSoC CAPI2 ``.core``, an edalize EDAM file list, a
``.f`` file list, and for Xilinx 7-series a Vivado project script (TCL) with its XDC constraints.

Every function returns text (the caller writes the files atomically); none runs a tool.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["XC7_PARTS", "Xc7Part", "choose_xc7_part", "core_name", "fusesoc_core", "edam",
           "file_list", "vivado_tcl", "xdc"]


@dataclass(frozen=True)
class Xc7Part:
    """One Xilinx 7-series part and its capacity: 6-input LUTs, flip-flops, DSP48E1 slices and
    block RAM in RAMB18E1 halves (a RAMB36E1 is two) — datasheet figures (counts)."""

    name: str
    luts: int
    ffs: int
    dsps: int
    ramb18: int


#: Artix-7 parts the Vivado script may target, smallest first
XC7_PARTS: tuple[Xc7Part, ...] = (
    Xc7Part("xc7a35tcpg236-1", 20800, 41600, 90, 100),
    Xc7Part("xc7a100tcsg324-1", 63400, 126800, 240, 270),
    Xc7Part("xc7a200tsbg484-1", 133800, 267600, 740, 730),
)


def choose_xc7_part(stat: dict[str, Any]) -> tuple[Xc7Part | None, str]:
    """The smallest :data:`XC7_PARTS` entry holding Yosys' xilinx estimate ``stat`` (or None)
    and, when none does, what exceeds the largest (text)."""
    by_type = stat["cells_by_type"]
    need = {"luts": stat["luts"], "ffs": stat["ffs"], "dsps": stat["dsps"],
            "ramb18": by_type.get("RAMB18E1", 0) + 2 * by_type.get("RAMB36E1", 0)}
    for part in XC7_PARTS:
        over = [f"{k} {v} > {getattr(part, k)}" for k, v in need.items() if v > getattr(part, k)]
        if not over:
            return part, ""
    return None, over[0]


def _safe(text: str) -> str:
    """``text`` as a FuseSoC name part: lower case letters, digits, '_' and '-'."""
    return re.sub(r"[^a-z0-9_-]+", "_", text.lower()).strip("_") or "design"


def core_name(arch_name: str, version: str) -> str:
    """The VLNV ``tilewright:accel:<name>:<version>`` of a generated design."""
    return f"tilewright:accel:{_safe(arch_name)}:{version}"


def fusesoc_core(*, arch_name: str, version: str, description: str, top: str,
                 verilog: list[str], synth: dict[str, Any],
                 sim_models: list[str] | None = None) -> str:
    """A FuseSoC CAPI2 ``.core`` file: fileset ``rtl`` (the Verilog, relative to the core
    file), targets ``default`` and ``lint`` (Verilator, warnings not fatal: Amaranth's Verilog
    trips WIDTHEXPAND) on ``top``, and ``synth`` — ``synth`` holds that target's ``flow``,
    ``flow_options``, ``toplevel`` and ``filesets`` ({name: {"files": [...], "file_type": ...}},
    e.g. the pin harness or the XDC) used besides ``rtl``. ``sim_models``: Verilog files with the
    behavioural models of vendor primitives the Verilog instantiates (fileset ``sim_models``,
    read by ``lint`` only: synthesis keeps the vendor's own cells)."""
    filesets: dict[str, Any] = {"rtl": {"files": list(verilog), "file_type": "verilogSource"}}
    if sim_models:
        filesets["sim_models"] = {"files": list(sim_models), "file_type": "verilogSource"}
    filesets.update(synth.get("filesets", {}))
    core = {
        "name": core_name(arch_name, version),
        "description": description,
        "filesets": filesets,
        "targets": {
            "default": {"filesets": ["rtl"], "toplevel": top},
            "lint": {"filesets": ["rtl", *(["sim_models"] if sim_models else [])],
                     "toplevel": top, "flow": "lint",
                     "flow_options": {"tool": "verilator", "mode": "lint-only",
                                      "verilator_options": ["-Wall", "-Wno-fatal"]}},
            "synth": {"filesets": ["rtl", *synth.get("filesets", {})],
                      "toplevel": synth["toplevel"], "flow": synth["flow"],
                      "flow_options": synth["flow_options"]},
        },
    }
    return "CAPI=2:\n" + yaml.safe_dump(core, sort_keys=False, width=100)


def edam(*, name: str, top: str, files: list[tuple[str, str]],
         tool_options: dict[str, Any]) -> str:
    """An edalize EDAM description (JSON): ``name``, ``toplevel``, ``files`` ((path relative to
    the EDAM file, edalize file_type) pairs) and ``tool_options``."""
    return json.dumps({"name": name, "toplevel": top,
                       "files": [{"name": f, "file_type": t} for f, t in files],
                       "parameters": {}, "tool_options": tool_options}, indent=1) + "\n"


def file_list(verilog: list[str], top: str) -> str:
    """A ``.f`` command file (one source a line, then ``--top-module``) as Verilator and most
    simulators read it."""
    return "".join(f"{f}\n" for f in verilog) + f"--top-module {top}\n"


def xdc(freq_mhz: float, clock_port: str = "clk") -> str:
    """XDC constraints: the clock on ``clock_port`` with the period of ``freq_mhz`` (ns, 3
    decimals)."""
    period = 1000.0 / freq_mhz
    return (f"# generated by tilewright: {freq_mhz:g} MHz\n"
            f"create_clock -period {period:.3f} -name {clock_port} [get_ports {clock_port}]\n")


def vivado_tcl(*, project: str, part: str, top: str, verilog: list[str], xdc_file: str) -> str:
    """A Vivado batch script (``vivado -mode batch -source vivado.tcl``): create the project in
    ``vivado_project/`` next to the script, add the Verilog and the XDC, set ``part`` and
    ``top``, run out-of-context synthesis (the core's ports are not pins), opt/place/route, and
    write ``utilization.rpt``, ``timing_summary.rpt`` and ``timing.rpt``."""
    files = " ".join(f"[file join $here {f}]" for f in verilog)
    return f"""# generated by tilewright: Vivado project for {top} on {part}
# run: vivado -mode batch -source vivado.tcl
set here [file dirname [file normalize [info script]]]
create_project -force {project} [file join $here vivado_project] -part {part}
set_property target_language Verilog [current_project]
add_files -norecurse [list {files}]
add_files -fileset constrs_1 -norecurse [file join $here {xdc_file}]
set_property top {top} [current_fileset]
synth_design -top {top} -part {part} -mode out_of_context
opt_design
place_design
route_design
report_utilization -file [file join $here utilization.rpt]
report_timing_summary -file [file join $here timing_summary.rpt]
report_timing -max_paths 10 -file [file join $here timing.rpt]
"""
