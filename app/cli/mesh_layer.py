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
from tilewright.app.cli.tables import Column, print_table

from tilewright.app.cli import MAX_DIM, MAX_ELEM_BYTES, mesh_elem_bytes
from tilewright.app.cli.mesh import COLS_OPTION, HOP_OPTION, LINK_OPTION, ROWS_OPTION, with_mesh
from tilewright.arch import load_arch
from tilewright.compiler.errors import MeshMappingError

__all__ = ["mesh_layer"]

console = Console()

#: what an MoE layer's time covers (stage times = layers x this); capacity counts attention too
MOE_TIMES = ("the MoE block only (router, dispatch, experts, combine); attention is not timed "
             "(its weights and KV cache are counted in capacity)")


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


def _capacity_of(spec, cfg, prog, phase: str, *, tokens: int, context: int, batch: int,
                 elem_bytes: int, defects: str, is_moe: bool):
    """``wafers -> Capacity`` of the whole model placed as ``prog``'s partition places it."""
    from tilewright.compiler.mesh_partition import (  # noqa: PLC0415  (lazy: mesh model)
        rect_regions, square_regions)
    from tilewright.dataflow_sim.mesh import defect_grid  # noqa: PLC0415  (lazy: mesh model)
    from tilewright.dataflow_sim.mesh.capacity import (  # noqa: PLC0415  (lazy: mesh model)
        llama_capacity, moe_capacity, program_buffer_bytes)
    from tilewright.dataflow_sim.mesh.grid import (  # noqa: PLC0415  (lazy: mesh model)
        as_mapping_error)
    buf = program_buffer_bytes(prog)
    if not is_moe:
        pr, pc = (int(x) for x in prog.meta["grid"].split("x"))
        return lambda w: llama_capacity(spec, cfg, phase, tokens=tokens, context=context, pr=pr,
                                        pc=pc, elem_bytes=elem_bytes, buffer_bytes=buf, wafers=w)
    n_reg = cfg.n_experts + (1 if cfg.n_shared_experts else 0)
    with as_mapping_error():
        if phase == "prefill":
            grid, _, _, regions = square_regions(defect_grid(spec.mesh, defects, square=True),
                                                 n_reg)
        else:
            grid = defect_grid(spec.mesh, defects)
            regions = rect_regions(grid, n_reg)
    return lambda w: moe_capacity(spec, cfg, phase, tokens=tokens, context=context, batch=batch,
                                  grid=grid, regions=regions, elem_bytes=elem_bytes,
                                  buffer_bytes=buf, wafers=w)


def mesh_layer(
    model: str = typer.Option(..., "--model", help="LLM config: a Llama (llama3-8b, tiny-llama) "
                              "or MoE (mixtral-8x7b, tiny-moe) name (a positional MODEL is "
                              "deprecated)"),
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset with a mesh "
                             "section (wse2, mesh4x4)"),
    phase: str = typer.Option("prefill", "--phase", help="prefill | decode"),
    tokens: Optional[int] = typer.Option(None, "--seq", min=1, max=MAX_DIM,
                                         help="prefill: prompt tokens [default: 4096] "
                                         "(--tokens is deprecated)"),
    context: Optional[int] = typer.Option(None, "--context", min=1, max=MAX_DIM,
                                          help="decode: cached tokens (Llama: attended to; "
                                          "MoE: held in the KV cache of every decode token; "
                                          "--all: the prompt handed over) [default: 4096]"),
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
    wafers: Optional[str] = typer.Option(None, "--wafers", help="N | auto: split the model's "
                                         "layers over N wafers (auto: the fewest that hold it), "
                                         "pipelined over the ArchSpec's inter-wafer link"),
    rows: Optional[int] = ROWS_OPTION,
    cols: Optional[int] = COLS_OPTION,
    link_bytes: Optional[int] = LINK_OPTION,
    hop_latency: Optional[float] = HOP_OPTION,
    whole: bool = typer.Option(False, "--all", help="the whole model end to end (Llama): "
                               "embedding, every layer, final norm and LM head, and for decode "
                               "the handover from the prefill layout (prompt = --context)"),
    heatmap: Optional[Path] = typer.Option(None, "--heatmap", help="write a PNG map of link "
                                           "busy cycles per core (the layer; with --all the "
                                           "whole model)"),
    save: Optional[Path] = typer.Option(None, "--save", help="also write the Program here"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Partition one layer over the mesh (a Program of mesh tasks), check that the whole model
    fits the wafer's SRAM (or plan it over several wafers), and print per-op cycles."""
    from tilewright.models.llm_configs import (  # noqa: PLC0415  (lazy: pulls in torch)
        MoEConfig, get_config)
    from tilewright.compiler.mesh_partition import (  # noqa: PLC0415  (lazy: mesh model)
        partition_layer, partition_moe_layer)
    from tilewright.dataflow_sim.mesh import run_mesh_program  # noqa: PLC0415  (lazy: mesh model)
    from tilewright.dataflow_sim.mesh.capacity import (  # noqa: PLC0415  (lazy: mesh model)
        wafer_stages)
    from tilewright.dataflow_sim.mesh.grid import (  # noqa: PLC0415  (lazy: mesh model)
        as_mapping_error)
    from tilewright.dataflow_sim.mesh.llm import (  # noqa: PLC0415  (lazy: mesh model)
        WaferPlan, choose_wafers, wafer_link_us)
    spec = with_mesh(load_arch(arch), arch, rows=rows, cols=cols,
                     link_bytes_per_cycle=link_bytes, hop_latency_cycles=hop_latency)
    if spec.mesh is None:
        raise MeshMappingError(f"{arch}: the ArchSpec has no mesh section")
    elem_bytes = mesh_elem_bytes(spec, elem_bytes)
    from tilewright.models.resolve import refuse_user_model  # noqa: PLC0415  (lazy: models)
    refuse_user_model(model, "--model", "the mesh partition needs a decoder LLM's shapes "
                      "(layers, width, heads)")
    try:
        cfg = get_config(model)
    except ValueError as exc:
        raise MeshMappingError(str(exc)) from None
    from tilewright.models.llm_shapes import \
        unmodeled_fields  # noqa: PLC0415  (lazy: models layer)
    left = unmodeled_fields(cfg, head_dim=True)   # never ignore a field the config sets
    if left:
        raise MeshMappingError(f"--model {model}: the mesh partition does not model "
                               f"{', '.join(left)} (accepted: configs without them; "
                               f"`tilewright compile` models them)")
    if experts is not None and not isinstance(cfg, MoEConfig):     # never ignore --experts
        raise MeshMappingError(f"--experts {experts!r}: {model} is not an MoE model (family "
                               f"{cfg.family}); --experts routes the decode tokens of an MoE "
                               f"layer (e.g. tiny-moe, mixtral-8x7b)")
    if experts is not None and phase == "prefill":
        raise MeshMappingError(f"--experts {experts!r}: routes decode tokens; the prefill "
                               f"spreads --seq evenly over the experts; accepted: --phase "
                               f"decode with --experts, or prefill without it")
    if phase == "decode" and tokens is not None:                     # never ignore --tokens
        raise MeshMappingError(f"--seq {tokens}: sets the prompt of a prefill; a decode step "
                               "runs one token (MoE: one per --experts group) over --context "
                               "cached tokens; accepted: --phase prefill --seq N, or --phase "
                               "decode --context N")
    if phase == "prefill" and context is not None:
        raise MeshMappingError(f"--context {context}: sets the cached tokens of a decode step; a "
                               "prefill attends over its own --seq; accepted: --phase decode "
                               "--context N, or --phase prefill --seq N")
    moe_context = context    # as given: the MoE partition refuses it where attention is not modelled
    tokens = 4096 if tokens is None else tokens
    context = 4096 if context is None else context
    is_moe = isinstance(cfg, MoEConfig)
    if whole and is_moe:
        raise MeshMappingError(f"--all: {model} is an MoE model; the end-to-end model (embedding, "
                               "layers, LM head and the prefill-to-decode handover) covers "
                               "Llama-style decoders, not yet the MoE layers' expert regions; "
                               "accepted: --all with a Llama model, or one MoE layer without it")
    if heatmap is not None and (heatmap.suffix.lower() != ".png" or
                                not heatmap.resolve().parent.is_dir()):
        raise MeshMappingError(f"--heatmap {heatmap}: accepted: a .png file in an existing "
                               "folder")
    token_experts = _experts(experts)
    with as_mapping_error():
        if is_moe:
            prog = partition_moe_layer(spec, model, phase, tokens=tokens,
                                       token_experts=token_experts, context=moe_context,
                                       algo=algo, elem_bytes=elem_bytes, defects=defects)
        else:
            prog = partition_layer(spec, model, phase, tokens=tokens,
                                   context=4096 if context is None else context, algo=algo,
                                   elem_bytes=elem_bytes, defects=defects)
    batch = len(token_experts) if token_experts else 1
    capacity_of = _capacity_of(spec, cfg, prog, phase, tokens=tokens, context=context,
                               batch=batch, elem_bytes=elem_bytes, defects=defects,
                               is_moe=is_moe)
    if whole and phase == "decode":          # the prefill it is handed over from must fit too
        with as_mapping_error():
            pre = partition_layer(spec, model, "prefill", tokens=context, algo=None,
                                  elem_bytes=elem_bytes, defects=defects)
        pre_of = _capacity_of(spec, cfg, pre, "prefill", tokens=context, context=context,
                              batch=1, elem_bytes=elem_bytes, defects=defects, is_moe=False)
        dec_of = capacity_of
        capacity_of = lambda w: max(dec_of(w), pre_of(w), key=lambda c: c.total)  # noqa: E731
    n_wafers, cap = choose_wafers(capacity_of, cfg.n_layers, wafers)      # before any timing
    crossing = (tokens if phase == "prefill" else batch) * cfg.d_model * elem_bytes
    link_us = wafer_link_us(spec, crossing, n_wafers, asked=wafers)
    run = run_mesh_program(prog, spec)
    if save is not None:
        prog.save(save)
    table = run.table()
    stages = wafer_stages(cfg.n_layers, n_wafers)
    extras = _extras(spec, cfg, phase, tokens=tokens, context=context, elem_bytes=elem_bytes,
                     defects=defects, stages=stages) if whole else {}
    stage_us = [n * run.us for n in stages]
    if whole:
        stage_us[0] += extras["embedding"].us
        stage_us[-1] += extras["final norm (RMSNorm)"].us + extras["lm head"].us
    plan = WaferPlan(n_wafers, stages, stage_us, crossing, link_us)
    handover_us = max((r.us for k, r in extras.items() if k.startswith("handover")),
                      default=0.0)
    if heatmap is not None:
        _heatmap(heatmap, run, cfg.n_layers, extras, f"{prog.name} on {spec.name}"
                 + (" (whole model)" if whole else " (one layer)"))
    grid = prog.meta["grid"]
    physical = f"{spec.mesh.rows}x{spec.mesh.cols}"
    if as_json:
        print(json.dumps({"program": prog.name, "arch": spec.name, "cycles": run.cycles,
                          "us": round(run.us, 6), "useful_macs": run.useful_macs,
                          "tasks": len(prog.tasks), **{k: v for k, v in prog.meta.items()
                                                       if k != "token_experts"},
                          "physical_grid": physical, "capacity": cap.summary(),
                          "layer_times": MOE_TIMES if is_moe else "the whole decoder layer",
                          "whole_model": {**plan.summary(), **_e2e_json(extras, handover_us),
                                    **({"end_to_end_us": round(plan.latency_us + handover_us,
                                                               6)} if whole else {})},
                          "ops": table.to_dict(orient="records")}))
        return
    title = (f"{prog.name} on {spec.name}: logical grid {grid} of the {physical} physical "
             f"mesh: {run.cycles} cycles, {run.us:.3f} us per layer, {len(prog.tasks)} mesh tasks"
             + (f" (attention: {prog.meta['attention']})" if "attention" in prog.meta else ""))
    us = "{:.3f}"
    tot = table[["cycles", "compute_cycles", "transfer_cycles", "reduction_cycles"]].sum()
    print_table(title, ["op", *(Column(c, numeric=True, float_fmt=us if c == "us" else None)
                               for c in ("cycles", "us", "compute", "transfer", "reduction",
                                         "useful_macs", "cores_used", "phases"))],
                [*([row.op, row.cycles, float(row.us), row.compute_cycles, row.transfer_cycles,
                    row.reduction_cycles, row.useful_macs, row.cores_used, row.phases]
                   for row in table.itertuples(index=False)),
                 ["layer", tot.cycles, float(run.us), tot.compute_cycles, tot.transfer_cycles,
                  tot.reduction_cycles, run.useful_macs, "", ""]], console)
    if whole:
        print_table(f"{cfg.n_layers} layers end to end ({phase}"
                    + (", after the prefill" if phase == "decode" else "") + ")",
                    ["part", *(Column(c, numeric=True, float_fmt=us if "us" in c else None)
                               for c in ("count", "us each", "us", "compute", "transfer",
                                         "reduction"))],
                    [[name, count, float(u), float(u * count), sp["compute_cycles"] * count,
                      sp["transfer_cycles"] * count, sp["reduction_cycles"] * count]
                     for name, count, u, sp in _e2e_rows(run, table, cfg.n_layers, extras)],
                    console)
        console.print(f"end to end: {plan.latency_us + handover_us:.3f} us"
                      + (f" (handover {handover_us:.3f} us)" if handover_us else ""),
                      markup=False, highlight=False)
    console.print(f"SRAM per core: {cap.total:,} B of {cap.sram_bytes:,} (weights "
                  f"{cap.weight_bytes:,}, KV cache {cap.kv_bytes:,}, buffers "
                  f"{cap.buffer_bytes:,}) on the fullest wafer", markup=False, highlight=False)
    if n_wafers > 1:
        if is_moe:
            console.print(f"stage times: {MOE_TIMES}", markup=False, highlight=False)
        console.print(f"{n_wafers} wafers, layers {plan.layers}: stages "
                      f"{', '.join(f'{u:.3f}' for u in plan.stage_us)} us, link "
                      f"{plan.link_us:.3f} us per crossing ({crossing:,} B); {cfg.n_layers} "
                      f"layers end to end {plan.latency_us:.3f} us, pipelined interval "
                      f"{plan.interval_us:.3f} us", markup=False, highlight=False)


def _extras(spec, cfg, phase: str, *, tokens: int, context: int, elem_bytes: int, defects: str,
            stages: list[int]) -> dict:
    """The end-to-end parts besides the layers (MeshReports, by name); decode: one handover per
    distinct wafer load (wafers re-lay out their own layers at once)."""
    from tilewright.dataflow_sim.mesh.grid import (  # noqa: PLC0415  (lazy: mesh model)
        as_mapping_error)
    from tilewright.dataflow_sim.mesh.llm import (  # noqa: PLC0415  (lazy: mesh model)
        embedding_lookup, final_norm_and_head, handover)
    with as_mapping_error():
        out = {"embedding": embedding_lookup(spec, cfg, phase, tokens=tokens,
                                             elem_bytes=elem_bytes, defects=defects)}
        out.update(final_norm_and_head(spec, cfg, phase, elem_bytes=elem_bytes,
                                       defects=defects))
        if phase == "decode":
            n = len(stages)
            seen = set()
            for i, layers in enumerate(stages):
                key = (layers, i == 0, i == n - 1)
                if key not in seen:
                    seen.add(key)
                    out[f"handover (wafer {i + 1})" if n > 1 else "handover"] = handover(
                        spec, cfg, tokens=context, layers=layers, elem_bytes=elem_bytes,
                        defects=defects, embedding=key[1], head=key[2])
    return out


def _e2e_rows(run, table, n_layers: int, extras: dict):
    """(part, count, us each, split of one) for the end-to-end table."""
    from tilewright.dataflow_sim.mesh.program_run import (  # noqa: PLC0415  (lazy: mesh model)
        split_cycles)
    layer = {k: int(table[k].sum()) for k in ("compute_cycles", "transfer_cycles",
                                              "reduction_cycles")}
    rows = [(k, 1, r.us, split_cycles(r)) for k, r in extras.items() if k == "embedding"]
    rows.append(("decoder layer", n_layers, run.us, layer))
    rows += [(k, 1, r.us, split_cycles(r)) for k, r in extras.items() if k != "embedding"]
    return rows


def _e2e_json(extras: dict, handover_us: float) -> dict:
    from tilewright.dataflow_sim.mesh.program_run import (  # noqa: PLC0415  (lazy: mesh model)
        split_cycles)
    if not extras:
        return {}
    return {"parts": {k: {"us": round(r.us, 6), "cycles": r.cycles, **split_cycles(r)}
                      for k, r in extras.items()},
            "handover_us": round(handover_us, 6)}


def _heatmap(path: Path, run, n_layers: int, extras: dict, title: str) -> None:
    """PNG of link busy cycles per core (east + south links, both directions) summed over the
    layer's ops (x ``n_layers`` when ``extras`` are given, the whole model) and the extras."""
    from tilewright.dataflow_sim.mesh.program_run import (  # noqa: PLC0415  (lazy: mesh model)
        link_busy_map)
    import matplotlib  # noqa: PLC0415  (lazy: matplotlib is heavy)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  (lazy: matplotlib is heavy)
    layer = sum(link_busy_map(r) for _, r in run.ops)
    total = layer * (n_layers if extras else 1) + sum(link_busy_map(r) for r in extras.values())
    fig, ax = plt.subplots(figsize=(8, 6))
    from matplotlib.colors import LogNorm  # noqa: PLC0415  (lazy: matplotlib is heavy)
    import numpy as np  # noqa: PLC0415  (lazy: start-up of the CLI stays light)
    im = ax.imshow(np.maximum(total, 1), cmap="viridis", interpolation="nearest",
                   aspect="auto", norm=LogNorm())
    fig.colorbar(im, ax=ax, label="link busy cycles (flits), east + south links of each core")
    ax.set_title(title)
    ax.set_xlabel("core column")
    ax.set_ylabel("core row")
    fig.savefig(path, dpi=100)
    plt.close(fig)
