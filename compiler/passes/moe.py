"""``lower_moe``: GShard-style one-hot dispatch/combine -> routing + per-expert grouped GEMMs.

The model (``models/moe.py``) dispatches with dense one-hot tensors ``[T, E, C]`` (O(E*T^2)
memory) contracted by two einsums::

    xe = einsum("tec,td->ecd", dispatch, x)      # dispatch = sum_k slot_hot   (0/1)
    ... expert FFN on xe [E, C, D] with stacked weights [E, ...] ...
    y  = einsum("tec,ecd->td", combine, ye)      # combine = sum_k slot_hot * gates

Matched on the dispatch einsum. ``experts`` [T, k] is the ``topk`` index output found above
``slot_hot``; ``gates`` [T, k] is the tensor the combine multiplies ``slot_hot`` by (through
size-1 reshapes). Both einsums must read the same ``slot_hot``. The rewrite, with R = T*k::

    flat   = reshape(experts, [R]);  perm = argsort(flat)  (stable: token order inside an expert,
                                                            the model's slot order)
    counts = bincount(flat, E)                              (the real counts, at run time)
    token  = floordiv(perm, k);  xs = take_rows(x, token)   [R, D]  rows grouped by expert
    gate   = take_rows(reshape(gates, [R]), perm)           [R]
    expert ops on [R, ...]: matmul with a stacked weight -> grouped_gemm(rows, W, counts)
                            elementwise ops unchanged
    y      = scatter_add_rows(ye, token, gate, rows=T)

so only R = T*k rows are computed (no capacity padding, no dropped tokens). The dispatch/combine
one-hot tensors and the cumsum that built them die (``dce``). Expert regions with other ops are
left as they are (then the einsum has no lowering and compiling fails naming it).
"""

from __future__ import annotations

from tilewright.compiler.ir import Graph, Op, Tensor

__all__ = ["LowerMoE"]

_ELEMENTWISE = {"exp", "neg", "rsqrt", "silu", "sigmoid", "softplus", "relu", "add", "sub", "mul",
                "div", "pow"}


def _ancestors(graph: Graph, start: str, limit: int = 200) -> list[str]:
    """Tensors computed upstream of ``start``, nearest first (breadth-first)."""
    seen, todo, out = {start}, [start], []
    while todo and len(out) < limit:
        x = todo.pop(0)
        op = graph.producer(x)
        if op is None:
            continue
        out.append(x)
        for i in op.inputs:
            if i not in seen:
                seen.add(i)
                todo.append(i)
    return out


def _through_reshapes(graph: Graph, name: str, shape: tuple[int, ...]) -> str | None:
    while graph.tensors[name].shape != shape:
        op = graph.producer(name)
        if op is None or op.kind != "reshape":
            return None
        name = op.inputs[0]
    return name


class LowerMoE:
    name = "lower_moe"

    def match(self, op: Op) -> bool:
        return op.kind == "einsum" and op.attrs["equation"] == "tec,td->ecd" \
            and not op.attrs.get("_no_moe", False)

    @staticmethod
    def _one_hot_over_experts(graph: Graph, idx: str, e: int) -> bool:
        """``idx`` feeds ``eq(reshape(idx), arange(e))`` (the model's expert one-hot)."""
        for r in graph.consumers(idx):
            if r.kind != "reshape":
                continue
            for q in graph.consumers(r.outputs[0]):
                other = [x for x in q.inputs if x != r.outputs[0]]
                if q.kind == "eq" and len(other) == 1:
                    d = graph.tensors[other[0]].data
                    if d is not None and d.ndim == 1 and d.size == e and (d == range(e)).all():
                        return True
        return False

    def _find(self, graph: Graph, disp: Op) -> dict | None:
        dmask, xf = disp.inputs
        red = graph.producer(dmask)
        if red is None or red.kind != "reduce_sum" or list(red.attrs["axes"]) != [1]:
            return None
        slot_hot = red.inputs[0]
        t = graph.tensors[xf].shape[0]
        e = graph.tensors[disp.outputs[0]].shape[0]
        experts = [x for x in _ancestors(graph, slot_hot)
                   if graph.producer(x).kind == "topk" and graph.producer(x).outputs[1] == x
                   and self._one_hot_over_experts(graph, x, e)]
        if not experts:
            return None
        experts = experts[0]                           # the selection nearest to the dispatch
        k = graph.tensors[experts].shape[1]
        combine = gates = None
        for cand in graph.ops:
            if cand.kind != "einsum" or cand.attrs["equation"] != "tec,ecd->td":
                continue
            cred = graph.producer(cand.inputs[0])
            if cred is None or cred.kind != "reduce_sum" or list(cred.attrs["axes"]) != [1]:
                continue
            cm = graph.producer(cred.inputs[0])
            if cm is None or cm.kind != "mul" or slot_hot not in cm.inputs or len(cm.inputs) != 2:
                continue
            other = cm.inputs[1] if cm.inputs[0] == slot_hot else cm.inputs[0]
            gates = _through_reshapes(graph, other, (t, k))
            combine = cand
            break
        if combine is None or gates is None:
            return None
        # expert region: ops from xe to the combine's expert input
        xe, ye = disp.outputs[0], combine.inputs[1]
        region, inside = [], {xe}
        for op in graph.ops[graph.ops.index(disp) + 1:graph.ops.index(combine)]:
            if not set(op.inputs) & inside:
                continue
            if op.kind == "matmul":
                w = op.inputs[1]
                wt = graph.producer(w)
                if op.inputs[0] not in inside or w in inside:
                    return None
                if wt is not None and wt.kind == "permute" and list(wt.attrs["axes"]) == [0, 2, 1] \
                        and graph.tensors[wt.inputs[0]].is_const:
                    region.append((op, wt.inputs[0], True))
                elif graph.tensors[w].is_const and len(graph.tensors[w].shape) == 3:
                    region.append((op, w, False))
                else:
                    return None
            elif op.kind in _ELEMENTWISE and all(i in inside for i in op.inputs):
                region.append((op, None, False))
            else:
                return None
            inside.update(op.outputs)
        if ye not in inside:
            return None
        users_ok = {id(disp), id(combine), *(id(o) for o, _, _ in region)}
        for x in inside:
            if x in graph.outputs or any(id(u) not in users_ok for u in graph.consumers(x)):
                return None
        return {"xf": xf, "experts": experts, "gates": gates, "k": k, "t": t, "region": region,
                "combine": combine, "xe": xe, "ye": ye}

    def transform(self, graph: Graph, op: Op) -> None:
        f = self._find(graph, op)
        if f is None:
            op.attrs["_no_moe"] = True
            return
        src, base, k, t = op.source, op.name, f["k"], f["t"]
        r = t * k
        e = graph.tensors[f["xe"]].shape[0]

        def tensor(name: str, shape: tuple[int, ...], fmt: str) -> str:
            graph.add_tensor(Tensor(name, shape, fmt))
            return name

        new: list[Op] = []
        flat = tensor(f"{base}.experts_flat", (r,), "int64")
        new.append(Op("reshape", [f["experts"]], [flat], {"shape": [r]}))
        perm = tensor(f"{base}.perm", (r,), "int64")
        new.append(Op("argsort", [flat], [perm], {"axis": 0}))
        counts = tensor(f"{base}.counts", (e,), "int64")
        new.append(Op("bincount", [flat], [counts], {"length": e}))
        token = tensor(f"{base}.token", (r,), "int64")
        new.append(Op("floordiv", [perm], [token], {"scalar": k, "format": "int64"}))
        d = graph.tensors[f["xf"]].shape[1]
        rename = {f["xe"]: tensor(f"{base}.rows", (r, d), "fp32")}
        new.append(Op("take_rows", [f["xf"], token], [rename[f["xe"]]]))
        gflat = tensor(f"{base}.gates_flat", (r,), "fp32")
        new.append(Op("reshape", [f["gates"]], [gflat], {"shape": [r]}))
        gate = tensor(f"{base}.gate", (r,), "fp32")
        new.append(Op("take_rows", [gflat, perm], [gate]))
        for rop, w, tb in f["region"]:
            out = rop.outputs[0]
            shape = (r, graph.tensors[out].shape[-1])
            rename[out] = tensor(f"{out}.grouped", shape, graph.tensors[out].format)
            if rop.kind == "matmul":
                new.append(Op("grouped_gemm", [rename[rop.inputs[0]], w, counts], [rename[out]],
                              {"transpose_b": tb}, source=rop.source, name=rop.name))
            else:
                new.append(Op(rop.kind, [rename[i] for i in rop.inputs], [rename[out]],
                              dict(rop.attrs), source=rop.source, name=rop.name))
        comb = f["combine"]
        new.append(Op("scatter_add_rows", [rename[f["ye"]], token, gate], list(comb.outputs),
                      {"rows": t}, source=comb.source, name=comb.name))
        for o in new:
            o.source = o.source or src
            o.name = o.name or o.outputs[0]
        idx = graph.ops.index(comb)
        graph.ops[idx:idx + 1] = new
        dead = {id(op), *(id(o) for o, _, _ in f["region"])}
        graph.ops = [o for o in graph.ops if id(o) not in dead]
        for x in [f["xe"], *(o.outputs[0] for o, _, _ in f["region"])]:
            del graph.tensors[x]
