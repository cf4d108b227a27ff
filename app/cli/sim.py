"""``tilewright sim``: run a small model (one layer of a tiny config or a small config.json, or a
user module: file.py:factory, .onnx) on the functional model and, with ``--rtl``, its int8
GEMMs on the Verilated core (:func:`tilewright.app.flows.sim_rtl.simulate_model`); print the cross-checks.

Registered in :mod:`tilewright.app.cli.main`. Exit status 1 when a cross-check fails; user errors
(unknown model, bad ArchSpec, a GEMM that cannot fit) are one line and exit status 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tilewright.app.cli import JSON_HELP, print_json
from tilewright.app.cli.single_core import refuse_mesh
from tilewright.app.cli.tables import Column, print_table
from tilewright.rtl.limits import refuse_beyond_rtl
from tilewright.arch import load_arch

__all__ = ["sim"]

console = Console()


def sim(
    model: str = typer.Option(..., "--model", help="a tiny built-in config (tiny-llama, "
                              "tiny-moe, tiny-mamba; see `tilewright models`), a small Hugging "
                              "Face config.json or a folder holding one (one layer, seeded "
                              "weights), path/file.py:factory, or a .onnx file"),
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset name"),
    rtl: bool = typer.Option(False, "--rtl", help="run every int8 GEMM on the RTL in Verilator"),
    fast: bool = typer.Option(False, "--fast", help="with --rtl: the C++ fast driver instead of "
                                                    "the cocotb bench"),
    top: str = typer.Option("core", "--top", help="with --rtl: core (the GEMM core driven by "
                            "the host: cocotb or --fast) or accel (the programmable accelerator: "
                            "ISA, DMA, external-memory model; cocotb or --fast) or axi-accel (the "
                            "same behind AXI4-Lite control and an AXI4 memory port; "
                            "cocotbext-axi)"),
    seq: int = typer.Option(8, "--seq", min=1, help="tokens in the prefill"),
    seed: int = typer.Option(0, "--seed", help="seed of the weights and inputs"),
    gemms: bool = typer.Option(False, "--gemms", help="with --rtl: print every GEMM's (and "
                               "vector kernel's) cycles"),
    vector: bool = typer.Option(False, "--vector", help="run the ops the vector engine "
                                "implements (exp, rsqrt, SiLU, softplus, softmax, add/sub/mul, "
                                "x**2, neg, sum/mean/max in Q8.8, copy (bit-exact), the per-tensor "
                                "int8 quantize before a "
                                "GEMM; the SSM scan on the scan unit) in its "
                                "arithmetic; with --rtl --top accel [--fast] on the RTL's vector "
                                "engine (needs a vector_unit in the ArchSpec)"),
    trace: Optional[Path] = typer.Option(None, "--trace", help="with --rtl (cocotb; --top core "
                                         "or accel): write a VCD waveform of every signal of "
                                         "the top to DIR/dump.vcd (~16 MB per 1,000 cycles)"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Simulate one layer of a small config (or a whole user module) in int8: functional model
    vs torch, and with --rtl its GEMMs on the RTL (bit-exact, cycles vs the cycle model)."""
    if fast and not rtl:
        raise typer.BadParameter("--fast selects the RTL driver; add --rtl", param_hint="--fast")
    from tilewright.app.flows.sim_rtl import (  # noqa: PLC0415  (lazy: pulls in amaranth)
        TOPS, TRACE_TOPS, simulate_model)
    from tilewright.cosim.tops import TOPS as REGISTRY  # noqa: PLC0415  (lazy: pulls in amaranth)
    if top not in TOPS:
        raise typer.BadParameter(f"{top!r}: accepted: {', '.join(TOPS)}", param_hint="--top")
    if fast and "fast" not in REGISTRY[top].drivers:
        raise typer.BadParameter(f"--top {top} runs on the cocotb bench; drop --fast",
                                 param_hint="--top")
    if trace is not None and top not in TRACE_TOPS:
        raise typer.BadParameter("tracing covers --top core and --top accel", param_hint="--trace")
    if trace is not None and (fast or not rtl):
        raise typer.BadParameter("tracing needs --rtl with the cocotb driver (no --fast)",
                                 param_hint="--trace")
    if vector and rtl and (top != "accel" or trace is not None):
        raise typer.BadParameter("--vector with --rtl runs on the accelerator top's vector "
                                 "engine: needs --top accel (cocotb or --fast), no --trace",
                                 param_hint="--vector")
    spec = refuse_mesh(load_arch(arch), "sim", arch)
    if rtl:
        refuse_beyond_rtl(spec, "sim --rtl", arch)
    if vector and spec.vector_unit is None:
        raise typer.BadParameter(f"{spec.name} has no vector_unit section (the vector engine is "
                                 "generated from it)", param_hint="--vector")
    with console.status("compiling") as st:
        res = simulate_model(model, spec, rtl=rtl, driver="fast" if fast else "cocotb",
                             seq=seq, seed=seed, trace_dir=trace, top=top, log=st.update,
                             vector=vector)
    if as_json:
        print_json({"model": res.model, "arch": res.arch, "ok": res.ok, "rtl": res.rtl,
                    "checks": [{"check": c, "ok": ok, "detail": d} for c, ok, d in res.checks],
                    "gemms": res.gemm_rows, "vector_ops": res.vector_rows,
                    "seconds": res.seconds, "trace": res.trace})
        if not res.ok:
            raise typer.Exit(1)
        return
    if res.gemm_rows:
        rows = res.gemm_rows
        where = {"accel": "the accelerator top, DMA included",
                 "axi-accel": "the accelerator behind AXI, DMA over AXI4 included"}.get(
                     top, "the GEMM core; cycles `busy` is high")
        macs = sum(r["m"] * r["k"] * r["n"] for r in rows)
        total_m = sum(r["model"] for r in rows)
        body = [(r["op"], f"{r['m']}x{r['k']}x{r['n']}", r["rtl"], r["model"], r["util"])
                for r in (rows if gemms else [])]
        body.append((f"{len(rows)} GEMMs", f"{macs:,} MACs", sum(r["rtl"] for r in rows),
                     total_m, macs / (total_m * spec.tensor_engine.macs_per_cycle)))
        print_table(f"{model} {spec.tensor_engine.input_format} GEMMs on the RTL "
                    f"({spec.name}: {where})",
                    [Column("GEMM"), Column("M x K x N"), Column("RTL cycles", True),
                     Column("model cycles", True), Column("utilization", True, "{:.1%}")],
                    body, console=console)
    if res.vector_rows and "rtl" in res.vector_rows[0]:
        vrows = res.vector_rows
        body = [(r["op"], r["kernel"], "x".join(map(str, r["shape"])), r["rtl"], r["model"])
                for r in (vrows if gemms else [])]
        body.append((f"{len(vrows)} kernels", ", ".join(sorted({r["kernel"] for r in vrows})),
                     "", sum(r["rtl"] for r in vrows), sum(r["model"] for r in vrows)))
        print_table(f"{model} vector and scan ops on the accelerator's vector engine "
                    f"({spec.name}, {spec.vector_unit.lanes} lanes; DMA included)",
                    [Column("task"), Column("kernel"), Column("shape"),
                     Column("RTL cycles", True), Column("model cycles", True)],
                    body, console=console)
    print_table("cross-checks", ["check", "result", "detail"],
                [(name, "PASS" if ok else "FAIL", detail) for name, ok, detail in res.checks],
                console=console)
    console.print("  ".join(f"{k} {v:.2f} s" for k, v in res.seconds.items()))
    if res.trace is not None:
        console.print(f"waveform: {res.trace} ({res.trace.stat().st_size / 1e6:.1f} MB)")
    if not res.ok:
        console.print("[bold red]a cross-check FAILED[/]")
        raise typer.Exit(1)
    console.print("[bold green]all cross-checks passed[/]"
                  + ("" if rtl else " (functional model only; add --rtl for the RTL)"))
