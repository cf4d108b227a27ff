"""Graph passes in the hls4ml shape: each pass has ``match(op) -> bool`` and
``transform(graph, op) -> None``; passes are grouped into named flows (:data:`FLOWS`) whose
``requires`` names flows that must run first.

:func:`run_flow` applies each pass of a flow until it matches no op (a fixed point), visiting ops
in graph order, so a pass sees the ops earlier passes left behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tilewright.compiler.ir import Graph, Op
from tilewright.compiler.passes.attention import FuseAttention
from tilewright.compiler.passes.canonicalize import CanonicalizeLinear
from tilewright.compiler.passes.dce import DeadCodeElimination
from tilewright.compiler.passes.fuse import FuseLinearRelu
from tilewright.compiler.passes.moe import LowerMoE
from tilewright.compiler.passes.quantize import QuantizeInt8, requant_params
from tilewright.compiler.passes.scan import LowerScan

__all__ = ["GraphPass", "Flow", "PASSES", "FLOWS", "run_pass", "run_flow", "requant_params",
           "CanonicalizeLinear", "FuseLinearRelu", "QuantizeInt8", "FuseAttention", "LowerMoE",
           "LowerScan", "DeadCodeElimination"]


class GraphPass(Protocol):
    """A rewrite: ``match`` selects an op, ``transform`` rewrites the graph around it."""

    name: str

    def match(self, op: Op) -> bool: ...

    def transform(self, graph: Graph, op: Op) -> None: ...


@dataclass(frozen=True)
class Flow:
    """A named, ordered list of pass names; ``requires`` lists flows to run before it."""

    name: str
    passes: tuple[str, ...]
    requires: tuple[str, ...] = field(default=())


#: pass name -> pass object
PASSES: dict[str, GraphPass] = {p.name: p for p in (
    CanonicalizeLinear(), FuseLinearRelu(), QuantizeInt8(), FuseAttention(), LowerMoE(),
    LowerScan(), DeadCodeElimination())}

#: flow name -> Flow
FLOWS: dict[str, Flow] = {
    "optimize": Flow("optimize", ("canonicalize_linear", "fuse_linear_relu")),
    "int8": Flow("int8", ("quantize_int8",), requires=("optimize",)),
    # LLM path (fp32 engine primitives; lowered by compiler.lower_llm): decomposition into attention
    # cascades, routed grouped GEMMs and chunked scans, then dead-code elimination
    "decompose": Flow("decompose", ("canonicalize_linear",)),
    "llm": Flow("llm", ("fuse_attention", "lower_moe", "lower_scan", "dce"),
                requires=("decompose",)),
}


def run_pass(graph: Graph, gpass: GraphPass, *, max_rewrites: int = 100_000) -> int:
    """Apply ``gpass`` until no op matches; return the number of rewrites."""
    count = 0
    while True:
        op = next((o for o in graph.ops if gpass.match(o)), None)
        if op is None:
            return count
        gpass.transform(graph, op)
        count += 1
        if count > max_rewrites:
            raise RuntimeError(f"pass {gpass.name} did not reach a fixed point")


def run_flow(graph: Graph, flow: str = "int8", *, _done: set[str] | None = None) -> Graph:
    """Run flow ``flow`` (after the flows it requires) on ``graph`` in place; return it."""
    done = set() if _done is None else _done
    if flow not in FLOWS:
        raise ValueError(f"unknown flow {flow!r}; known: {', '.join(sorted(FLOWS))}")
    for req in FLOWS[flow].requires:
        if req not in done:
            run_flow(graph, req, _done=done)
    for name in FLOWS[flow].passes:
        run_pass(graph, PASSES[name])
    done.add(flow)
    for op in graph.ops:  # drop passes' private "_" markers
        op.attrs = {k: v for k, v in op.attrs.items() if not k.startswith("_")}
    graph.remove_unused()
    graph.check()
    return graph
