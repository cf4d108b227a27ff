"""``fuse_attention``: ``matmul -> [mul scale] -> [masked_fill causal] -> softmax -> matmul`` ->
one ``attention`` op, lowered to the streaming (FlashAttention) cascade.

Matched on a ``softmax`` over the last axis whose input is ``masked_fill(x, mask, -inf)`` and/or
``mul(x, scalar)`` of ``matmul(q, kT)`` where ``kT = permute(k)`` swaps the last two axes, and whose
output feeds exactly one ``matmul(p, v)`` as its left operand; every intermediate has one user.
The mask must be provably causal: ``gt(key_pos, query_pos)`` where each side is an ``arange``
(constant ``iota``) moved by ``reshape`` (unsqueeze) and ``add`` of an integer scalar, the key
position varying along the last axis and the query position along the one before. Then
``mask[i, j] = j > i + causal_offset`` and the op carries ``causal_offset`` instead of a mask
tensor (an S x T mask would make the buffer grow with the sequence). Anything else is left
unfused (it still runs, op by op).
"""

from __future__ import annotations

import numpy as np

from tilewright.compiler.ir import Graph, Op

__all__ = ["FuseAttention", "index_form"]


def _single_user(graph: Graph, tensor: str) -> Op | None:
    users = graph.consumers(tensor)
    return users[0] if len(users) == 1 and tensor not in graph.outputs else None


def index_form(graph: Graph, name: str) -> tuple[int, int] | None:
    """``(axis_from_end, offset)`` if tensor ``name`` equals ``index along one axis + offset``
    (an ``arange`` from 0 with step 1, reshaped by inserting size-1 axes, plus integer scalars);
    ``axis_from_end`` counts 1 for the last axis, 0 for a single-element tensor (constant, any
    axis). None if it is not of that form."""
    t = graph.tensors[name]
    if t.data is not None:
        d = t.data
        if d.ndim == 1 and d.dtype.kind == "i" and np.array_equal(d, np.arange(d.size)):
            return 1, 0
        return None
    op = graph.producer(name)
    if op is None:
        return None
    if op.kind == "add" and len(op.inputs) == 1 and isinstance(op.attrs.get("scalar"), int):
        inner = index_form(graph, op.inputs[0])
        return None if inner is None else (inner[0], inner[1] + op.attrs["scalar"])
    if op.kind == "reshape":
        src = graph.tensors[op.inputs[0]].shape
        inner = index_form(graph, op.inputs[0])
        if inner is None:
            return None
        size = src[len(src) - inner[0]] if inner[0] else 1
        dst = tuple(op.attrs["shape"])
        if [d for d in dst if d != 1] != [d for d in src if d != 1]:
            return None
        if size == 1 or inner[0] == 0:
            return 0, inner[1]
        # the varying axis keeps its place counted among non-1 axes; find it in dst
        pos = [i for i, d in enumerate(dst) if d != 1]
        src_pos = [i for i, d in enumerate(src) if d != 1].index(len(src) - inner[0])
        return len(dst) - pos[src_pos], inner[1]
    return None


def causal_offset_of(graph: Graph, mask: str) -> int | None:
    """``c`` if ``mask[..., i, j] == (j > i + c)``, else None (see module doc)."""
    op = graph.producer(mask)
    if op is None or op.kind != "gt" or len(op.inputs) != 2:
        return None
    key, query = (index_form(graph, x) for x in op.inputs)
    if key is None or query is None or key[0] not in (0, 1) or query[0] not in (0, 2):
        return None
    return query[1] - key[1]


class FuseAttention:
    name = "fuse_attention"

    def match(self, op: Op) -> bool:
        return op.kind == "softmax" and not op.attrs.get("_no_fuse", False)

    def _find(self, graph: Graph, sm: Op) -> dict | None:
        x = graph.tensors[sm.inputs[0]]
        if sm.attrs["axis"] != len(x.shape) - 1:
            return None
        pv = _single_user(graph, sm.outputs[0])
        if pv is None or pv.kind != "matmul" or pv.inputs[0] != sm.outputs[0]:
            return None
        chain, cur, offset, scale = [sm], sm.inputs[0], None, 1.0
        prod = graph.producer(cur)
        if prod is not None and prod.kind == "masked_fill" and prod.attrs["value"] == -np.inf \
                and _single_user(graph, cur) is sm:
            offset = causal_offset_of(graph, prod.inputs[1])
            if offset is None:
                return None
            chain.append(prod)
            cur = prod.inputs[0]
            prod = graph.producer(cur)
        if prod is not None and prod.kind == "mul" and len(prod.inputs) == 1 \
                and isinstance(prod.attrs.get("scalar"), (int, float)) and _single_user(graph, cur):
            scale = float(prod.attrs["scalar"])
            chain.append(prod)
            cur = prod.inputs[0]
            prod = graph.producer(cur)
        if prod is None or prod.kind != "matmul" or not _single_user(graph, cur):
            return None
        kt = graph.producer(prod.inputs[1])
        nd = len(graph.tensors[prod.inputs[1]].shape)
        swap = list(range(nd - 2)) + [nd - 1, nd - 2]
        if kt is None or kt.kind != "permute" or list(kt.attrs["axes"]) != swap:
            return None
        chain.append(prod)
        return {"q": prod.inputs[0], "k": kt.inputs[0], "v": pv.inputs[1], "pv": pv,
                "chain": chain, "scale": scale, "offset": offset}

    def transform(self, graph: Graph, op: Op) -> None:
        found = self._find(graph, op)
        if found is None:
            op.attrs["_no_fuse"] = True
            return
        pv = found["pv"]
        fused = Op("attention", [found["q"], found["k"], found["v"]], list(pv.outputs),
                   {"scale": found["scale"], "causal_offset": found["offset"]},
                   source=op.source, name=pv.name)
        graph.ops[graph.ops.index(pv)] = fused
        for dead in found["chain"]:
            graph.ops.remove(dead)
            for o in dead.outputs:
                del graph.tensors[o]
