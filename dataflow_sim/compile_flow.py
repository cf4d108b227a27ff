"""Compile a named LLM config (one layer) end to end: the compiler's entry
(:func:`tilewright.compiler.entry.compile_traced`, ``flow="llm"``: torch.export -> IR -> ``llm``
passes -> Program) -> (functional run for the example counts) -> per-op Report.

Tiny configs are built on CPU with seeded weights and can be executed; real-shape configs are
built on the ``meta`` device (no storage) and compiled from shapes only — their Program lists the
weights in ``meta["unknown_constants"]`` and cannot be executed, but it can be costed. Whole-model
figures multiply the one-layer report by the config's ``n_layers`` (all layers of these configs
have the same shapes; for MoE configs the layer is the MoE FFN layer that ``build_llm`` returns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler.entry import compile_traced
from tilewright.compiler.ir import Graph
from tilewright.compiler.program import GroupedGemmTask, Program
from tilewright.dataflow_sim.functional import run_program
from tilewright.dataflow_sim.report import program_report, report_totals
from tilewright.models.llm_configs import build_llm, get_config

__all__ = ["CompiledLLM", "compile_llm", "compile_module"]


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
                seed: int = 0, execute: bool | None = None) -> CompiledLLM:
    """Compile one layer of config ``name`` (see :func:`tilewright.models.llm_configs.build_llm`)
    for ``arch`` built for number format ``fmt`` (GEMM operands; int8/fp8 weights scaled per
    output ``channel`` or per ``tensor``: ``granularity``). Tiny configs are executed on the
    functional model with the example inputs so the report uses the real expert counts; real
    configs compile from shapes only."""
    cfg = get_config(name)
    module, example = build_llm(name, seed=seed, seq=seq, batch=batch, phase=phase)  # type: ignore[arg-type]
    out = compile_module(module, example, arch, fmt=fmt, granularity=granularity, name=name,
                         execute=execute)
    out.layers = cfg.n_layers
    return out
