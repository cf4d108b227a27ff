"""``tilewright mesh-layer``: compile one transformer or MoE layer to a mesh Program and cost it.

To be registered in :mod:`tilewright.app.cli.main` as ``app.command("mesh-layer")(mesh_layer)``. User
errors are :class:`tilewright.dataflow_sim.mesh.MeshMappingError` (the compiler's
``MeshScheduleError`` is re-raised as one) and :class:`tilewright.arch.ArchSpecError`; the CLI
prints them as one ``error: ...`` line with exit status 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from tilewright.app.cli import MAX_DIM, MAX_ELEM_BYTES, mesh_elem_bytes
from tilewright.arch import load_arch
from tilewright.compiler.mesh_partition import partition_layer, partition_moe_layer
from tilewright.dataflow_sim.mesh import MeshMappingError, run_mesh_program
from tilewright.dataflow_sim.mesh.grid import as_mapping_error

__all__ = ["mesh_layer"]

console = Console()


def _experts(text: str | None) -> list[list[int]] | None:
    """``"0,1;2,3"`` -> ``[[0, 1], [2, 3]]`` (one group of expert ids per decode token)."""
    if not text:
        return None
    try:
        return [[int(e) for e in tok.split(",")] for tok in text.split(";")]
    except ValueError:
        raise MeshMappingError(f"--experts {text!r}: expected expert ids like '0,1;2,3' (one "
                               "comma-separated group per token, groups separated by ';')") \
            from None


def mesh_layer(
    model: str = typer.Argument(..., help="LLM config: a Llama (llama3-8b, tiny-llama) or MoE "
                                "(mixtral-8x7b, tiny-moe) name"),
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset with a mesh "
                             "section (wse2, mesh4x4)"),
    phase: str = typer.Option("prefill", "--phase", help="prefill | decode"),
    tokens: int = typer.Option(4096, "--tokens", min=1, max=MAX_DIM, help="prefill: prompt tokens"),
    context: Optional[int] = typer.Option(None, "--context", min=1, max=MAX_DIM,
                                          help="decode: cached tokens (default 4096)"),
    experts: Optional[str] = typer.Option(None, "--experts", help="decode (MoE): experts per "
                                          "token, e.g. '0,1;2,3' for two tokens"),
    algo: Optional[str] = typer.Option(None, "--algo", help="prefill: mesh | cannon | summa; "
                                       "decode: mesh | allreduce"),
    defects: str = typer.Option("skip", "--defects", help="skip (drop rows/columns with "
                                "defects) | route (reroute messages around them); a mesh with "
                                "spare_rows/spare_cols repairs defects in hardware (skip only)"),
    elem_bytes: Optional[int] = typer.Option(
        None, "--elem-bytes", min=1, max=MAX_ELEM_BYTES,
        help="bytes per element; default and only accepted value: the mesh cores' "
        "tensor_engine.input_format"),
    save: Optional[Path] = typer.Option(None, "--save", help="also write the Program here"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Partition one layer over the mesh (a Program of mesh tasks) and print per-op cycles."""
    from tilewright.models.llm_configs import (  # noqa: PLC0415  (lazy: pulls in torch)
        MoEConfig, get_config)
    spec = load_arch(arch)
    elem_bytes = mesh_elem_bytes(spec, elem_bytes)
    try:
        cfg = get_config(model)
    except ValueError as exc:
        raise MeshMappingError(str(exc)) from None
    if experts is not None and not isinstance(cfg, MoEConfig):     # never ignore --experts
        raise MeshMappingError(f"--experts {experts!r}: {model} is not an MoE model (family "
                               f"{cfg.family}); --experts routes the decode tokens of an MoE "
                               f"layer (e.g. tiny-moe, mixtral-8x7b)")
    if experts is not None and phase == "prefill":
        raise MeshMappingError(f"--experts {experts!r}: routes decode tokens; the prefill "
                               f"spreads --tokens evenly over the experts; accepted: --phase "
                               f"decode with --experts, or prefill without it")
    with as_mapping_error():
        if isinstance(cfg, MoEConfig):
            prog = partition_moe_layer(spec, model, phase, tokens=tokens,
                                       token_experts=_experts(experts), context=context, algo=algo,
                                       elem_bytes=elem_bytes, defects=defects)
        else:
            prog = partition_layer(spec, model, phase, tokens=tokens,
                                   context=4096 if context is None else context, algo=algo,
                                   elem_bytes=elem_bytes, defects=defects)
    run = run_mesh_program(prog, spec)
    if save is not None:
        prog.save(save)
    table = run.table()
    if as_json:
        print(json.dumps({"program": prog.name, "arch": spec.name, "cycles": run.cycles,
                          "us": round(run.us, 6), "useful_macs": run.useful_macs,
                          "tasks": len(prog.tasks), **{k: v for k, v in prog.meta.items()
                                                       if k != "token_experts"},
                          "ops": table.to_dict(orient="records")}))
        return
    t = Table(title=f"{prog.name} on {spec.name} ({spec.mesh.rows}x{spec.mesh.cols}): "
                    f"{run.cycles} cycles, {run.us:.3f} us, {len(prog.tasks)} mesh tasks")
    if "attention" in prog.meta:
        t.caption = f"attention: {prog.meta['attention']}"
    for c in ("op", "cycles", "us", "useful_macs", "cores_used", "phases"):
        t.add_column(c, justify="left" if c == "op" else "right")
    for row in table.itertuples(index=False):
        t.add_row(row.op, str(row.cycles), f"{row.us:.3f}", str(row.useful_macs),
                  str(row.cores_used), str(row.phases))
    console.print(t)
