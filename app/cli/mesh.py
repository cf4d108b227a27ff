"""``tilewright mesh gemv|gemm``: predict a distributed GEMV/GEMM on a wafer-scale mesh.

Registered in :mod:`tilewright.app.cli.main` (``app.command("mesh")(mesh)``). User errors are
:class:`tilewright.dataflow_sim.mesh.MeshMappingError` (a ValueError: SRAM or route limits,
bad algo/shape, defects) and :class:`tilewright.arch.ArchSpecError`; the CLI prints them as one
``error: ...`` line with exit status 2.
"""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from tilewright.app.cli.tables import Column, print_table

from tilewright.app.cli import MAX_DIM, MAX_ELEM_BYTES, mesh_elem_bytes
from tilewright.arch import ArchSpec, load_arch
from tilewright.compiler.errors import MeshMappingError
from tilewright.compiler.mesh_algos import GEMM_ALGOS, GEMV_ALGOS

__all__ = ["mesh", "with_mesh", "ROWS_OPTION", "COLS_OPTION", "LINK_OPTION", "HOP_OPTION"]

ROWS_OPTION = typer.Option(None, "--rows", help="override the ArchSpec's mesh.rows (cores)")
COLS_OPTION = typer.Option(None, "--cols", help="override the ArchSpec's mesh.cols (cores)")
LINK_OPTION = typer.Option(None, "--link-bytes", help="override mesh.link_bytes_per_cycle "
                           "(link bandwidth, bytes per cycle per direction)")
HOP_OPTION = typer.Option(None, "--hop-latency", help="override mesh.hop_latency_cycles (alpha, "
                          "cycles per hop)")


def with_mesh(spec: ArchSpec, source: str, **fields) -> ArchSpec:
    """``spec`` with the mesh fields the user set on the command line (``None``: keep); the copy
    is validated like the YAML (an out-of-range value is one line naming ``mesh.<field>``)."""
    changes = {k: v for k, v in fields.items() if v is not None}
    if not changes:
        return spec
    if spec.mesh is None:
        raise MeshMappingError(f"{source}: the ArchSpec has no mesh section to override "
                               f"({', '.join('mesh.' + k for k in changes)})")
    data = spec.model_dump(mode="json", exclude_none=True)
    data["mesh"].update(changes)
    return ArchSpec.from_dict(data, source=f"{source} with command-line overrides")

console = Console()
err_console = Console(stderr=True)


def mesh(
    op: str = typer.Argument(..., help="gemv | gemm"),
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset with a mesh "
                             "section (wse2, mesh4x4)"),
    m: int = typer.Option(1, "--m", "-m", min=1, max=MAX_DIM, help="rows of A (gemv: must be 1)"),
    k: int = typer.Option(..., "--k", "-k", min=1, max=MAX_DIM, help="contraction dimension"),
    n: int = typer.Option(..., "--n", "-n", min=1, max=MAX_DIM, help="columns of B"),
    algo: str = typer.Option("mesh", "--algo", help=f"gemm: {' | '.join(GEMM_ALGOS)} "
                             "(summa_relay: WaferLLM's SUMMA baseline); gemv: "
                             f"{' | '.join(GEMV_ALGOS)}"),
    elem_bytes: Optional[int] = typer.Option(
        None, "--elem-bytes", min=1, max=MAX_ELEM_BYTES,
        help="bytes per element; default and only accepted value: the mesh cores' "
        "tensor_engine.input_format (wse2: bf16, 2 bytes as WaferLLM's fp16)"),
    broadcast_x: bool = typer.Option(True, "--broadcast-x/--x-preloaded",
                                     help="gemv: include the vector broadcast along rows"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    rtl: bool = typer.Option(False, "--rtl", help="also run the op on the Verilated RTL mesh "
                             "(int8 in, int32 out, random inputs) and print model vs RTL cycles"),
    seed: int = typer.Option(0, "--seed", help="--rtl: seed of the random int8 inputs"),
    rows: Optional[int] = ROWS_OPTION,
    cols: Optional[int] = COLS_OPTION,
    link_bytes: Optional[int] = LINK_OPTION,
    hop_latency: Optional[float] = HOP_OPTION,
) -> None:
    """Predict cycles, time, link and core utilization of a GEMV/GEMM on a mesh of cores."""
    spec = with_mesh(load_arch(arch), arch, rows=rows, cols=cols, link_bytes_per_cycle=link_bytes,
                     hop_latency_cycles=hop_latency)
    if spec.mesh is None:
        raise MeshMappingError(f"{spec.name}: the ArchSpec has no mesh section")
    elem_bytes = mesh_elem_bytes(spec, elem_bytes)
    from tilewright.dataflow_sim.mesh import (  # noqa: PLC0415  (lazy: mesh model)
        defect_grid, mesh_gemm, mesh_gemv)
    from tilewright.dataflow_sim.mesh.capacity import (  # noqa: PLC0415  (lazy: only to run)
        gemm_capacity, gemv_capacity)
    if op == "gemm":
        if algo not in GEMM_ALGOS:
            raise MeshMappingError(f"--algo {algo!r}: gemm accepts {', '.join(GEMM_ALGOS)}")
        p = defect_grid(spec.mesh, "skip", square=True).pr
        cap = gemm_capacity(spec, m, k, n, p, algo, elem_bytes).check()
        rep = mesh_gemm(spec, m, k, n, algo=algo, elem_bytes=elem_bytes)
    elif op == "gemv":
        if algo not in GEMV_ALGOS:
            raise MeshMappingError(f"--algo {algo!r}: gemv accepts {', '.join(GEMV_ALGOS)}")
        if m != 1:
            raise MeshMappingError(f"--m {m}: gemv multiplies one row vector (m = 1); use gemm")
        g = defect_grid(spec.mesh, "skip")
        cap = gemv_capacity(spec, k, n, g.pr, g.pc, elem_bytes).check()
        rep = mesh_gemv(spec, k, n, algo=algo, elem_bytes=elem_bytes, broadcast_x=broadcast_x)
    else:
        raise MeshMappingError(f"op {op!r}: must be gemv or gemm")
    d = rep.summary()
    d["capacity"] = cap.summary()
    if rtl:
        d["rtl"] = _rtl_check(spec, op, algo, m, k, n, elem_bytes, broadcast_x, seed)
    d["compute_efficiency"] = round(rep.compute_efficiency(spec.mesh.core_macs_per_cycle), 6)
    if as_json:
        print(json.dumps(d))
        _exit_unless_rtl_agrees(d)
        return
    print_table(f"{op} [{m},{k}]x[{k},{n}] on {spec.name} ({spec.mesh.rows}x{spec.mesh.cols}), "
                f"algo {algo}, grid {d['grid']}", ["metric", Column("value", numeric=True)],
                [[key, d[key]] for key in (
                    "cycles", "us", "compute_efficiency", "core_utilization_mean",
                    "link_utilization_max", "link_utilization_mean", "memory_bytes_max",
                    "routes_per_core_max", "cores_used",
                    *(k for k in ("logical_grid", "dead_cores", "cores_lost") if k in d))],
                console)          # spares: the repaired grid (mesh_repair)
    print_table("phases (cycles = one run; total = x repeat)",
                ["phase", *(Column(c, numeric=True) for c in (
                    "repeat", "latency", "serialization", "compute", "cycles", "total"))],
                [[p.name, p.repeat, p.latency_cycles, p.serialization_cycles, p.compute_cycles,
                  p.cycles, p.total_cycles] for p in rep.phases], console)
    if rtl:
        r = d["rtl"]
        print_table("RTL mesh (Verilator) vs mesh model, int8 in / int32 accumulate",
                    [Column(c, numeric=True) for c in ("model cycles", "RTL cycles",
                                                       "cycle-exact", "outputs == numpy")],
                    [[r["model_cycles"], r["rtl_cycles"], r["model_cycles"] == r["rtl_cycles"],
                      r["bit_exact"]]], console)
    _exit_unless_rtl_agrees(d)


def _exit_unless_rtl_agrees(d: dict) -> None:
    """Exit with status 1 when the RTL check ran and the RTL disagrees with the model (cycles)
    or with numpy (outputs): a failed check never exits 0."""
    r = d.get("rtl")
    if r is not None and not (r["model_cycles"] == r["rtl_cycles"] and r["bit_exact"]):
        err_console.print("error: the RTL mesh disagrees with the mesh model or numpy "
                          f"(cycles {r['rtl_cycles']} vs {r['model_cycles']}, bit-exact "
                          f"{r['bit_exact']})", markup=False, highlight=False)
        raise typer.Exit(1)


def _rtl_check(spec, op: str, algo: str, m: int, k: int, n: int, elem_bytes: int,
               broadcast_x: bool, seed: int) -> dict:
    """Run the op on the RTL mesh with random int8 inputs; model vs RTL cycles, bit-exactness."""

    ok_algo = algo in (("mesh", "cannon", "summa") if op == "gemm" else ("mesh",))
    if not ok_algo or spec.tensor_engine.input_format != "int8" or not broadcast_x:
        raise MeshMappingError(f"--rtl runs int8 GEMM (--algo mesh | cannon | summa) and GEMV "
                               f"(--algo mesh) on the RTL mesh: use an ArchSpec whose "
                               f"tensor_engine.input_format is int8 (e.g. mesh4x4; "
                               f"{spec.name}: {spec.tensor_engine.input_format}) and the "
                               f"default --broadcast-x")
    from tilewright.cosim.mesh_rtl import (  # noqa: PLC0415  (lazy: pulls in amaranth)
        rtl_gemm, rtl_gemv)
    err = Console(stderr=True)
    say = lambda msg: err.print(msg, markup=False, highlight=False)    # noqa: E731  (progress)
    import numpy as np  # noqa: PLC0415  (lazy: start-up of the CLI stays light)
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    ref = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.uint32).astype(np.int32)
    if op == "gemm":
        run = rtl_gemm(spec, [(a, b)], algo=algo, log=say)[0]
        exact = bool(np.array_equal(run.output, ref))
    else:
        run = rtl_gemv(spec, [(a[0], b)], log=say)[0]
        exact = bool((run.output == ref[0][None]).all())
    return {"model_cycles": int(run.model_cycles), "rtl_cycles": int(run.rtl_cycles),
            "bit_exact": exact}
