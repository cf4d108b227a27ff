"""``tilewright compile`` and ``tilewright models``: thin typer commands over
:func:`tilewright.dataflow_sim.compile_flow.compile_llm` and :mod:`tilewright.models.llm_configs`.

Registered in :mod:`tilewright.app.cli.main` (``app.command("compile")(compile_cmd)``,
``app.command("models")(models_cmd)``). User errors raise ``UnknownModel`` / ``UnknownFormat``
(ValueError subclasses, below), ``tilewright.compiler.frontend.UnsupportedOp``,
``tilewright.compiler.lower_llm.LoweringError``, ``tilewright.compiler.layout.DoesNotFit`` or
``tilewright.arch.ArchSpecError``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from tilewright.app.cli.single_core import refuse_mesh
from tilewright.app.cli import JSON_HELP, MAX_DIM, print_json
from tilewright.arch import load_arch
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.errors import UserError

__all__ = ["compile_cmd", "models_cmd", "UnknownModel", "UnknownFormat", "TooManyTokens"]

console = Console()


class UnknownModel(UserError, ValueError):
    """``--model`` names no config; the message lists the known ones."""


class UnknownFormat(UserError, ValueError):
    """``--format`` names no number format the compiler knows; the message lists them."""


class TooManyTokens(UserError, ValueError):
    """``--batch`` x ``--seq`` beyond :data:`MAX_DIM` tokens (a shape-only compile of llama3-8b
    at 2**20 x 8000 asked numpy for 62 GiB)."""


def compile_cmd(
    model: str = typer.Option(..., "--model", help="model config name (see `tilewright models`)"),
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset name"),
    seq: int = typer.Option(8, "--seq", min=1, help="context: prompt tokens (prefill), or "
                            "positions attended = cached + the new token (decode)"),
    batch: int = typer.Option(1, "--batch", min=1, max=MAX_DIM, help="sequences per batch"),
    phase: str = typer.Option("prefill", "--phase", help="prefill | decode"),
    fmt: str = typer.Option("fp32", "--format", help="GEMM operand format: fp32, bf16, int8, "
                                                     "fp8-e4m3, fp8-e5m2, mxint8, mxfp8 (the "
                                                     "array is built for it; MX needs rows % 32 "
                                                     "== 0)"),
    granularity: str = typer.Option("channel", "--granularity",
                                    help="int8/fp8 weight scales: channel | tensor"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1,
                                        help="show only the N costliest ops"),
) -> None:
    """Compile one layer of a model config for an ArchSpec; print the per-op table and totals."""
    from tilewright.compiler.lower_llm import ELEM_BYTES  # noqa: PLC0415  (lazy: pulls in pandas)
    from tilewright.dataflow_sim.compile_flow import \
        compile_llm  # noqa: PLC0415  (lazy: pulls in pandas)
    from tilewright.dataflow_sim.token_cost import \
        llm_step_cost  # noqa: PLC0415  (lazy: pulls in torch)
    from tilewright.models.llm_configs import LLM_CONFIGS  # noqa: PLC0415  (lazy: pulls in torch)

    if model not in LLM_CONFIGS:
        raise UnknownModel(f"unknown model {model!r}; known: {', '.join(sorted(LLM_CONFIGS))}")
    if fmt not in ELEM_BYTES:
        raise UnknownFormat(f"unknown format {fmt!r}; known: {', '.join(ELEM_BYTES)}")
    if phase not in ("prefill", "decode"):
        raise typer.BadParameter("must be prefill or decode", param_hint="--phase")
    if granularity not in ("channel", "tensor"):
        raise typer.BadParameter("must be channel or tensor", param_hint="--granularity")
    if batch * seq > MAX_DIM:
        raise TooManyTokens(f"--batch {batch} x --seq {seq} = {batch * seq:,} tokens; at most "
                            f"{MAX_DIM:,}")
    spec = arch_for_format(refuse_mesh(load_arch(arch), "compile", arch), fmt)
    result = compile_llm(model, spec, seq=seq, batch=batch, phase=phase, fmt=fmt,
                         granularity=granularity)
    df = result.report
    layer, full = result.totals(), result.totals(all_layers=True)
    why = ("the embedding and LM head are compiled with per-channel weight scales only; use "
           "--granularity channel" if granularity != "channel" else
           "the compiled layer of an MoE config is its MoE FFN alone (no attention)"
           if LLM_CONFIGS[model].family == "moe" else None)
    step = None if why else llm_step_cost(   # the sweep's and the cluster's cost path
        spec, model, phase=phase, seq=seq, batch=batch, fmt=fmt, layer=layer)
    if as_json:
        print(json.dumps({"model": model, "arch": spec.name, "seq": seq, "batch": batch,
                          "phase": phase, "format": fmt, "granularity": granularity,
                          "accumulator": result.program.meta.get("accumulator"),
                          "shape_only": result.shape_only,
                          "total_cycles": layer["total_cycles"], "layer": layer,
                          "all_layers": full,
                          "whole_model": None if step is None else step.as_dict(),
                          **({"whole_model_not_computed": why} if why else {}),
                          "conventions": dict(df.attrs),
                          "ops": json.loads(df.to_json(orient="records"))}))
        return
    shown = df.nlargest(limit, "time_cycles") if limit else df
    table = Table(title=f"{model} ({phase}, seq {seq}, batch {batch}, {fmt}) on {spec.name}: "
                        f"one layer", show_lines=False)
    for col in ("task", "kind", "op", "macs", "cycles", "bytes", "compulsory_bytes",
                "intensity", "bound", "time_cycles", "buffer_bytes", "mapping"):
        table.add_column(col, justify="left" if col in ("task", "kind", "op", "bound", "mapping")
                         else "right")
    for r in shown.itertuples():
        table.add_row(r.task, r.kind, r.op, f"{r.macs:,}", f"{r.cycles:,}", f"{r.bytes:,}",
                      f"{r.compulsory_bytes:,}", f"{r.intensity:.2f}",
                      f"{r.bound} {r.bound_share:.0%}", f"{r.time_cycles:,}",
                      f"{r.buffer_bytes:,}", r.mapping)
    console.print(table)
    console.print(f"one layer: {layer['total_cycles']:,} cycles ({layer['time_us']:.1f} us at "
                  f"{spec.clock_mhz} MHz), {layer['macs']:,} MACs, {layer['bytes']:,} bytes "
                  f"({layer['compulsory_bytes']:,} compulsory); "
                  f"x {full['layers']} layers: {full['total_cycles']:,} cycles"
                  + (" (shape-only compile)" if result.shape_only else ""))
    if step is None:
        console.print(f"whole model: not computed ({why})")
    else:
        pt = step.per_token()
        console.print(f"whole model (x {step.layers} layers + embedding + LM head): "
                      f"{step.cycles:,} cycles ({step.seconds * 1e3:.3f} ms), "
                      f"{step.dram_bytes:,} off-chip bytes, {step.energy_j:.4g} J ({step.tech}); "
                      f"per token: {pt['bytes_per_token']:,.0f} bytes, "
                      f"{pt['j_per_token']:.4g} J")
    console.print(f"conventions: cycle model {df.attrs['convention']}, vector lanes "
                  f"{df.attrs['vector_lanes']} ({df.attrs['vector_lanes_source']}), "
                  f"{df.attrs['bytes_per_cycle']:.2f} off-chip bytes/cycle")


def models_cmd(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List the model configs with their shapes."""
    from tilewright.models.llm_shapes import (  # noqa: PLC0415  (lazy: models layer on demand)
        LLM_CONFIGS, param_count)
    if as_json:
        print_json({"models": {name: {"family": cfg.family, "layers": cfg.n_layers,
                                      "params": param_count(name)["total"],
                                      "config": dataclasses.asdict(cfg)
                                      if dataclasses.is_dataclass(cfg) else None}
                               for name, cfg in LLM_CONFIGS.items()}})
        return

    table = Table(title="model configs (one layer is compiled; see `tilewright compile`)")
    for col in ("name", "family", "shapes", "layers", "params"):
        table.add_column(col)
    for name, cfg in LLM_CONFIGS.items():
        if cfg.family == "llama":
            shapes = (f"d_model {cfg.d_model}, heads {cfg.n_heads}/{cfg.n_kv_heads} kv, "
                      f"head_dim {cfg.head_dim}, d_ffn {cfg.d_ffn}")
        elif cfg.family == "moe":
            shapes = (f"d_model {cfg.d_model}, experts {cfg.n_experts} top-{cfg.top_k}, "
                      f"d_expert_ffn {cfg.d_expert_ffn}, shared {cfg.n_shared_experts}, "
                      f"router {cfg.router_score}")
        else:
            shapes = (f"d_model {cfg.d_model}, d_inner {cfg.d_inner}, d_state {cfg.d_state}, "
                      f"d_conv {cfg.d_conv}, dt_rank {cfg.rank}")
        total = param_count(name)["total"]
        params = "-" if not total else (f"{total / 1e9:.2f} B" if total >= 1e8
                                        else f"{total / 1e6:.3f} M")
        table.add_row(name, cfg.family, shapes, str(cfg.n_layers), params)
    console.print(table)
