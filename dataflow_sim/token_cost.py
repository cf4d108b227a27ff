"""Cost of one LLM inference step on one ArchSpec chip — the one place ``compile``, the sweep
(:func:`tilewright.app.sweep.evaluate.workload_cost`) and the cluster model
(:meth:`tilewright.dataflow_sim.cluster.serving.IterationCost`, compiler cost source) take
per-token bytes, energy and latency from.

A step of ``batch`` sequences at context ``seq`` (prefill: ``seq`` prompt tokens each; decode:
one new token each, ``seq - 1`` cached, :func:`tilewright.models.llm_configs.build_llm`) costs

* ``layers`` x one layer: the compiler's Report of the layer
  (:func:`layer_report`: torch.export -> ``llm`` flow, cached per process; lowered and costed
  per ArchSpec by :func:`~tilewright.compiler.lower_llm.lower_graph` and
  :func:`~tilewright.dataflow_sim.report.program_report`);
* with ``layers="all"`` (configs whose compiled layer is the whole decoder layer: Llama-style,
  MoE with attention, DeepSeek (MLA), Mamba; an MoE config whose attention is not modeled is
  refused) also the **embedding** (a gather of the step's ``tokens`` rows of the
  ``vocab x d_model`` table, :func:`~tilewright.dataflow_sim.cluster.compiled.compiled_embedding`)
  and the **LM head** (final RMSNorm, the ``d_model x vocab`` GEMM and the softmax over the
  vocabulary for the last position of each sequence — ``batch`` rows, what generation samples
  from; :func:`~tilewright.dataflow_sim.cluster.compiled.compiled_head`). A DeepSeek config's
  layers are ``n_moe_layers`` x its compiled MoE decoder layer plus ``n_dense_layers`` x its
  compiled dense-FFN layer (``parts["dense_layer"]``).

Totals add the parts' Report columns (tasks run one after another, as in the Report); seconds
= cycles / clock; energy = :func:`~tilewright.dataflow_sim.energy_area.energy_breakdown` of the
step's MACs, vector operations, off-chip bytes and the engine's SRAM bytes
(:func:`~tilewright.dataflow_sim.report.sram_totals`) on the technology table ``tech``. Per-token
figures divide by the step's new tokens (prefill ``batch x seq``, decode ``batch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler.ir import Graph
from tilewright.compiler.lower_llm import ELEM_BYTES, lower_graph
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.compiler.passes import run_flow
from tilewright.dataflow_sim.energy_area import energy_breakdown, load_tech
from tilewright.dataflow_sim.report import (SRAM_TOTALS, program_report, program_totals,
                                            report_totals)

__all__ = ["StepCost", "llm_step_cost", "layer_graph", "layer_report", "layer_totals",
           "DEFAULT_TECH"]

DEFAULT_TECH = "7nm"
"""technology table used when the caller names none (the cluster energy model's default)"""

_SUMMED = ("total_cycles", "macs", "vector_ops", "bytes", *SRAM_TOTALS)


@lru_cache(maxsize=8)
def layer_graph(model: str, seq: int, batch: int, phase: str, dense: bool = False) -> Graph:
    """One layer of ``model`` exported (shapes only for real-size configs) through the ``llm``
    passes; independent of the ArchSpec, so cached per process. ``dense``: a DeepSeek config's
    dense-FFN layer (:func:`~tilewright.models.llm_configs.build_llm`)."""
    from tilewright.compiler.frontend import (  # noqa: PLC0415  (lazy: pulls in torch)
        export_model, from_exported)
    from tilewright.models.llm_configs import build_llm  # noqa: PLC0415  (lazy: pulls in torch)

    module, example = build_llm(model, seq=seq, batch=batch, phase=phase,  # type: ignore[arg-type]
                                dense=dense)
    graph = from_exported(export_model(module, example), name=model)
    run_flow(graph, "llm")
    return graph


def layer_report(arch: ArchSpec, model: str, *, seq: int, batch: int, phase: str,
                 fmt: str) -> pd.DataFrame:
    """The per-op Report of one layer of ``model`` on ``arch`` in operand format ``fmt``."""
    g = layer_graph(model, seq, batch, phase)
    return program_report(lower_graph(g, arch, fmt=fmt, name=model), arch_for_format(arch, fmt))


def layer_totals(arch: ArchSpec, model: str, *, seq: int, batch: int, phase: str,
                 fmt: str, dense: bool = False) -> dict[str, Any]:
    """:func:`layer_report`'s totals (:func:`~tilewright.dataflow_sim.report.report_totals`)
    without building the DataFrame (the sweep's fast path); ``dense`` as in :func:`layer_graph`."""
    g = layer_graph(model, seq, batch, phase, dense)
    return program_totals(lower_graph(g, arch, fmt=fmt, name=model), arch_for_format(arch, fmt))


@dataclass(frozen=True)
class StepCost:
    """One inference step (module doc). ``parts`` maps ``layer`` (one layer), ``embedding`` and
    ``lm_head`` to their Report totals (:func:`~tilewright.dataflow_sim.report.report_totals`);
    ``energy`` is :func:`~tilewright.dataflow_sim.energy_area.energy_breakdown` of the step
    (pJ terms and ``energy_j``)."""

    model: str
    phase: str
    seq: int
    batch: int
    fmt: str
    layers: int
    whole_model: bool
    tokens: int
    clock_mhz: float
    cycles: int
    macs: int
    vector_ops: int
    dram_bytes: int
    tech: str
    energy: dict[str, float]
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    sram: dict[str, int] = field(default_factory=dict)
    """the step's :data:`~tilewright.dataflow_sim.report.SRAM_TOTALS` (the mapper's scratchpad
    and accumulator bytes of the engine's tasks, their off-chip bytes and MACs), which SRAM
    energy follows"""

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_mhz * 1e6)

    @property
    def energy_j(self) -> float:
        return float(self.energy["energy_j"])

    def per_token(self) -> dict[str, float]:
        """Seconds, joules, off-chip bytes and MACs per new token of the step."""
        n = self.tokens
        return {"seconds_per_token": self.seconds / n, "j_per_token": self.energy_j / n,
                "bytes_per_token": self.dram_bytes / n, "macs_per_token": self.macs / n}

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "phase": self.phase, "seq": self.seq, "batch": self.batch,
                "format": self.fmt, "layers": self.layers, "whole_model": self.whole_model,
                "tokens": self.tokens, "cycles": self.cycles, "seconds": self.seconds,
                "macs": self.macs, "vector_ops": self.vector_ops, "dram_bytes": self.dram_bytes,
                "tech": self.tech, "energy_j": self.energy_j, **self.per_token(), **self.sram,
                "parts": self.parts}


def llm_step_cost(arch: ArchSpec, model: str, *, phase: str, seq: int, batch: int,
                  fmt: str | None = None, layers: int | Literal["all"] = "all",
                  tech: str | None = None, layer: dict[str, Any] | None = None) -> StepCost:
    """Cost of one step of ``model`` on ``arch`` (module doc). ``fmt``: operand format (default
    the tensor engine's input format); ``layers``: ``"all"`` = the config's ``n_layers`` plus
    embedding and LM head, an int = that many layers alone; ``tech``: technology table (default
    :data:`DEFAULT_TECH`); ``layer``: the Report totals of this very layer if the caller compiled
    it already (``compile`` does), else it is compiled here (:func:`layer_totals`)."""
    from tilewright.dataflow_sim.cluster.compiled import (  # noqa: PLC0415  (lazy: pulls in torch)
        compiled_embedding, compiled_head)
    from tilewright.dataflow_sim.cluster.workload import Shard  # noqa: PLC0415  (lazy: torch)
    from tilewright.models.llm_configs import (  # noqa: PLC0415  (lazy: pulls in torch)
        DeepSeekConfig, MambaConfig, ModelInputError, get_config, has_attention)

    cfg = get_config(model)
    whole = layers == "all"
    if whole and not (isinstance(cfg, (MambaConfig, DeepSeekConfig)) or has_attention(cfg)):
        raise ModelInputError(
            f"{model}: the whole-model cost (layers: all) covers configs whose layer has its "
            f"attention (Llama-style, Mixtral/Qwen2-MoE-style) and Mamba; "
            + ("this config's compiled layer is its MoE FFN alone (its attention is not "
               "modeled) — give "
               "layers as a number" if cfg.family == "moe" else
               f"a {cfg.family} config's whole model is costed by `tilewright compile` "
               f"(each layer kind once)"))
    fmt = fmt or arch.tensor_engine.input_format
    if layer is None:
        layer = layer_totals(arch, model, seq=seq, batch=batch, phase=phase, fmt=fmt)
    n_layers = int(cfg.n_layers) if whole else int(layers)
    tokens = batch * (seq if phase == "prefill" else 1)
    parts: dict[str, dict[str, Any]] = {"layer": dict(layer)}
    if whole:
        emb = compiled_embedding(cfg, Shard(), arch, tokens=tokens,
                                 element_bytes=ELEM_BYTES[fmt], fmt=fmt)
        head = compiled_head(cfg, Shard(), arch, tokens=batch, fmt=fmt)
        parts["embedding"] = report_totals(emb.report)
        parts["lm_head"] = report_totals(head.report)
    tot = {k: parts["layer"][k] * n_layers for k in _SUMMED}
    if whole and isinstance(cfg, DeepSeekConfig) and cfg.n_dense_layers:
        parts["dense_layer"] = dict(layer_totals(arch, model, seq=seq, batch=batch, phase=phase,
                                                 fmt=fmt, dense=True))
        tot = {k: parts["layer"][k] * cfg.n_moe_layers
               + parts["dense_layer"][k] * cfg.n_dense_layers for k in _SUMMED}
    for name in ("embedding", "lm_head"):
        if name in parts:
            for k in _SUMMED:
                tot[k] += parts[name][k]
    tech = tech or DEFAULT_TECH
    sram = {k: int(tot[k]) for k in SRAM_TOTALS}
    energy = energy_breakdown(arch_for_format(arch, fmt), load_tech(tech), macs=tot["macs"],
                              vector_ops=tot["vector_ops"], dram_bytes=tot["bytes"], **sram)
    return StepCost(model=model, phase=phase, seq=seq, batch=batch, fmt=fmt, layers=n_layers,
                    whole_model=whole, tokens=tokens, clock_mhz=arch.clock_mhz,
                    cycles=int(tot["total_cycles"]), macs=int(tot["macs"]),
                    vector_ops=int(tot["vector_ops"]), dram_bytes=int(tot["bytes"]), tech=tech,
                    energy={k: float(v) for k, v in energy.items()}, parts=parts, sram=sram)
