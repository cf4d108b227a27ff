"""The compiler's one entry point: a torch module + example inputs -> Program, for every model kind.

:func:`compile` (re-exported as ``tilewright.compiler.compile``) runs

1. the frontend: ``torch.export`` of ``module`` with ``example_inputs`` -> IR Graph
   (:mod:`~.frontend`);
2. the flow's passes (:mod:`~.passes`) and its lowering to a checked Program:

   ==========  =================================================================================
   flow        what
   ==========  =================================================================================
   ``mlp``     int8 MLP (``nn.Linear`` + ReLU): calibrate on ``calibration`` (default: the
               example input), ``int8`` passes (per-channel symmetric weights), then
               :func:`~.lower_mlp.map_graph` (int8 GEMM + requantize tasks for the GEMM core)
   ``llm``     any supported model (attention, MoE, scan, ...): ``llm`` passes, then
               :func:`~.lower_llm.lower_graph` with GEMM operands in ``fmt`` (fp32, bf16, int8,
               fp8-*, mx*) on ``arch`` built for ``fmt``
   ``auto``    ``mlp`` if the exported graph holds only linear layers and ReLUs on one float
               matrix [M, K] and ``fmt`` is unset or ``int8``; ``llm`` otherwise
   ==========  =================================================================================

``fmt=None`` means the flow's own format: int8 for ``mlp`` (its only one), fp32 for ``llm``.
:func:`compile_traced` returns the Graph, the flow and the ArchSpec the Program was built for
as well (the compile-and-report flow of :mod:`tilewright.dataflow_sim.compile_flow` uses them).
This module imports torch (through the frontend); ``tilewright.compiler`` loads it on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilewright.arch import ArchSpec
from tilewright.compiler.frontend import calibrate, export_model, from_exported
from tilewright.compiler.ir import Graph
from tilewright.compiler.lower_llm import lower_graph
from tilewright.compiler.lower_mlp import map_graph
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.compiler.passes import run_flow
from tilewright.compiler.program import Program

__all__ = ["compile", "compile_traced", "compile_model", "Compiled", "FLOW_CHOICES", "MLP_OPS",
           "choose_flow"]

#: values of ``flow``
FLOW_CHOICES = ("auto", "mlp", "llm")
#: IR op kinds (as the frontend emits them) the MLP flow accepts
MLP_OPS = frozenset({"linear", "relu", "transpose", "mm", "addmm"})


@dataclass(frozen=True)
class Compiled:
    """What :func:`compile_traced` produced: the ``flow`` run, the ``graph`` after its passes,
    the checked ``program`` and the ``arch`` it was built for (``llm``: built for ``fmt``)."""

    flow: str
    graph: Graph
    program: Program
    arch: ArchSpec


def choose_flow(graph: Graph, fmt: str | None = None) -> str:
    """``"mlp"`` if ``graph`` (just imported, before any pass) holds only :data:`MLP_OPS` on one
    fp32 matrix input with one output and ``fmt`` is None or ``"int8"``, else ``"llm"``."""
    if fmt not in (None, "int8") or len(graph.inputs) != 1 or len(graph.outputs) != 1:
        return "llm"
    x = graph.tensors[graph.inputs[0]]
    if x.format != "fp32" or len(x.shape) != 2:
        return "llm"
    return "mlp" if all(op.kind in MLP_OPS for op in graph.ops) else "llm"


def _as_tuple(example_inputs: Any) -> tuple:
    return tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)


def _check_mlp(flow: str, fmt: str | None, inputs: tuple) -> None:
    if flow != "mlp":
        return
    if fmt not in (None, "int8"):
        raise ValueError(f"format {fmt!r}: the mlp flow compiles int8 only (use flow='llm')")
    if len(inputs) != 1:
        raise ValueError(f"the mlp flow takes one example input, got {len(inputs)}")


def compile_traced(module: Any, example_inputs: Any, arch: ArchSpec, *, flow: str = "auto",
                   fmt: str | None = None, granularity: str = "channel", calibration: Any = None,
                   name: str | None = None) -> Compiled:
    """:func:`compile`, also returning the Graph, the flow and the ArchSpec (see
    :class:`Compiled`)."""
    if flow not in FLOW_CHOICES:
        raise ValueError(f"flow {flow!r}: must be one of {', '.join(FLOW_CHOICES)}")
    inputs = _as_tuple(example_inputs)
    _check_mlp(flow, fmt, inputs)
    name = name or getattr(module, "config_name", None) or type(module).__name__
    ep = export_model(module, inputs)
    graph = from_exported(ep, name=name)
    if flow == "auto":
        flow = choose_flow(graph, fmt)
    _check_mlp(flow, fmt, inputs)
    if flow == "mlp":
        calibrate(ep, graph, inputs[0] if calibration is None else calibration)
        run_flow(graph, "int8")
        return Compiled("mlp", graph, map_graph(graph, arch, name=name), arch)
    fmt = fmt or "fp32"
    run_flow(graph, "llm")
    arch = arch_for_format(arch, fmt)
    program = lower_graph(graph, arch, fmt=fmt, granularity=granularity, name=name)
    return Compiled("llm", graph, program, arch)


def compile(module: Any, example_inputs: Any, arch: ArchSpec, *,  # noqa: A001 (the entry point)
            flow: str = "auto", fmt: str | None = None, granularity: str = "channel",
            calibration: Any = None, name: str | None = None) -> Program:
    """Compile torch ``module`` for ``arch`` (see module docstring): ``example_inputs`` is a tuple
    of tensors (or one tensor); ``flow`` ``"auto"`` | ``"mlp"`` | ``"llm"``; ``fmt`` the GEMM
    operand format (None: the flow's own); ``granularity`` of int8/fp8 weight scales in the
    ``llm`` flow (``"channel"`` | ``"tensor"``); ``calibration`` the float batch of the ``mlp``
    flow's activation scales. ``name`` defaults to the module's ``config_name`` or class name.

    Raises ``UnsupportedOp`` naming an op the compiler cannot handle and its source line,
    ``LoweringError`` (llm) for an op without a lowering, ``DoesNotFit`` naming a layer whose K
    cannot fit the core's buffers (mlp) or a GEMM no tiling fits (llm)."""
    return compile_traced(module, example_inputs, arch, flow=flow, fmt=fmt,
                          granularity=granularity, calibration=calibration, name=name).program


def compile_model(model: Any, example_input: Any, arch: ArchSpec, *,
                  calibration: Any = None, name: str | None = None) -> Program:
    """Compile a torch ``model`` (``nn.Linear`` + ReLU layers) to an int8 Program for ``arch``:
    :func:`compile` with ``flow="mlp"``.

    ``torch.export`` captures ``model`` with ``example_input`` (float [M, K]); activation scales
    come from running the float model on ``calibration`` (default: ``example_input``); weights are
    per-channel symmetric int8 (see :mod:`tilewright.compiler.passes.quantize`). The Program takes
    ``"x"`` int8 [M, K] = clamp(round(x / meta["input_scale"]), -128, 127) and its output times
    ``meta["output_scale"]`` approximates the float model's output. ``name`` defaults to the
    model's ``config_name`` (set by :func:`tilewright.models.configs.build`) or its class name.
    Raises ``UnsupportedOp`` naming an op the compiler cannot handle and its source line, and
    ``DoesNotFit`` naming a layer whose K cannot fit the core's buffers.
    """
    return compile(model, example_input, arch, flow="mlp", calibration=calibration, name=name)
