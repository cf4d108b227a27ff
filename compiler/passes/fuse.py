"""``fuse_linear_relu``: ``relu(linear(...))`` -> ``linear(..., relu=True)``.

Matches a ``linear`` whose output feeds exactly one op, a ``relu``, and is not a graph output.
The fused op writes the relu's output tensor (so calibration ranges of that tensor stay valid).
"""

from __future__ import annotations

from tilewright.compiler.ir import Graph, Op

__all__ = ["FuseLinearRelu"]


class FuseLinearRelu:
    name = "fuse_linear_relu"

    def match(self, op: Op) -> bool:
        return op.kind == "linear" and not op.attrs.get("relu", False) \
            and not op.attrs.get("_no_fuse", False)

    def transform(self, graph: Graph, op: Op) -> None:
        out = op.outputs[0]
        users = graph.consumers(out)
        if out in graph.outputs or len(users) != 1 or users[0].kind != "relu":
            op.attrs["_no_fuse"] = True
            return
        relu = users[0]
        op.outputs = list(relu.outputs)
        op.attrs["relu"] = True
        graph.ops.remove(relu)
        del graph.tensors[out]
