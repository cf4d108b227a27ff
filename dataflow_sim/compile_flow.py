"""Compile a named LLM config (one layer) end to end: the compiler's entry
(:func:`tilewright.compiler.entry.compile_traced`, ``flow="llm"``: torch.export -> IR -> ``llm``
passes -> Program) -> (functional run for the example counts) -> per-op Report; and
:func:`kinds_step_cost`, the whole model of a config with several layer kinds (Jamba) or one the
shared step cost does not cover (Mamba-2): every distinct layer kind compiled once.

Tiny configs are built on CPU with seeded weights and can be executed; real-shape configs are
built on the ``meta`` device (no storage) and compiled from shapes only — their Program lists the
weights in ``meta["unknown_constants"]`` and cannot be executed, but it can be costed. Whole-model
figures multiply the one-layer report by the config's ``n_layers`` (all layers of these configs
have the same shapes; DeepSeek-V3's layer is its MoE FFN alone, its MLA not being modeled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler.entry import compile_traced
from tilewright.compiler.frontend import export_model, from_exported
from tilewright.compiler.lower_llm import lower_graph
from tilewright.compiler.passes import run_flow
from tilewright.compiler.ir import Graph
from tilewright.compiler.program import GroupedGemmTask, Program
from tilewright.dataflow_sim.functional import run_program
from tilewright.dataflow_sim.report import SRAM_TOTALS, program_report, report_totals
from tilewright.compiler.lower_llm import ELEM_BYTES
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.dataflow_sim.energy_area import energy_breakdown, load_tech
from tilewright.models.llm_configs import build_llm, get_config
from tilewright.models.llm_shapes import Mamba2Config, MambaConfig, layer_kinds

__all__ = ["CompiledLLM", "compile_llm", "compile_module", "kinds_step_cost", "needs_kinds_cost",
           "kind_totals", "clear_kind_cache"]


@dataclass
class CompiledLLM:
    """What :func:`compile_llm` produced. ``inputs`` (numpy, by Program input name) and
    ``outputs`` (functional-model results of the Program outputs) are empty for shape-only
    compiles."""

    name: str
    program: Program
    graph: Graph
    report: pd.DataFrame
    layers: int = 1
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def shape_only(self) -> bool:
        return bool(self.program.meta.get("unknown_constants"))

    def totals(self, *, all_layers: bool = False) -> dict[str, Any]:
        return report_totals(self.report, layers=self.layers if all_layers else 1)


def _with_example_counts(program: Program, env: dict[str, np.ndarray] | None) -> Program:
    """Fill every grouped GEMM's ``example_counts`` from the run (or mark the even split)."""
    tasks = []
    for t in program.tasks:
        if isinstance(t, GroupedGemmTask):
            if env is not None:
                counts = tuple(int(c) for c in env[t.counts])
                t = t.model_copy(update={"example_counts": counts, "counts_source": "example run"})
            else:
                t = t.model_copy(update={"counts_source": "even split (shape-only compile)"})
        tasks.append(t)
    return program.model_copy(update={"tasks": tasks})


def compile_module(module: Any, example_inputs: tuple, arch: ArchSpec, *, fmt: str = "fp32",
                   granularity: str = "channel", name: str | None = None,
                   execute: bool | None = None) -> CompiledLLM:
    """Compile a torch module with example inputs (a tuple); see :func:`compile_llm`.
    ``execute`` (default: when the weights have values) runs the Program on the functional
    model with the example inputs, to report real expert counts."""
    name = name or getattr(module, "config_name", None) or type(module).__name__
    compiled = compile_traced(module, example_inputs, arch, flow="llm", fmt=fmt,
                              granularity=granularity, name=name)
    graph, program, arch = compiled.graph, compiled.program, compiled.arch
    meta_device = bool(program.meta["unknown_constants"]) or any(
        getattr(x, "is_meta", False) for x in example_inputs)
    if execute is None:
        execute = not meta_device
    inputs: dict[str, np.ndarray] = {}
    outputs: dict[str, np.ndarray] = {}
    env = None
    if execute:
        inputs = {n: x.detach().cpu().numpy() for n, x in zip(program.inputs, example_inputs)}
        env = run_program(program, inputs)
        outputs = {o: env[o] for o in program.outputs}
    program = _with_example_counts(program, env)
    return CompiledLLM(name=name, program=program, graph=graph,
                       report=program_report(program, arch), inputs=inputs, outputs=outputs)


def compile_llm(name: str, arch: ArchSpec, *, seq: int = 8, batch: int = 1,
                phase: str = "prefill", fmt: str = "fp32", granularity: str = "channel",
                seed: int = 0, execute: bool | None = None,
                kind: str | None = None) -> CompiledLLM:
    """Compile one layer of config ``name`` (see :func:`tilewright.models.llm_configs.build_llm`)
    for ``arch`` built for number format ``fmt`` (GEMM operands; int8/fp8 weights scaled per
    output ``channel`` or per ``tensor``: ``granularity``). Tiny configs are executed on the
    functional model with the example inputs so the report uses the real expert counts; real
    configs compile from shapes only. ``kind``: which layer kind of a hybrid config
    (:func:`~tilewright.models.llm_shapes.layer_kinds`; default layer 0's); ``layers`` is then
    the number of layers of that kind."""
    cfg = get_config(name)
    module, example = build_llm(name, seed=seed, seq=seq, batch=batch, phase=phase,  # type: ignore[arg-type]
                                kind=kind)
    out = compile_module(module, example, arch, fmt=fmt, granularity=granularity, name=name,
                         execute=execute)
    kinds = layer_kinds(cfg)
    out.layers = kinds.get(kind or "", kinds.get(getattr(module, "kind", "layer"), cfg.n_layers))
    return out


def needs_kinds_cost(name: str) -> bool:
    """True for configs whose whole model :func:`kinds_step_cost` costs (several layer kinds,
    or Mamba-2) rather than :func:`tilewright.dataflow_sim.token_cost.llm_step_cost`."""
    cfg = get_config(name)
    return len(layer_kinds(cfg)) > 1 or isinstance(cfg, Mamba2Config)


_KIND_TOTALS: dict[tuple, dict[str, Any]] = {}
"""per process: (ArchSpec JSON, config repr, name, kind, phase, seq, batch, fmt) -> one layer's
totals (:meth:`CompiledLLM.totals`) of that kind; filled by :func:`kind_totals`"""
KIND_CACHE_SIZE = 256
"""entries :data:`_KIND_TOTALS` keeps (the oldest is dropped; one entry is a small dict)"""


def clear_kind_cache() -> None:
    """Empty :func:`kind_totals`' per-process caches (benchmarks: the uncached cost)."""
    _KIND_TOTALS.clear()
    _kind_graph.cache_clear()


@lru_cache(maxsize=32)
def _kind_graph(name: str, cfg_key: str, kind: str, phase: str, seq: int, batch: int) -> Graph:
    """One layer of kind ``kind`` of config ``name`` (fields ``cfg_key``, part of the cache key)
    built as :func:`compile_llm` builds it (seed 0), exported and through the ``llm`` passes:
    the front half of :func:`~tilewright.compiler.entry.compile_traced`, which reads no ArchSpec
    and no format, so it is cached per process; :func:`kind_totals` lowers it per design."""
    module, example = build_llm(name, seed=0, seq=seq, batch=batch,  # type: ignore[arg-type]
                                phase=phase, kind=None if kind == "layer" else kind)
    graph = from_exported(export_model(module, example), name=name)
    run_flow(graph, "llm")
    return graph


def kind_totals(arch: ArchSpec, name: str, *, kind: str, phase: str, seq: int, batch: int,
                fmt: str) -> dict[str, Any]:
    """One layer of kind ``kind`` (``"layer"``: a config with one kind) of config ``name``
    compiled shape-only by :func:`compile_llm` for ``arch`` in ``fmt``, its totals cached per
    process under everything that compile reads (the ArchSpec, the config's fields, the kind,
    phase, seq, batch and format), so a sweep evaluating the same design and shape again (another
    workload weight, a resumed or repeated point, the same model at several places) does not
    compile again."""
    cfg_key = repr(get_config(name))
    key = (arch.model_dump_json(), cfg_key, name, kind, phase, seq, batch, fmt)
    hit = _KIND_TOTALS.get(key)
    if hit is None:     # compile_traced's llm flow, its arch-independent front half cached
        graph = _kind_graph(name, cfg_key, kind, phase, seq, batch)
        arch_f = arch_for_format(arch, fmt)
        program = lower_graph(graph, arch_f, fmt=fmt, granularity="channel", name=name)
        hit = report_totals(program_report(program, arch_f))
        if len(_KIND_TOTALS) >= KIND_CACHE_SIZE:
            _KIND_TOTALS.pop(next(iter(_KIND_TOTALS)))
        _KIND_TOTALS[key] = hit
    return dict(hit)


def kinds_step_cost(arch: ArchSpec, name: str, *, phase: str, seq: int, batch: int, fmt: str,
                    tech: str | None = None) -> dict[str, Any]:
    """One inference step of the whole model ``name``: each distinct layer kind compiled once
    (shape-only) and counted as many times as the config has layers of it, plus the embedding
    gather of the step's tokens and the LM head (final norm, GEMM, softmax) of the last position
    of each sequence — the same parts and conventions as
    :func:`~tilewright.dataflow_sim.token_cost.llm_step_cost`, whose embedding and head Reports
    it reuses. Returns the step's totals (cycles, MACs, vector ops, off-chip bytes, seconds,
    energy on ``tech``) and ``parts`` (``layer_kinds``: kind -> count and one layer's totals)."""
    from tilewright.dataflow_sim.cluster.compiled import (  # noqa: PLC0415  (lazy: pulls in torch)
        compiled_embedding, compiled_head)
    from tilewright.dataflow_sim.cluster.workload import Shard  # noqa: PLC0415  (lazy: torch)
    from tilewright.dataflow_sim.token_cost import DEFAULT_TECH  # noqa: PLC0415  (lazy: torch)

    cfg = get_config(name)
    kinds: dict[str, dict[str, Any]] = {}
    for kind, count in layer_kinds(cfg).items():
        kinds[kind] = {"count": count, **kind_totals(arch, name, kind=kind, phase=phase,
                                                     seq=seq, batch=batch, fmt=fmt)}
    tokens = batch * (seq if phase == "prefill" else 1)
    # the embedding and head Reports depend on d_model, the vocabulary and the norm's eps only
    proxy = MambaConfig(cfg.name, d_model=cfg.d_model, n_layers=cfg.n_layers,
                        vocab_size=getattr(cfg, "padded_vocab", cfg.vocab_size),
                        pad_vocab_size_multiple=1, norm_eps=cfg.norm_eps)
    emb = report_totals(compiled_embedding(proxy, Shard(), arch, tokens=tokens,
                                           element_bytes=ELEM_BYTES[fmt], fmt=fmt).report)
    head = report_totals(compiled_head(proxy, Shard(), arch, tokens=batch, fmt=fmt).report)
    summed = ("total_cycles", "macs", "vector_ops", "bytes", *SRAM_TOTALS)
    tot = {k: sum(v[k] * v["count"] for v in kinds.values()) + emb[k] + head[k] for k in summed}
    tech = tech or DEFAULT_TECH
    energy = energy_breakdown(arch_for_format(arch, fmt), load_tech(tech), macs=tot["macs"],
                              vector_ops=tot["vector_ops"], dram_bytes=tot["bytes"],
                              **{k: tot[k] for k in SRAM_TOTALS})
    seconds = tot["total_cycles"] / (arch.clock_mhz * 1e6)
    return {"model": name, "phase": phase, "seq": seq, "batch": batch, "format": fmt,
            "layers": cfg.n_layers, "whole_model": True, "tokens": tokens,
            "cycles": int(tot["total_cycles"]), "seconds": seconds, "macs": int(tot["macs"]),
            "vector_ops": int(tot["vector_ops"]), "dram_bytes": int(tot["bytes"]), "tech": tech,
            "energy_j": float(energy["energy_j"]),
            "seconds_per_token": seconds / tokens,
            "j_per_token": float(energy["energy_j"]) / tokens,
            "bytes_per_token": tot["bytes"] / tokens, "macs_per_token": tot["macs"] / tokens,
            "parts": {"layer_kinds": kinds, "embedding": emb, "lm_head": head}}
