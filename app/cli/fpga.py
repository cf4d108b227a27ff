"""``tilewright fpga``: Verilog, open place-and-route (iCE40/ECP5) or a Vivado script (xc7), and
FuseSoC/edalize hand-off files for an ArchSpec (see :mod:`tilewright.app.eda.fpga`, docs/fpga.md).

``-o DIR`` appears whole or not at all: the flow writes into a temporary folder beside DIR and
renames it into place only when every step succeeded
(:func:`tilewright.app.output_folder.output_folder`); a failure leaves an earlier DIR as it was.

Registered in :mod:`tilewright.app.cli.main`. User errors — :class:`tilewright.app.eda.fpga.UnknownFpgaTarget`,
:class:`tilewright.app.eda.fpga_pnr.DoesNotFitPart`, :class:`tilewright.app.eda.fpga.FpgaError` and a missing
tool — print one ``error: ...`` line and exit 2; a Yosys or nextpnr failure names its log and
exits 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tilewright.app.cli import JSON_HELP, print_json
from tilewright.app.eda.synth import SynthError
from tilewright.arch import load_arch
from tilewright.progress import progress
from tilewright.rtl.limits import refuse_beyond_rtl

__all__ = ["fpga"]

console = Console()
err_console = Console(stderr=True)


#: the canonical ``--top`` names (docs/design.md "CLI conventions") -> the FPGA flow's own
#: top registry (:data:`tilewright.app.eda.fpga.TOPS`)
FLOW_TOPS = {"core": "gemm", "axi-core": "axi", "axi-accel": "axi-accel",
             "uart-accel": "uart-accel"}
#: ``--top`` when none is given: without a board the GEMM core (its QoR), on a board the UART
#: bridge (the one top a PC can talk to there)
DEFAULT_TOP, DEFAULT_BOARD_TOP = "core", "uart-accel"


def _flow_top(value: str) -> str:
    """``--top``: a canonical top name -> the flow's; another name is refused, naming the
    canonical ones."""
    from tilewright.app.eda.fpga import \
        UnknownFpgaTarget  # noqa: PLC0415  (lazy: the FPGA flow only to run)
    if value not in FLOW_TOPS:
        raise UnknownFpgaTarget(f"--top {value!r} is unknown; accepted: {', '.join(FLOW_TOPS)}")
    return FLOW_TOPS[value]


def _top(ctx: typer.Context, top: str, board: Optional[str]) -> str:
    """The flow's top: ``top`` as given, or on a board when ``--top`` was not given at all
    :data:`DEFAULT_BOARD_TOP`."""
    source = ctx.get_parameter_source("top")
    given = source is not None and source.name != "DEFAULT"    # typer may bring its own click
    return top if given or board is None else FLOW_TOPS[DEFAULT_BOARD_TOP]


def fpga(
    ctx: typer.Context,
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset name"),
    target: str = typer.Option(..., "--target", help="ice40 | ecp5 (Yosys + nextpnr) | xc7 "
                               "(Yosys estimate + Vivado script)"),
    out: Path = typer.Option(..., "-o", "--out", help="output folder (Verilog, netlist, reports, "
                             ".core, EDAM, manifest.json); replaced whole on success, left as "
                             "it was on failure"),
    top: str = typer.Option(
        DEFAULT_TOP, "--top", help="top to wrap: core (GEMM core; the default without --board) | "
        "axi-core (GEMM core behind AXI4-Lite) | axi-accel (programmable accelerator: AXI4-Lite "
        "control, AXI4 memory port) | uart-accel (the accelerator behind a UART with on-chip "
        "memory: the host link; the default with --board); gemm and axi are deprecated",
        callback=_flow_top),
    pnr: bool = typer.Option(True, "--pnr/--no-pnr", help="ice40/ecp5: run nextpnr (else stop "
                             "after synthesis and part choice)"),
    freq: Optional[float] = typer.Option(None, "--freq", help="clock target in MHz (default: "
                                         "the ArchSpec's clock_mhz; with --board, the board's "
                                         "oscillator)"),
    board: Optional[str] = typer.Option(None, "--board", help="icebreaker (ice40) | ulx3s | "
                                        "orangecrab (ecp5): the board's part, pins (from "
                                        "amaranth-boards) and oscillator"),
    bitstream: bool = typer.Option(False, "--bitstream", help="ice40/ecp5: also pack the "
                                   "bitstream (<top>.bin with icepack, <top>.bit with ecppack)"),
    baud: Optional[float] = typer.Option(None, "--baud", help="uart-accel: the serial line's "
                                         "baud rate (default 115200); refused when the clock "
                                         "cannot make it within the UART's tolerance"),
    mem_words: Optional[int] = typer.Option(None, "--mem-words", help="uart-accel: on-chip "
                                            "memory words (a power of two; default 4096, on an "
                                            "iCE40 board what half its free block RAM holds)"),
    share: bool = typer.Option(True, "--share/--no-share", help="ice40/ecp5: run Yosys' "
                               "SAT-based share pass (default); --no-share skips it (hours on "
                               "designs with hundreds of variable shifters, e.g. the float 32x4 "
                               "cores; the manifest records it)"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP + " (the manifest and its "
                                 "folder)"),
) -> None:
    """Synthesize, place and route (iCE40/ECP5) or script Vivado (xc7) for an ArchSpec."""
    from tilewright.app.eda.fpga import (  # noqa: PLC0415  (lazy: the FPGA flow only to run)
        TARGETS, UnknownFpgaTarget, run_fpga)
    from tilewright.app.eda.fpga_pnr import (  # noqa: PLC0415  (lazy: the FPGA flow only to run)
        PnrError)
    if target not in TARGETS:          # fail before generating anything
        raise UnknownFpgaTarget(f"--target {target!r} is unknown; accepted: {', '.join(TARGETS)}")
    spec = refuse_beyond_rtl(load_arch(arch), "fpga", arch)
    try:
        with progress(f"FPGA flow for {spec.name} on {target}"):
            m = run_fpga(spec, target, out, top=_top(ctx, top, board), pnr=pnr,
                         freq_mhz=freq, board=board, bitstream=bitstream, baud=baud,
                         mem_words=mem_words, share=share)
    except (SynthError, PnrError) as exc:
        err_console.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(1)
    if as_json:
        print_json({"out": str(out), "manifest": m})
        return
    f = m["fpga"]
    head = (f"{target} {f['part']}{' (Yosys estimate)' if f.get('estimate') else ''}: "
            f"{f.get('luts', f['synthesis'].get('luts'))} LUTs, "
            f"{f.get('ffs', f['synthesis'].get('ffs'))} FFs, "
            f"{f.get('dsps', f['synthesis'].get('dsps'))} DSPs, "
            f"{f.get('brams', f['synthesis'].get('brams'))} BRAMs")
    if "fmax_mhz" in f:
        head += (f", Fmax {f['fmax_mhz']:g} MHz (target {f['target_mhz']:g} MHz, "
                 f"{'met' if f['timing_met'] else 'not met'})")
    console.print(head, markup=False, highlight=False)
    cp = f.get("pnr", {}).get("critical_path")
    if cp:
        console.print(f"critical path: {cp['from']} -> {cp['to']}, {cp['delay_ns']:g} ns "
                      f"({cp['logic_levels']} logic levels: {cp['logic_ns']:g} ns logic, "
                      f"{cp['routing_ns']:g} ns routing)", markup=False, highlight=False)
    if "board" in f:
        b = f["board"]
        console.print(f"board {b['name']}: pins {', '.join(f'{k} {v}' for k, v in b['pins'].items())}"
                      f" ({b['constraints']}), clock {b['clock_mhz']:g} MHz from the board's "
                      f"oscillator; host link: {b['host_link']}", markup=False, highlight=False)
    if "link" in f:
        lk = f["link"]
        console.print(f"UART: {lk['baud']:g} baud (divisor {lk['divisor']} at "
                      f"{lk['clock_mhz']:g} MHz, asked {lk['baud_asked']:g}), 8N1; memory "
                      f"{lk['mem_words']} x {lk['mem_word_bytes']} B", markup=False,
                      highlight=False)
    if "bitstream" in f:
        console.print(f"bitstream: {out}/{f['bitstream']['path']} ({f['bitstream']['bytes']:,} "
                      f"bytes, {f['bitstream']['packer']}; pins {f['bitstream']['pins']})",
                      markup=False, highlight=False)
    if target == "xc7":
        console.print(f"Vivado: cd {out} && vivado -mode batch -source vivado.tcl "
                      f"(clock period {f['clock_period_ns']} ns)", markup=False, highlight=False)
    console.print(f"wrote {out}/manifest.json, {m['handoff']['fusesoc_core']} "
                  f"({m['handoff']['vlnv']}), {m['handoff']['edam']}, "
                  f"{m['handoff']['file_list']} in {m['flow_seconds']} s",
                  markup=False, highlight=False)
