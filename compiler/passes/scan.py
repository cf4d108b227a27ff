"""``lower_scan``: the unrolled selective-scan loop -> one ``scan`` op (chunked by the lowering).

The built-in Mamba layers capture their scan as one op (``tilewright::ssm_scan``, which the
frontend maps straight to ``scan``); this pass is for a model that writes the time loop out (as
:func:`tilewright.models.ssm.scan_loop` does), which ``torch.export`` unrolls into, for
t = 0 .. L-1::

    h_t = add(mul(select(A, 1, t), h_{t-1}), select(B, 1, t))      # operands in either order
    y_t = reduce_sum(mul(h_t, reshape(select(C, 1, t))), last axis)
    y   = stack([y_0 .. y_{L-1}], axis 1)

Matched on the ``stack``; A, B, C must be the same tensors at every step, with A and B
[Bt, L, Di, N] and C [Bt, L, N]; ``h_{-1}`` is any tensor [Bt, Di, N] (zeros or the carried
state). The whole chain becomes ``scan(A, B, C, h_{-1}) -> (y, h_{L-1})``; the intermediate states
must have no users outside the chain. The per-step ``select`` ops die (``dce``).
"""

from __future__ import annotations

from tilewright.compiler.ir import Graph, Op

__all__ = ["LowerScan"]


def _select_of(graph: Graph, name: str, t: int) -> str | None:
    """Source tensor if ``name = select(src, axis=1, index=t)``."""
    op = graph.producer(name)
    if op is not None and op.kind == "select" and op.attrs["axis"] == 1 \
            and op.attrs["index"] == t:
        return op.inputs[0]
    return None


class LowerScan:
    name = "lower_scan"

    def match(self, op: Op) -> bool:
        return op.kind == "stack" and op.attrs.get("axis") == 1 and not op.attrs.get("_no_scan")

    def _chain(self, graph: Graph, stack: Op) -> tuple[list[Op], dict] | None:
        srcs: dict[str, str] = {}
        chain: list[Op] = [stack]
        h_prev: str | None = None
        h_states: list[str] = []

        def same(key: str, value: str | None) -> bool:
            if value is None:
                return False
            return srcs.setdefault(key, value) == value

        for t, y in enumerate(stack.inputs):
            red = graph.producer(y)
            if red is None or red.kind != "reduce_sum" or red.attrs.get("keepdim") \
                    or list(red.attrs["axes"]) != [len(graph.tensors[red.inputs[0]].shape) - 1]:
                return None
            prod = graph.producer(red.inputs[0])
            if prod is None or prod.kind != "mul" or len(prod.inputs) != 2:
                return None
            h, cexp = prod.inputs
            if graph.producer(cexp) is None or graph.producer(cexp).kind != "reshape":
                h, cexp = cexp, h
            cres = graph.producer(cexp)
            if cres is None or cres.kind != "reshape" or not same("c", _select_of(graph, cres.inputs[0], t)):
                return None
            upd = graph.producer(h)
            if upd is None or upd.kind != "add" or len(upd.inputs) != 2:
                return None
            decay, bsel = upd.inputs
            if _select_of(graph, bsel, t) is None:
                decay, bsel = bsel, decay
            if not same("b", _select_of(graph, bsel, t)):
                return None
            dm = graph.producer(decay)
            if dm is None or dm.kind != "mul" or len(dm.inputs) != 2:
                return None
            asel, hp = dm.inputs
            if _select_of(graph, asel, t) is None:
                asel, hp = hp, asel
            if not same("a", _select_of(graph, asel, t)):
                return None
            if t == 0:
                srcs["h0"] = hp
            elif hp != h_prev:
                return None
            h_prev = h
            h_states.append(h)
            chain += [red, prod, cres, upd, dm]
        a, b, c, h0 = (graph.tensors[srcs[k]] for k in ("a", "b", "c", "h0"))
        bt, length, di, n = a.shape
        if b.shape != a.shape or c.shape != (bt, length, n) or h0.shape != (bt, di, n) \
                or length != len(stack.inputs):
            return None
        members = {id(o) for o in chain}
        for h in h_states[:-1]:
            if h in graph.outputs or any(id(u) not in members for u in graph.consumers(h)):
                return None
        return chain, {"inputs": [srcs["a"], srcs["b"], srcs["c"], srcs["h0"]],
                       "outputs": [stack.outputs[0], h_states[-1]]}

    def transform(self, graph: Graph, op: Op) -> None:
        found = self._chain(graph, op)
        if found is None:
            op.attrs["_no_scan"] = True
            return
        chain, io = found
        dead = {id(o) for o in chain}
        keep_tensors = set(io["outputs"])
        for o in chain:
            for t in o.outputs:
                if t not in keep_tensors and t in graph.tensors:
                    del graph.tensors[t]
        graph.ops = [o for o in graph.ops if id(o) not in dead]
        made = [i for i, o in enumerate(graph.ops) if set(o.outputs) & set(io["inputs"])]
        pos = max(made) + 1 if made else 0
        graph.ops.insert(pos, Op("scan", io["inputs"], io["outputs"], source=op.source,
                                 name=f"{op.name}.scan"))
