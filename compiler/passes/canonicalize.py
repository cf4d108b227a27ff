"""``canonicalize_linear``: fold torch's decomposition of ``nn.Linear`` back into ``linear``.

``addmm(b, x, transpose(W))`` -> ``linear(x, W, b)`` and ``matmul(x, transpose(W))`` ->
``linear(x, W)`` when ``W`` is a constant; the transpose disappears once unused.
"""

from __future__ import annotations

from tilewright.compiler.ir import Graph, Op

__all__ = ["CanonicalizeLinear"]


class CanonicalizeLinear:
    name = "canonicalize_linear"

    def _weight(self, graph: Graph, op: Op) -> str | None:
        """Name of the constant W if ``op``'s matrix operand is ``transpose(W)``."""
        prod = graph.producer(op.inputs[-1])
        if prod is None or prod.kind != "transpose" or not graph.tensors[prod.inputs[0]].is_const:
            return None
        return prod.inputs[0]

    def match(self, op: Op) -> bool:
        # graph is needed to look at producers; transform re-checks (see run_pass contract)
        return op.kind in ("addmm", "matmul") and not op.attrs.get("_not_linear", False)

    def transform(self, graph: Graph, op: Op) -> None:
        w = self._weight(graph, op)
        if w is None:
            op.attrs["_not_linear"] = True  # a genuine matmul: leave it for later stages
            return
        ins = [op.inputs[1], w, op.inputs[0]] if op.kind == "addmm" else [op.inputs[0], w]
        new = Op("linear", ins, list(op.outputs), source=op.source, name=op.name)
        graph.ops[graph.ops.index(op)] = new
        t_op = graph.producer(op.inputs[-1])
        if t_op is not None and not graph.consumers(t_op.outputs[0]):
            graph.ops.remove(t_op)
