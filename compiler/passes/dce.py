"""``dce``: remove ops none of whose outputs is used by another op or is a graph output."""

from __future__ import annotations

from tilewright.compiler.ir import Graph, Op

__all__ = ["DeadCodeElimination", "eliminate_dead_ops"]


def eliminate_dead_ops(graph: Graph) -> int:
    """Remove dead ops in one backward sweep (linear time); return how many were removed."""
    live = set(graph.outputs)
    keep: list[Op] = []
    for op in reversed(graph.ops):
        if any(o in live for o in op.outputs):
            keep.append(op)
            live.update(op.inputs)
    removed = len(graph.ops) - len(keep)
    graph.ops = keep[::-1]
    return removed


class DeadCodeElimination:
    """As a pass: matches any op; one transform sweeps the whole graph, marking survivors."""

    name = "dce"

    def match(self, op: Op) -> bool:
        return not op.attrs.get("_live", False)

    def transform(self, graph: Graph, op: Op) -> None:
        eliminate_dead_ops(graph)
        for o in graph.ops:
            o.attrs["_live"] = True
