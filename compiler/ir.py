"""IR Graph: what the compiler knows about a model (see docs/design.md, "The four contracts").

A :class:`Graph` holds typed :class:`Tensor` s (name, shape in elements, element format) and an
ordered list of :class:`Op` s (kind, input and output tensor names, attributes, source line).
Constant tensors (weights, biases, quantization parameters) carry their numpy ``data``.
Op order is a valid execution order. The IR is plain Python + numpy: no torch import.

Op kinds produced by the frontend and the passes (inputs in order):

=========  ==================================  ===============================================
kind       inputs                              meaning
=========  ==================================  ===============================================
linear     x [M,K], weight [N,K] (, bias [N])  x @ weight.T + bias; attrs.relu after fusion
relu       x                                   max(x, 0)
transpose  x [A,B]                             x.T  (aten.t, aten.permute(x, [1, 0]))
matmul     x [M,K], w [K,N]                    x @ w  (aten.mm)
addmm      bias [N], x [M,K], w [K,N]          bias + x @ w  (aten.addmm, alpha = beta = 1)
qlinear    x int8, weight int8 [N,K],          int8 linear; see passes.quantize
           bias int32, multiplier, shift
=========  ==================================  ===============================================

The LLM path adds (frontend and passes; semantics of the vector kinds are those of the Program's
:data:`~tilewright.compiler.program.VECTOR_OPS` of the same name, attrs included):

* every name in ``VECTOR_OPS`` except requantize/bias_add (``add``, ``exp``, ``reduce_sum``,
  ``softmax``, ``reshape``, ``permute``, ``slice``, ``concat``, ``pad`` ...);
* ``matmul`` (x [..., M, K], w [..., K, N], batch dims broadcast), ``einsum`` (attrs.equation);
* ``topk`` (x) -> (values, indices), attrs k, axis;
* after passes: ``attention`` (q, k, v; attrs scale, causal_offset), ``scan`` (a, b, c, h0) ->
  (y, h_last), ``grouped_gemm`` (x [R, K], w [E, ...], counts [E]; attrs transpose_b).

The graph keeps a producer and a consumer index (tensor name -> op(s)), so :meth:`Graph.producer`
and :meth:`Graph.consumers` are O(1): every change to ``graph.ops`` (append, insert, remove, item
or slice assignment, ``graph.ops = [...]``) and to an op's ``inputs``/``outputs`` (assigned or
edited in place) while it is in the graph updates the index.

A constant whose values are not known (a parameter of a model built on the ``meta`` device, for
shape-only compiles) has ``data=None`` and ``meta["param"] = True``; it still counts as constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Tensor", "Op", "Graph", "FORMATS"]

#: element formats the IR knows
FORMATS = ("fp32", "bf16", "int8", "int32", "int64", "bool")


@dataclass
class Tensor:
    """A named tensor: ``shape`` in elements per dim, ``format`` one of :data:`FORMATS`.

    ``data`` is set for constants. ``meta`` holds facts passes leave behind, e.g. ``absmax``
    (largest |value| seen on calibration data, in the tensor's float units) and ``scale``
    (float units per integer step of a quantized tensor).
    """

    name: str
    shape: tuple[int, ...]
    format: str
    data: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"tensor {self.name}: format {self.format!r} not in {FORMATS}")
        self.shape = tuple(int(d) for d in self.shape)

    @property
    def is_const(self) -> bool:
        return self.data is not None or bool(self.meta.get("param", False))

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape) or "scalar"
        return f"%{self.name}: {self.format}[{dims}]" + (" const" if self.is_const else "")


def _tracked(method: str):
    """A list method that re-indexes the owner (an Op's names or a Graph's ops) around the edit."""
    base = getattr(list, method)

    def edit(self, *args, **kwargs):
        owner = self.__dict__.get("_owner")
        if owner is None:
            return base(self, *args, **kwargs)
        old = list(self)
        out = base(self, *args, **kwargs)
        owner._list_edited(self, old)
        return out

    edit.__name__ = method
    return edit


_EDITS = ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert",
          "remove", "pop", "clear", "sort", "reverse")


class _Names(list):
    """An op's ``inputs`` or ``outputs``: a list whose edits re-index the op in its graph."""

    for _m in _EDITS:
        locals()[_m] = _tracked(_m)
    del _m

    def __reduce_ex__(self, protocol):
        return list, (list(self),)


@dataclass
class Op:
    """One operation: ``kind``, input/output tensor names, attributes, and ``source`` — the model
    source line it came from, as ``"path/to/file.py:LINE"`` (empty if unknown)."""

    kind: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    name: str = ""

    def __setattr__(self, key: str, value: Any) -> None:
        if key not in ("inputs", "outputs"):
            object.__setattr__(self, key, value)
            return
        graph = self.__dict__.get("_graph")
        if graph is not None:
            graph._unindex(self)
        names = _Names(value)
        names.__dict__["_owner"] = self
        object.__setattr__(self, key, names)
        if graph is not None:
            graph._index(self)

    def _list_edited(self, names: list, old: list) -> None:
        graph = self.__dict__.get("_graph")
        if graph is not None:
            if names is self.outputs:
                graph._unindex(self, outputs=old)
            else:
                graph._unindex(self, inputs=old)
            graph._index(self)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_graph"}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def __str__(self) -> str:
        outs = ", ".join(f"%{o}" for o in self.outputs)
        ins = ", ".join(f"%{i}" for i in self.inputs)
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items() if not k.startswith("_"))
        where = f"  # {self.source}" if self.source else ""
        return f"{outs} = {self.kind}({ins}{attrs}){where}"


class _OpList(list):
    """A graph's ``ops``: a list whose edits keep the graph's producer/consumer index current
    (an op object appears at most once in it)."""

    def _graph(self) -> "Graph | None":
        return self.__dict__.get("_owner")

    def append(self, op: Op) -> None:
        list.append(self, op)
        if (g := self._graph()) is not None:
            g._add(op)

    def extend(self, ops) -> None:
        ops = list(ops)
        list.extend(self, ops)
        if (g := self._graph()) is not None:
            for op in ops:
                g._add(op)

    def __iadd__(self, ops):
        self.extend(ops)
        return self

    def insert(self, index, op: Op) -> None:
        list.insert(self, index, op)
        if (g := self._graph()) is not None:
            g._add(op)

    def remove(self, op: Op) -> None:
        """Remove ``op`` itself (by identity: two ops can compare equal)."""
        at = next((i for i, o in enumerate(self) if o is op), None)
        if at is None:
            raise ValueError(f"op {op.name} is not in the graph")
        self.pop(at)

    def pop(self, index=-1) -> Op:
        op = list.pop(self, index)
        if (g := self._graph()) is not None:
            g._drop(op)
        return op

    def clear(self) -> None:
        old = list(self)
        list.clear(self)
        if (g := self._graph()) is not None:
            for op in old:
                g._drop(op)

    def __setitem__(self, key, value) -> None:
        old = self[key]
        new = list(value) if isinstance(key, slice) else value
        list.__setitem__(self, key, new)
        if (g := self._graph()) is not None:
            for op in (old if isinstance(key, slice) else [old]):
                g._drop(op)
            for op in (new if isinstance(key, slice) else [new]):
                g._add(op)

    def __delitem__(self, key) -> None:
        old = self[key]
        list.__delitem__(self, key)
        if (g := self._graph()) is not None:
            for op in (old if isinstance(key, slice) else [old]):
                g._drop(op)

    def __imul__(self, n):
        raise TypeError("graph.ops *= n would repeat op objects")

    def __reduce_ex__(self, protocol):
        return list, (list(self),)


@dataclass
class Graph:
    """Tensors by name, inputs/outputs by name, and ops in execution order (with an index of the
    producer and the consumers of every tensor, kept current on every edit of ``ops``)."""

    name: str = "graph"
    tensors: dict[str, Tensor] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ops = self.ops                     # wraps the list and builds the index

    def __setattr__(self, key: str, value: Any) -> None:
        if key != "ops":
            object.__setattr__(self, key, value)
            return
        old = self.__dict__.get("ops")
        for op in old or ():
            if op.__dict__.get("_graph") is self:
                object.__setattr__(op, "_graph", None)
        ops = _OpList(value)
        object.__setattr__(self, "ops", ops)
        self.reindex()
        ops.__dict__["_owner"] = self

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_prod", "_cons")}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    # ---- the producer/consumer index ----------------------------------------------------
    def reindex(self) -> None:
        """Rebuild the producer/consumer index from ``ops`` (O(ops)); edits keep it current, so
        this is only needed after editing op name lists of ops outside any graph."""
        object.__setattr__(self, "_prod", {})
        object.__setattr__(self, "_cons", {})
        for op in self.ops:
            self._add(op)

    def _add(self, op: Op) -> None:
        object.__setattr__(op, "_graph", self)
        self._index(op)

    def _drop(self, op: Op) -> None:
        self._unindex(op)
        if op.__dict__.get("_graph") is self:
            object.__setattr__(op, "_graph", None)

    def _index(self, op: Op) -> None:
        for names, index in ((op.outputs, self._prod), (op.inputs, self._cons)):
            for t in names:
                index.setdefault(t, {})[id(op)] = op

    def _unindex(self, op: Op, inputs: list[str] | None = None,
                 outputs: list[str] | None = None) -> None:
        for names, index in ((op.outputs if outputs is None else outputs, self._prod),
                             (op.inputs if inputs is None else inputs, self._cons)):
            for t in names:
                ops = index.get(t)
                if ops is not None:
                    ops.pop(id(op), None)
                    if not ops:
                        del index[t]

    # ---- building ------------------------------------------------------------------------
    def add_tensor(self, tensor: Tensor) -> Tensor:
        if tensor.name in self.tensors:
            raise ValueError(f"graph {self.name}: tensor {tensor.name} defined twice")
        self.tensors[tensor.name] = tensor
        return tensor

    def add_op(self, op: Op) -> Op:
        for x in op.inputs + op.outputs:
            if x not in self.tensors:
                raise ValueError(f"op {op.kind} ({op.source}): tensor {x} is not in the graph")
        if not op.name:
            op.name = op.outputs[0] if op.outputs else op.kind
        self.ops.append(op)
        return op

    # ---- queries -------------------------------------------------------------------------
    def producer(self, tensor: str) -> Op | None:
        """The op whose outputs include ``tensor`` (None for inputs and constants); O(1). (While
        a pass has two ops making one tensor, the one that joined the graph first.)"""
        ops = self._prod.get(tensor)
        return next(iter(ops.values())) if ops else None

    def consumers(self, tensor: str) -> list[Op]:
        """The ops reading ``tensor`` (each once, in the order they joined the graph); O(users)."""
        users = self._cons.get(tensor)
        return list(users.values()) if users else []

    def const(self, name: str) -> np.ndarray:
        data = self.tensors[name].data
        if data is None:
            raise ValueError(f"tensor {name} is not a constant")
        return data

    # ---- editing -------------------------------------------------------------------------
    def remove_unused(self) -> None:
        """Drop tensors no op, input or output refers to."""
        used = set(self.inputs) | set(self.outputs)
        for op in self.ops:
            used.update(op.inputs)
            used.update(op.outputs)
        for name in [n for n in self.tensors if n not in used]:
            del self.tensors[name]

    def check(self) -> None:
        """Raise ValueError if an op reads a tensor before it is made, an output is never made,
        or the producer/consumer index disagrees with the ops."""
        defined = set(self.inputs) | {n for n, t in self.tensors.items() if t.is_const}
        for op in self.ops:
            for x in op.inputs:
                if x not in defined:
                    raise ValueError(f"op {op.name} ({op.source}): input {x} used before defined")
            defined.update(op.outputs)
        for x in self.outputs:
            if x not in defined:
                raise ValueError(f"graph output {x} is never computed")
        made: dict[str, set[int]] = {}
        used: dict[str, set[int]] = {}
        for op in self.ops:
            for names, index in ((op.outputs, made), (op.inputs, used)):
                for t in names:
                    index.setdefault(t, set()).add(id(op))
        if made != {t: set(ops) for t, ops in self._prod.items()} \
                or used != {t: set(ops) for t, ops in self._cons.items()}:
            raise ValueError(f"graph {self.name}: producer/consumer index out of date (were "
                             "the names of an op held by two graphs edited?)")

    def __str__(self) -> str:
        lines = [f"graph {self.name}({', '.join(str(self.tensors[x]) for x in self.inputs)}):"]
        consts = [t for t in self.tensors.values() if t.is_const]
        lines += [f"  {t}" for t in consts]
        lines += [f"  {op}" for op in self.ops]
        lines.append(f"  return {', '.join('%' + x for x in self.outputs)}")
        return "\n".join(lines)
