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

from tilewright.app.cli.single_core import refuse_mesh
from tilewright.app.cli import JSON_HELP, MAX_DIM, print_json
from tilewright.app.cli.tables import Column, print_table
from tilewright.arch import load_arch
from tilewright.errors import UserError
from tilewright.progress import LOGGER, progress

__all__ = ["compile_cmd", "models_cmd", "UnknownModel", "UnknownFormat", "FormatMismatch",
           "TooManyTokens"]

console = Console()


class UnknownModel(UserError, ValueError):
    """``--model`` names no config; the message lists the known ones."""


class UnknownFormat(UserError, ValueError):
    """``--format`` names no number format the compiler knows; the message lists them."""


class FormatMismatch(UserError, ValueError):
    """``--format`` differs from the ArchSpec's ``tensor_engine`` formats: compiling for it would
    answer for another array (the one built for that format), so it is refused."""


def arch_format(spec, fmt: str | None, where: str) -> str:
    """The GEMM operand format of a compile on ``spec``: its ``tensor_engine.input_format``
    (which must equal ``weight_format``: a compile takes one operand format). An explicit
    ``fmt`` that differs is refused (:class:`FormatMismatch`), never run on a rebuilt array."""
    te = spec.tensor_engine
    own = te.input_format
    if te.weight_format != own:
        raise FormatMismatch(f"{where}: tensor_engine.input_format {own} and weight_format "
                             f"{te.weight_format} differ; compile takes one operand format "
                             f"(set both to the same format)")
    if fmt is not None and fmt != own:
        raise FormatMismatch(f"--format {fmt}: {spec.name} computes in tensor_engine."
                             f"input_format {own}; omit --format or give an ArchSpec built for "
                             f"{fmt} (tensor_engine.input_format/weight_format: {fmt})")
    return own


class TooManyTokens(UserError, ValueError):
    """``--batch`` x ``--seq`` beyond :data:`MAX_DIM` tokens (a shape-only compile of llama3-8b
    at 2**20 x 8000 asked numpy for 62 GiB)."""


def compile_cmd(
    model: str = typer.Option(..., "--model", help="a built-in name (see `tilewright models`), "
                              "a Hugging Face config.json or a folder holding one, "
                              "path/file.py:factory, or a .onnx file"),
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset name"),
    seq: int = typer.Option(8, "--seq", min=1, help="context: prompt tokens (prefill), or "
                            "positions attended = cached + the new token (decode)"),
    batch: int = typer.Option(1, "--batch", min=1, max=MAX_DIM, help="sequences per batch"),
    phase: str = typer.Option("prefill", "--phase", help="prefill | decode"),
    fmt: Optional[str] = typer.Option(None, "--format", help="GEMM operand format: fp32, bf16, "
                                      "int8, int16, fp8-e4m3, fp8-e5m2, mxint8, mxfp8; default "
                                      "and only "
                                      "accepted value: the ArchSpec's "
                                      "tensor_engine.input_format"),
    granularity: str = typer.Option("channel", "--granularity",
                                    help="int8/int16/fp8 weight scales: channel | tensor"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1,
                                        help="show only the N costliest ops"),
) -> None:
    """Compile one layer of a model config for an ArchSpec; print the per-op table and totals."""
    from tilewright.compiler.lower_llm import ELEM_BYTES  # noqa: PLC0415  (lazy: pulls in pandas)
    from tilewright.dataflow_sim.compile_flow import (  # noqa: PLC0415  (lazy: pulls in pandas)
        compile_llm, kinds_step_cost, needs_kinds_cost)
    from tilewright.dataflow_sim.token_cost import \
        llm_step_cost  # noqa: PLC0415  (lazy: pulls in torch)
    from tilewright.models.llm_configs import (  # noqa: PLC0415  (lazy: pulls in torch)
        DeepSeekConfig, has_attention, param_count)
    from tilewright.models.resolve import resolve_model  # noqa: PLC0415  (lazy: models layer)

    resolved = resolve_model(model)
    if resolved.kind == "mlp":
        raise UnknownModel(f"--model {model}: a demo MLP; compile takes an LLM config, a "
                           f"config.json, file.py:factory or .onnx (run the MLP with "
                           f"`tilewright demo --model {model}`)")
    user = resolved.kind == "user"       # path/file.py:factory or *.onnx: compiled whole
    if user and (seq, batch, phase) != (8, 1, "prefill"):
        raise UnknownModel(f"--model {model}: --seq/--batch/--phase apply to named configs; a "
                           f"user model runs on the example inputs its factory/file gives")
    if fmt is not None and fmt not in ELEM_BYTES:
        raise UnknownFormat(f"unknown format {fmt!r}; known: {', '.join(ELEM_BYTES)}")
    if phase not in ("prefill", "decode"):
        raise typer.BadParameter("must be prefill or decode", param_hint="--phase")
    if granularity not in ("channel", "tensor"):
        raise typer.BadParameter("must be channel or tensor", param_hint="--granularity")
    if batch * seq > MAX_DIM:
        raise TooManyTokens(f"--batch {batch} x --seq {seq} = {batch * seq:,} tokens; at most "
                            f"{MAX_DIM:,}")
    spec = refuse_mesh(load_arch(arch), "compile", arch)
    fmt_source = "--format" if fmt is not None else "the ArchSpec's tensor_engine.input_format"
    fmt = arch_format(spec, fmt, arch)
    LOGGER.info("compile: format %s (%s)", fmt, fmt_source)
    cfg = resolved.config
    if resolved.kind == "user":
        from tilewright.dataflow_sim.compile_flow import \
            compile_module  # noqa: PLC0415  (lazy: pulls in pandas)
        with progress(f"compiling {model} for {spec.name}"):
            result = compile_module(resolved.module, resolved.example_inputs, spec, fmt=fmt,
                                    granularity=granularity, name=model)
    else:
        with progress(f"compiling one layer of {model} for {spec.name}"):
            result = compile_llm(model, spec, seq=seq, batch=batch, phase=phase, fmt=fmt,
                                 granularity=granularity)
    df = result.report
    layer, full = result.totals(), result.totals(all_layers=True)
    params = param_count(model) if cfg is not None else {"total": None, "active": None}
    why = ("a user model is compiled whole (no per-layer config to scale)" if user else
           "the embedding and LM head are compiled with per-channel weight scales only; use "
           "--granularity channel" if granularity != "channel" else
           "the compiled layer of this MoE config is its MoE FFN alone (its attention is not "
           "modeled)" if cfg.family == "moe" and not has_attention(cfg)
           and not isinstance(cfg, DeepSeekConfig) else None)
    if why:
        step = None
    elif needs_kinds_cost(model):    # several layer kinds (Jamba), or Mamba-2
        with progress(f"costing the whole model ({model}), each layer kind once"):
            step = kinds_step_cost(spec, model, phase=phase, seq=seq, batch=batch, fmt=fmt)
    else:
        with progress(f"costing the whole model ({model})"):
            step = llm_step_cost(   # the sweep's and the cluster's cost path
                spec, model, phase=phase, seq=seq, batch=batch, fmt=fmt, layer=layer).as_dict()
    if as_json:
        shape = (dict.fromkeys(("seq", "batch", "phase")) if user    # its example inputs
                 else {"seq": seq, "batch": batch, "phase": phase})
        print(json.dumps({"model": model, "arch": spec.name, **shape, "format": fmt, "format_source": fmt_source,
                          "granularity": granularity,
                          "accumulator": result.program.meta.get("accumulator"),
                          "shape_only": result.shape_only,
                          "params_total": params["total"], "params_active": params["active"],
                          "total_cycles": layer["total_cycles"], "layer": layer,
                          "all_layers": full,
                          "whole_model": step,
                          **({"whole_model_not_computed": why} if why else {}),
                          "conventions": dict(df.attrs),
                          "ops": json.loads(df.to_json(orient="records"))}))
        return
    shown = df.nlargest(limit, "time_cycles") if limit else df
    cols = [Column(c, numeric=c not in ("task", "kind", "op", "bound", "mapping"),
                   float_fmt="{:.2f}" if c == "intensity" else None)
            for c in ("task", "kind", "op", "macs", "cycles", "bytes", "compulsory_bytes",
                      "intensity", "bound", "time_cycles", "buffer_bytes", "mapping")]
    print_table(f"{model} ({'its example inputs' if user else f'{phase}, seq {seq}, batch {batch}'}, "
                f"{fmt} from {fmt_source}) on {spec.name}: "
                + ("whole model" if user else "one layer"
                   + (f" of kind {_first_kind(cfg)} ({result.layers} of {cfg.n_layers} layers)"
                      if _first_kind(cfg) else "")),
                cols,
                [[r.task, r.kind, r.op, r.macs, r.cycles, r.bytes, r.compulsory_bytes,
                  r.intensity, f"{r.bound} {r.bound_share:.0%}", r.time_cycles, r.buffer_bytes,
                  r.mapping] for r in shown.itertuples()], console)
    console.print(f"{'whole model' if user else 'one layer'}: {layer['total_cycles']:,} cycles "
                  f"({layer['time_us']:.1f} us at "
                  f"{spec.clock_mhz} MHz), {layer['macs']:,} MACs, {layer['bytes']:,} bytes "
                  f"({layer['compulsory_bytes']:,} compulsory)"
                  + ("" if user else f"; x {full['layers']} layers: {full['total_cycles']:,} cycles")
                  + (" (shape-only compile)" if result.shape_only else ""))
    if params["total"] is not None:
        console.print(f"parameters: {params['total']:,} total, {params['active']:,} active "
                      f"per token")
    if user:
        pass                                # the line above is the whole model
    elif step is None:
        console.print(f"whole model: not computed ({why})")
    else:
        kinds = step["parts"].get("layer_kinds")
        if kinds:
            console.print("layer kinds: " + "; ".join(
                f"{k} x {v['count']}: {v['total_cycles']:,} cycles each"
                for k, v in kinds.items()))
        dense = (f" ({cfg.n_dense_layers} of them dense-FFN layers, compiled too)"
                 if "dense_layer" in step["parts"] else "")
        console.print(f"whole model (x {step['layers']} layers{dense} + embedding + LM head): "
                      f"{step['cycles']:,} cycles ({step['seconds'] * 1e3:.3f} ms), "
                      f"{step['dram_bytes']:,} off-chip bytes, {step['energy_j']:.4g} J "
                      f"({step['tech']}); per token: {step['bytes_per_token']:,.0f} bytes, "
                      f"{step['j_per_token']:.4g} J")
    console.print(f"conventions: cycle model {df.attrs['convention']}, vector lanes "
                  f"{df.attrs['vector_lanes']} ({df.attrs['vector_lanes_source']}), "
                  f"{df.attrs['bytes_per_cycle']:.2f} off-chip bytes/cycle")


def _first_kind(cfg) -> str | None:
    """Layer 0's kind when ``cfg`` has several layer kinds (the one ``compile`` tabulates)."""
    from tilewright.models.llm_shapes import layer_kinds  # noqa: PLC0415  (lazy: models layer)
    if cfg is None:
        return None
    kinds = layer_kinds(cfg)
    return next(iter(kinds)) if len(kinds) > 1 else None


def models_cmd(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List every model config: the LLM configs (``compile``, ``cluster``, sweeps) and the
    demo's MLPs (``demo --model``), with their shapes and parameter counts."""
    from tilewright.models.demo_shapes import \
        MLP_SHAPES  # noqa: PLC0415  (lazy: models layer on demand)
    from tilewright.models.llm_shapes import (  # noqa: PLC0415  (lazy: models layer on demand)
        LLM_CONFIGS, param_count)
    if as_json:
        llms = {name: {"family": cfg.family, "layers": cfg.n_layers,
                       "params": param_count(name)["total"],
                       "config": dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else None}
                for name, cfg in LLM_CONFIGS.items()}
        mlps = {name: {"family": "mlp", "layers": len(sizes) - 1,    # Linear(i, o): i*o + o
                       "params": sum(i * o + o for i, o in zip(sizes, sizes[1:])),
                       "config": {"sizes": list(sizes), "input_shape": list(shape)}}
                for name, (sizes, shape, _text) in MLP_SHAPES.items()}
        print_json({"models": {**llms, **mlps}})
        return

    rows = []
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
        rows.append([name, cfg.family, "compile, cluster, sweep", shapes, cfg.n_layers,
                     param_count(name)["total"] or None])
    for name, (sizes, shape, text) in MLP_SHAPES.items():
        # a Linear(i, o) holds i*o weights and o biases
        params = sum(i * o + o for i, o in zip(sizes, sizes[1:]))
        rows.append([name, "mlp", "demo", f"{text}; input {'x'.join(map(str, shape))}",
                     len(sizes) - 1, params])
    print_table("model configs", ["name", "family", "used by", "shapes",
                                  Column("layers", numeric=True),
                                  Column("params", numeric=True)], rows, console)
