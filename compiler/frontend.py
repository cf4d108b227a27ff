"""Frontend: a torch model -> ``torch.export`` ExportedProgram -> IR :class:`~.ir.Graph`.

Only ops in :data:`HANDLERS` are accepted; any other op raises :class:`UnsupportedOp` naming the
aten op and the model source line it came from. ``torch.export.export`` keeps ``nn.Linear`` as
``aten.linear.default`` (torch 2.13); after ``ExportedProgram.run_decompositions()`` it becomes
``aten.permute(W, [1, 0])`` + ``aten.addmm`` / ``aten.mm``, which is accepted too and folded back
into ``linear`` by the ``canonicalize_linear`` pass.

Ops without a handler are first reduced by torch's own decomposition tables
(:func:`decompose_unhandled`, run by :func:`export_model`): LayerNorm, GELU, dropout ... become
handled primitives; convolutions and pooling are lowered whole (im2col + one GEMM, window
reductions: :mod:`~.lower_conv`), ``scaled_dot_product_attention`` becomes one ``attention`` op,
eval batch norm a folded ``mul`` + ``add``. Every op is named by its module path
(:func:`name_by_module`, from ``nn_module_stack``): ``layers.0.self_attn.q_proj``.

Calibration (:func:`calibrate`) runs the exported float graph on a batch and records in every
activation tensor's ``meta["absmax"]`` the largest |value| seen (float units).
"""

from __future__ import annotations

import operator
import os
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch._decomp import decomposition_table
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from tilewright.compiler.errors import UnsupportedOp
from tilewright.compiler.ir import Graph, Op, Tensor
from tilewright.compiler.lower_conv import conv_ops, out_size, pool_ops
from tilewright.compiler.program import FORMAT_DTYPES
from tilewright.models.ssm import ssm_scan  # registers torch.ops.tilewright.ssm_scan

__all__ = ["UnsupportedOp", "export_model", "from_exported", "import_model", "calibrate",
           "HANDLERS", "source_of", "module_of", "decompose_unhandled", "name_by_module"]

_TORCH_DIR = str(Path(torch.__file__).parent)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n(?P<code>[^\n]*)')
_FORMATS = {torch.float32: "fp32", torch.int8: "int8", torch.int32: "int32", torch.int64: "int64",
            torch.bool: "bool", torch.bfloat16: "bf16"}
_aten = torch.ops.aten


def source_of(node: torch.fx.Node) -> tuple[str, str]:
    """(``"file:line"``, code text) of the innermost frame of ``node``'s stack trace outside
    torch itself, i.e. the model's own line; ``("", "")`` if torch recorded none."""
    frames = [m for m in _FRAME.finditer(node.meta.get("stack_trace") or "")]
    user = [m for m in frames if not m["file"].startswith(_TORCH_DIR)] or frames
    if not user:
        stack = node.meta.get("nn_module_stack") or {}
        return (f"<module {list(stack.values())[-1][1]}>" if stack else "", "")
    m = user[-1]
    path = m["file"]
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    except ValueError:
        pass
    return f"{path}:{m['line']}", m["code"].strip()


def module_of(node: torch.fx.Node) -> tuple[str, str]:
    """(module path, class) of the innermost ``nn.Module`` that emitted ``node`` — e.g.
    ``("layers.0.lstm", "nn.LSTM")``; ``("", "")`` for the top module or when torch recorded no
    module stack. ``torch.nn.modules.<file>.<Class>`` is shortened to ``nn.<Class>``."""
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    if len(stack) < 2:                       # the exported model itself
        return "", ""
    path, cls = stack[-1][0], stack[-1][1]
    cls = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
    if cls.startswith("torch.nn.modules."):
        cls = "nn." + cls.rsplit(".", 1)[-1]
    return str(path), cls


def _unsupported(node: torch.fx.Node, why: str = "") -> UnsupportedOp:
    where, code = source_of(node)
    known = ", ".join(str(t) for t in HANDLERS)
    path, cls = module_of(node)
    # a built-in layer is named as the layer (an nn.LSTM's first op is the aten.zeros of its
    # initial state: reporting only that op hid what the user has to change)
    if cls.startswith("nn."):
        owner = f"unsupported module {path} ({cls}): its op {node.target} {why}has no lowering"
    else:
        owner = (f"unsupported op {node.target} {why}"
                 + (f"in module {path} ({cls})" if path else "")).rstrip()
    return UnsupportedOp(
        f"{owner} at {where or '<unknown source>'}"
        f"{': ' + code if code else ''} (supported: {known})")


# ---- handlers: aten op -> IR op(s) ------------------------------------------------------------
class _Ctx:
    """What a handler needs besides the node: tensor names of fx args (``getitem`` aliases
    resolved) and the graph (to add extra tensors, e.g. a ``topk``'s two outputs)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.alias: dict[str, str] = {}

    def name(self, a: Any) -> str:
        if not isinstance(a, torch.fx.Node):
            raise TypeError(f"expected a tensor argument, got {a!r}")
        return self.alias.get(a.name, a.name)


def _arg(node: torch.fx.Node, i: int, key: str, default: Any = None) -> Any:
    return node.args[i] if len(node.args) > i else node.kwargs.get(key, default)


def _fmt(node: torch.fx.Node) -> str:
    return _FORMATS[node.meta["val"].dtype]


def _ndim(node: torch.fx.Node) -> int:
    return node.meta["val"].dim()


def _linear(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("linear", [ctx.name(a) for a in node.args if a is not None], [node.name])


def _relu(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("relu", [ctx.name(node.args[0])], [node.name])


def _transpose(node: torch.fx.Node, ctx: _Ctx) -> Op:
    x = node.args[0]
    nd = x.meta["val"].dim()
    if node.target == _aten.t.default:
        dims = [1, 0] if nd == 2 else [0]
    elif node.target == _aten.transpose.int:
        d0, d1 = (d % nd for d in node.args[1:3])
        dims = list(range(nd))
        dims[d0], dims[d1] = dims[d1], dims[d0]
    else:
        dims = [d % nd for d in node.args[1]]
    if nd == 2 and dims == [1, 0]:
        return Op("transpose", [ctx.name(x)], [node.name])  # kept for canonicalize_linear
    return Op("permute", [ctx.name(x)], [node.name], {"axes": dims})


def _mm(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("matmul", [ctx.name(a) for a in node.args[:2]], [node.name])


def _addmm(node: torch.fx.Node, ctx: _Ctx) -> Op:
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        raise _unsupported(node, "with alpha/beta != 1 ")
    return Op("addmm", [ctx.name(a) for a in node.args[:3]], [node.name])


def _einsum(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("einsum", [ctx.name(a) for a in node.args[1]], [node.name],
              {"equation": str(node.args[0]).replace(" ", "")})


_UNARY_ATEN = {_aten.exp.default: "exp", _aten.neg.default: "neg", _aten.rsqrt.default: "rsqrt",
               _aten.silu.default: "silu", _aten.sigmoid.default: "sigmoid",
               _aten.bitwise_not.default: "logical_not", _aten.erf.default: "erf",
               _aten.tanh.default: "tanh"}


def _unary(node: torch.fx.Node, ctx: _Ctx) -> Op:
    if node.target == _aten.bitwise_not.default and _fmt(node) != "bool":
        raise _unsupported(node, "on integers (only bool) ")
    return Op(_UNARY_ATEN[node.target], [ctx.name(node.args[0])], [node.name],
              {"format": _fmt(node)})


def _softplus(node: torch.fx.Node, ctx: _Ctx) -> Op:
    if _arg(node, 1, "beta", 1) != 1 or _arg(node, 2, "threshold", 20) != 20:
        raise _unsupported(node, "with beta != 1 or threshold != 20 ")
    return Op("softplus", [ctx.name(node.args[0])], [node.name], {"format": _fmt(node)})


_BINARY_ATEN = {_aten.add.Tensor: "add", _aten.sub.Tensor: "sub", _aten.mul.Tensor: "mul",
                _aten.div.Tensor: "div", _aten.eq.Tensor: "eq", _aten.gt.Tensor: "gt",
                _aten.eq.Scalar: "eq", _aten.gt.Scalar: "gt", _aten.add.Scalar: "add",
                _aten.sub.Scalar: "sub", _aten.mul.Scalar: "mul", _aten.div.Scalar: "div"}


def _binary(node: torch.fx.Node, ctx: _Ctx) -> Op:
    if node.kwargs.get("alpha", 1) != 1 or node.kwargs.get("rounding_mode") is not None:
        raise _unsupported(node, "with alpha != 1 or a rounding_mode ")
    a, b = node.args[:2]
    attrs: dict[str, Any] = {"format": _fmt(node)}
    if isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node):
        ins = [ctx.name(a), ctx.name(b)]
    elif isinstance(a, torch.fx.Node):
        ins, attrs["scalar"] = [ctx.name(a)], b
    else:
        ins, attrs["scalar"], attrs["scalar_first"] = [ctx.name(b)], a, True
    if "scalar" in attrs and not isinstance(attrs["scalar"], (int, float)):
        raise _unsupported(node, f"with a {type(attrs['scalar']).__name__} operand ")
    return Op(_BINARY_ATEN[node.target], ins, [node.name], attrs)


def _pow(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("pow", [ctx.name(node.args[0])], [node.name], {"exponent": node.args[1]})


def _reduce(node: torch.fx.Node, ctx: _Ctx) -> Op:
    x = node.args[0]
    nd = x.meta["val"].dim()
    dims = _arg(node, 1, "dim", None)
    dims = list(range(nd)) if dims is None else ([dims] if isinstance(dims, int) else list(dims))
    if _arg(node, 3, "dtype", None) is not None:
        raise _unsupported(node, "with a dtype argument ")
    kind = {_aten.mean.dim: "reduce_mean", _aten.sum.dim_IntList: "reduce_sum",
            _aten.any.dim: "reduce_any"}[node.target]
    return Op(kind, [ctx.name(x)], [node.name],
              {"axes": [d % nd for d in dims], "keepdim": bool(_arg(node, 2, "keepdim", False))})


def _softmax(node: torch.fx.Node, ctx: _Ctx) -> Op:
    if node.args[2] if len(node.args) > 2 else False:
        raise _unsupported(node, "with half_to_float ")
    return Op("softmax", [ctx.name(node.args[0])], [node.name],
              {"axis": node.args[1] % _ndim(node)})


def _cumsum(node: torch.fx.Node, ctx: _Ctx) -> Op:
    if node.kwargs.get("dtype") is not None:
        raise _unsupported(node, "with a dtype argument ")
    return Op("cumsum", [ctx.name(node.args[0])], [node.name], {"axis": node.args[1] % _ndim(node)})


def _topk(node: torch.fx.Node, ctx: _Ctx) -> Op:
    if not _arg(node, 3, "largest", True) or not _arg(node, 4, "sorted", True):
        raise _unsupported(node, "with largest=False or sorted=False ")
    vals = node.meta["val"]
    outs = []
    for i, v in enumerate(vals):
        name = f"{node.name}_{i}"
        ctx.graph.add_tensor(Tensor(name, tuple(v.shape), _FORMATS[v.dtype]))
        outs.append(name)
    return Op("topk", [ctx.name(node.args[0])], outs,
              {"k": int(node.args[1]), "axis": _arg(node, 2, "dim", -1) % vals[0].dim()})


def _chunk(node: torch.fx.Node, ctx: _Ctx) -> list[Op]:
    x = node.args[0]
    nd = x.meta["val"].dim()
    axis = _arg(node, 2, "dim", 0) % nd
    ops, start = [], 0
    for i, v in enumerate(node.meta["val"]):
        name = f"{node.name}_{i}"
        ctx.graph.add_tensor(Tensor(name, tuple(v.shape), _FORMATS[v.dtype]))
        stop = start + v.shape[axis]
        ops.append(Op("slice", [ctx.name(x)], [name], {"axis": axis, "start": start, "stop": stop,
                                                        "step": 1}))
        start = stop
    return ops


def _gather(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("gather", [ctx.name(node.args[0]), ctx.name(node.args[2])], [node.name],
              {"axis": node.args[1] % _ndim(node)})


def _embedding(node: torch.fx.Node, ctx: _Ctx) -> list[Op]:
    """``aten.embedding(weight [V, D], ids [...])`` -> ``take_rows`` (a row gather, marked
    ``lookup="embedding"`` so the Report costs it by the rows it moves), with a ``reshape`` of
    the ids to [n] before and of the rows to [..., D] after when the ids are not 1-D.
    ``padding_idx`` only affects training (no gradient)."""
    if _arg(node, 4, "sparse", False):
        raise _unsupported(node, "with sparse=True ")
    w, ids = node.args[0], node.args[1]
    out = node.meta["val"]
    if ids.meta["val"].dim() == 1:          # already [n]: one gather, no reshapes
        return [Op("take_rows", [ctx.name(w), ctx.name(ids)], [node.name],
                   {"lookup": "embedding"})]
    n, d = int(ids.meta["val"].numel()), int(out.shape[-1])
    flat_ids, rows = f"{node.name}_ids", f"{node.name}_rows"
    ctx.graph.add_tensor(Tensor(flat_ids, (n,), _FORMATS[ids.meta["val"].dtype]))
    ctx.graph.add_tensor(Tensor(rows, (n, d), _FORMATS[out.dtype]))
    return [Op("reshape", [ctx.name(ids)], [flat_ids], {"shape": [n]}),
            Op("take_rows", [ctx.name(w), flat_ids], [rows], {"lookup": "embedding"}),
            Op("reshape", [rows], [node.name], {"shape": list(out.shape)})]


def _ssm_scan(node: torch.fx.Node, ctx: _Ctx) -> Op:
    """``tilewright.ssm_scan(a, b, c, h0) -> (y, h_last)`` (one node for the whole selective scan,
    :func:`tilewright.models.ssm.ssm_scan`) -> the IR's ``scan`` op, outputs ``<node>_0`` (y) and
    ``<node>_1`` (h_last), read through ``getitem``."""
    outs = []
    for i, v in enumerate(node.meta["val"]):
        name = f"{node.name}_{i}"
        ctx.graph.add_tensor(Tensor(name, tuple(v.shape), _FORMATS[v.dtype]))
        outs.append(name)
    return Op("scan", [ctx.name(a) for a in node.args[:4]], outs, name=f"{node.name}.scan")


def _masked_fill(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("masked_fill", [ctx.name(node.args[0]), ctx.name(node.args[1])], [node.name],
              {"value": float(node.args[2])})


def _cast(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("cast", [ctx.name(node.args[0])], [node.name], {"format": _fmt(node)})


def _const(node: torch.fx.Node, ctx: _Ctx) -> list[Op]:
    """``arange``/``new_zeros``: a constant made at compile time (values known from shapes)."""
    t = ctx.graph.tensors[node.name]
    if node.target == _aten.new_zeros.default:
        t.data = np.zeros(t.shape, FORMAT_DTYPES[t.format])
    else:
        start, end = (0, node.args[0]) if len(node.args) == 1 else node.args[:2]
        step = node.args[2] if len(node.args) > 2 else 1
        t.data = np.arange(start, end, step).astype(FORMAT_DTYPES[t.format])
    return []


def _reshape(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("reshape", [ctx.name(node.args[0])], [node.name],
              {"shape": list(node.meta["val"].shape)})


def _expand(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("expand", [ctx.name(node.args[0])], [node.name],
              {"shape": list(node.meta["val"].shape)})


def _copy(node: torch.fx.Node, ctx: _Ctx) -> Op:
    return Op("copy", [ctx.name(node.args[0])], [node.name])


def _select(node: torch.fx.Node, ctx: _Ctx) -> Op:
    x = node.args[0]
    shape = x.meta["val"].shape
    axis = node.args[1] % len(shape)
    return Op("select", [ctx.name(x)], [node.name],
              {"axis": axis, "index": int(node.args[2]) % shape[axis]})


def _slice(node: torch.fx.Node, ctx: _Ctx) -> Op:
    x = node.args[0]
    shape = x.meta["val"].shape
    axis = _arg(node, 1, "dim", 0) % len(shape)
    start, stop, step = _arg(node, 2, "start", None), _arg(node, 3, "end", None), _arg(node, 4, "step", 1)
    start, stop, step = slice(start, stop, step).indices(shape[axis])
    return Op("slice", [ctx.name(x)], [node.name],
              {"axis": axis, "start": start, "stop": stop, "step": step})


def _cat(node: torch.fx.Node, ctx: _Ctx) -> Op:
    kind = "concat" if node.target == _aten.cat.default else "stack"
    return Op(kind, [ctx.name(a) for a in node.args[0]], [node.name],
              {"axis": _arg(node, 1, "dim", 0) % _ndim(node)})


def _pad(node: torch.fx.Node, ctx: _Ctx) -> Op:
    x = node.args[0]
    nd = x.meta["val"].dim()
    if _arg(node, 2, "mode", "constant") != "constant":
        raise _unsupported(node, "with a non-constant mode ")
    flat = list(node.args[1])
    pads = [[0, 0] for _ in range(nd)]
    for i in range(len(flat) // 2):                     # torch: last axis first
        pads[nd - 1 - i] = [int(flat[2 * i]), int(flat[2 * i + 1])]
    if any(p < 0 for pair in pads for p in pair):
        raise _unsupported(node, "with negative padding ")
    value = _arg(node, 3, "value", None)
    return Op("pad", [ctx.name(x)], [node.name], {"pads": pads, "value": float(value or 0.0)})



def _identity(node: torch.fx.Node, ctx: _Ctx) -> Op:
    """``clone``/``contiguous``/``dropout`` (eval): the same values, a free view."""
    if node.target == _aten.dropout.default and _arg(node, 2, "train", False):
        raise _unsupported(node, "with train=True ")
    return Op("reshape", [ctx.name(node.args[0])], [node.name],
              {"shape": list(node.meta["val"].shape)})


def _amax(node: torch.fx.Node, ctx: _Ctx) -> Op:
    x = node.args[0]
    nd = x.meta["val"].dim()
    dims = _arg(node, 1, "dim", []) or list(range(nd))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return Op("reduce_max", [ctx.name(x)], [node.name],
              {"axes": [d % nd for d in dims], "keepdim": bool(_arg(node, 2, "keepdim", False))})


def _var_mean(node: torch.fx.Node, ctx: _Ctx) -> list[Op]:
    """``var_mean(x, dims, correction, keepdim)`` (LayerNorm's decomposition) -> (var, mean):
    ``m = mean(x)``, ``var = sum((x - m)**2) / (n - correction)``; ``var`` alone for
    ``aten.var.correction``."""
    x = node.args[0]
    xs = tuple(x.meta["val"].shape)
    nd = len(xs)
    dims = _arg(node, 1, "dim", None)
    dims = list(range(nd)) if dims is None else ([dims] if isinstance(dims, int) else list(dims))
    axes = [d % nd for d in dims]
    corr = node.kwargs.get("correction", 1)
    corr = 1 if corr is None else corr
    keep = bool(node.kwargs.get("keepdim", False))
    n = int(np.prod([xs[a] for a in axes], dtype=np.int64))
    kshape = tuple(1 if i in axes else d for i, d in enumerate(xs))
    vals = node.meta["val"]
    multi = isinstance(vals, (tuple, list))
    var_out = f"{node.name}_0" if multi else node.name
    fmt = _FORMATS[(vals[0] if multi else vals).dtype]
    names = {t: f"{node.name}.{t}" for t in ("mean_k", "diff", "sq", "ss")}
    for t, shp in (("mean_k", kshape), ("diff", xs), ("sq", xs),
                   ("ss", kshape if keep else tuple(vals[0].shape if multi else vals.shape))):
        ctx.graph.add_tensor(Tensor(names[t], shp, fmt))
    if multi:
        for i, v in enumerate(vals):
            ctx.graph.add_tensor(Tensor(f"{node.name}_{i}", tuple(v.shape), _FORMATS[v.dtype]))
    src = ctx.name(x)
    ops = [Op("reduce_mean", [src], [names["mean_k"]], {"axes": axes, "keepdim": True}),
           Op("sub", [src, names["mean_k"]], [names["diff"]], {"format": fmt}),
           Op("mul", [names["diff"], names["diff"]], [names["sq"]], {"format": fmt}),
           Op("reduce_sum", [names["sq"]], [names["ss"]], {"axes": axes, "keepdim": keep}),
           Op("div", [names["ss"]], [var_out], {"format": fmt, "scalar": float(n - corr)})]
    if multi:
        ops.append(Op("reshape", [names["mean_k"]], [f"{node.name}_1"],
                      {"shape": list(vals[1].shape)}))
    return ops


def _sdpa(node: torch.fx.Node, ctx: _Ctx) -> Op:
    """``scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal, scale)``
    -> one ``attention`` op (the streaming cascade): ``scale`` default ``1/sqrt(E)``; torch's
    ``is_causal`` masks key j > query i (``causal_offset = 0``)."""
    q, k, v = node.args[:3]
    if _arg(node, 3, "attn_mask", None) is not None:
        raise _unsupported(node, "with an attn_mask (only is_causal) ")
    if _arg(node, 4, "dropout_p", 0.0):
        raise _unsupported(node, "with dropout_p != 0 ")
    if _arg(node, 7, "enable_gqa", False):
        raise _unsupported(node, "with enable_gqa=True ")
    scale = _arg(node, 6, "scale", None)
    scale = 1.0 / float(np.sqrt(q.meta["val"].shape[-1])) if scale is None else float(scale)
    return Op("attention", [ctx.name(q), ctx.name(k), ctx.name(v)], [node.name],
              {"scale": scale, "causal_offset": 0 if _arg(node, 5, "is_causal", False) else None})


def _ints(v: Any, n: int) -> list[int]:
    v = [v] if isinstance(v, int) else list(v)
    return [int(x) for x in (v * n if len(v) == 1 else v)]


def _new_const(ctx: _Ctx) -> Callable[[str, tuple[int, ...], Any], str]:
    def make(name: str, shape: tuple[int, ...], data: Any) -> str:
        t = Tensor(name, shape, "fp32")
        if data is None:
            t.meta["param"] = True
        else:
            t.data = np.ascontiguousarray(np.asarray(data, np.float32))
        ctx.graph.add_tensor(t)
        return name
    return make


def _conv(node: torch.fx.Node, ctx: _Ctx) -> list[Op]:
    """``conv1d``/``conv2d``/``convolution`` with a constant weight -> im2col + ``linear``
    (:func:`~.lower_conv.conv_ops`)."""
    x, w = node.args[:2]
    bias = _arg(node, 2, "bias", None)
    n = x.meta["val"].dim() - 2
    if node.target == _aten.convolution.default:
        stride, padding, dilation, transposed, _outpad, groups = node.args[3:9]
        if transposed:
            raise _unsupported(node, "transposed ")
    else:
        stride, padding, dilation, groups = (_arg(node, 3, "stride", 1), _arg(node, 4, "padding", 0),
                                             _arg(node, 5, "dilation", 1), _arg(node, 6, "groups", 1))
    if isinstance(padding, str):
        raise _unsupported(node, f"with padding={padding!r} (give the padding in elements) ")
    if not ctx.graph.tensors[ctx.name(w)].is_const:
        raise _unsupported(node, "with a run-time weight ")
    return conv_ops(ctx.graph, node.name, ctx.name(x), ctx.name(w),
                    None if bias is None else ctx.name(bias), node.name,
                    stride=_ints(stride, n), padding=_ints(padding, n),
                    dilation=_ints(dilation, n), groups=int(groups), new_const=_new_const(ctx))


def _pool(node: torch.fx.Node, ctx: _Ctx) -> list[Op]:
    """max/avg pooling (``ceil_mode`` only where it does not change the output;
    average pooling with ``count_include_pad=True`` and no ``divisor_override``)."""
    x = node.args[0]
    xs = tuple(x.meta["val"].shape)
    n = len(xs) - 2
    kernel = _ints(node.args[1], n)
    stride = _ints(_arg(node, 2, "stride", None) or kernel, n)
    padding = _ints(_arg(node, 3, "padding", 0), n)
    is_max = node.target in (_aten.max_pool2d.default, _aten.max_pool1d.default)
    dilation = _ints(_arg(node, 4, "dilation", 1), n) if is_max else [1] * n
    if not is_max:
        if not _arg(node, 5, "count_include_pad", True) and any(padding):
            raise _unsupported(node, "with count_include_pad=False and padding ")
        if _arg(node, 6, "divisor_override", None) is not None:
            raise _unsupported(node, "with divisor_override ")
    want = [out_size(s, k, st, p, d) for s, k, st, p, d in
            zip(xs[2:], kernel, stride, padding, dilation)]
    if want != list(node.meta["val"].shape[2:]):
        raise _unsupported(node, "with ceil_mode adding a partial window ")
    return pool_ops(ctx.graph, node.name, ctx.name(x), node.name, kind="max" if is_max else "avg",
                    kernel=kernel, stride=stride, padding=padding, dilation=dilation)


def _adaptive_avg(node: torch.fx.Node, ctx: _Ctx) -> Op | list[Op]:
    """``adaptive_avg_pool{1,2}d``: a mean over the spatial axes (output 1), or an average
    pooling with kernel = stride = in / out when the sizes divide."""
    x = node.args[0]
    xs = tuple(x.meta["val"].shape)
    outs = list(node.meta["val"].shape[2:])
    if all(o == 1 for o in outs):
        return Op("reduce_mean", [ctx.name(x)], [node.name],
                  {"axes": list(range(2, len(xs))), "keepdim": True})
    if any(s % o for s, o in zip(xs[2:], outs)):
        raise _unsupported(node, f"from {list(xs[2:])} to {outs} (sizes must divide) ")
    k = [s // o for s, o in zip(xs[2:], outs)]
    return pool_ops(ctx.graph, node.name, ctx.name(x), node.name, kind="avg", kernel=k, stride=k,
                    padding=[0] * len(k), dilation=[1] * len(k))


def _batch_norm(node: torch.fx.Node, ctx: _Ctx) -> list[Op]:
    """``batch_norm`` in eval (running statistics): ``x * s + t`` with ``s = w / sqrt(var + eps)``
    and ``t = b - mean * s`` folded at compile time, shaped ``[C, 1, ...]``."""
    x, w, b, mean, var = node.args[:5]
    if _arg(node, 5, "training", False):
        raise _unsupported(node, "in training mode (call model.eval()) ")
    eps = float(_arg(node, 7, "eps", 1e-5))
    xs = tuple(x.meta["val"].shape)
    c = xs[1]
    shape = (c, *([1] * (len(xs) - 2)))
    t = {k: (None if a is None else ctx.graph.tensors[ctx.name(a)]) for k, a in
         (("w", w), ("b", b), ("mean", mean), ("var", var))}
    if t["mean"] is None or t["var"] is None:
        raise _unsupported(node, "without running statistics ")
    known = all(v is None or v.data is not None for v in t.values())
    scale = shift = None
    if known:
        wv = np.ones(c, np.float32) if t["w"] is None else t["w"].data
        bv = np.zeros(c, np.float32) if t["b"] is None else t["b"].data
        sv = (wv.astype(np.float64) / np.sqrt(t["var"].data.astype(np.float64) + eps))
        scale = sv.astype(np.float32).reshape(shape)
        shift = (bv - t["mean"].data.astype(np.float64) * sv).astype(np.float32).reshape(shape)
    make = _new_const(ctx)
    s_name, t_name = make(f"{node.name}.scale", shape, scale), make(f"{node.name}.shift", shape, shift)
    mid = f"{node.name}.scaled"
    ctx.graph.add_tensor(Tensor(mid, xs, _fmt(node)))
    return [Op("mul", [ctx.name(x), s_name], [mid], {"format": _fmt(node)}),
            Op("add", [mid, t_name], [node.name], {"format": _fmt(node)})]


#: aten op -> handler(node, ctx) -> IR Op(s). Anything else raises UnsupportedOp.
HANDLERS: dict[Any, Callable[[torch.fx.Node, _Ctx], Op | list[Op]]] = {
    _aten.linear.default: _linear,
    _aten.relu.default: _relu,
    _aten.t.default: _transpose,
    _aten.permute.default: _transpose,
    _aten.transpose.int: _transpose,
    _aten.mm.default: _mm,
    _aten.matmul.default: _mm,
    _aten.addmm.default: _addmm,
    _aten.einsum.default: _einsum,
    **{k: _unary for k in _UNARY_ATEN},
    _aten.softplus.default: _softplus,
    **{k: _binary for k in _BINARY_ATEN},
    _aten.pow.Tensor_Scalar: _pow,
    _aten.mean.dim: _reduce,
    _aten.sum.dim_IntList: _reduce,
    _aten.any.dim: _reduce,
    _aten.softmax.int: _softmax,
    _aten.cumsum.default: _cumsum,
    _aten.topk.default: _topk,
    _aten.chunk.default: _chunk,
    _aten.gather.default: _gather,
    _aten.embedding.default: _embedding,
    _aten.masked_fill.Scalar: _masked_fill,
    _aten.to.dtype: _cast,
    _aten.arange.default: _const,
    _aten.arange.start: _const,
    _aten.new_zeros.default: _const,
    _aten.view.default: _reshape,
    _aten.reshape.default: _reshape,
    _aten._unsafe_view.default: _reshape,
    _aten.unflatten.int: _reshape,
    _aten.flatten.using_ints: _reshape,
    _aten.unsqueeze.default: _reshape,
    _aten.squeeze.dim: _reshape,
    _aten.expand.default: _expand,
    _aten.alias.default: _copy,
    _aten.select.int: _select,
    _aten.slice.Tensor: _slice,
    _aten.cat.default: _cat,
    _aten.stack.default: _cat,
    _aten.pad.default: _pad,
    ssm_scan._opoverload: _ssm_scan,
    # reached through torch's decomposition tables (see decompose_unhandled) or lowered whole
    _aten.erf.default: _unary,
    _aten.tanh.default: _unary,
    _aten.bmm.default: _mm,
    _aten.clone.default: _identity,
    _aten.contiguous.default: _identity,
    _aten.dropout.default: _identity,
    _aten.amax.default: _amax,
    _aten.var_mean.correction: _var_mean,
    _aten.var.correction: _var_mean,
    _aten.scaled_dot_product_attention.default: _sdpa,
    _aten.conv1d.default: _conv,
    _aten.conv2d.default: _conv,
    _aten.convolution.default: _conv,
    _aten.max_pool1d.default: _pool,
    _aten.max_pool2d.default: _pool,
    _aten.avg_pool1d.default: _pool,
    _aten.avg_pool2d.default: _pool,
    _aten.adaptive_avg_pool1d.default: _adaptive_avg,
    _aten.adaptive_avg_pool2d.default: _adaptive_avg,
    _aten.batch_norm.default: _batch_norm,
}

#: fx targets that produce nothing the compiler needs (runtime checks), skipped
_SKIP = {_aten._assert_tensor_metadata.default}
#: targets whose result is a tuple/list read through ``getitem``
_MULTI = {_aten.topk.default, _aten.chunk.default, _aten.var_mean.correction,
          ssm_scan._opoverload}


# ---- conversion --------------------------------------------------------------------------------
#: core ATen ops decomposed with torch._decomp's table (the export table keeps them whole)
_FROM_DECOMP_TABLE = {_aten.native_layer_norm.default, _aten.gelu.default,
                      _aten.native_group_norm.default}


#: unhandled ops the decompositions themselves produce (layer_norm -> native_layer_norm ->
#: var_mean.dim), decomposed in the same run
_FOLLOW_UPS = {_aten.native_layer_norm.default, _aten.var_mean.dim,
               _aten.native_group_norm.default}


def _unhandled(ep: ExportedProgram) -> set:
    return {n.target for n in ep.graph.nodes if n.op == "call_function"
            and n.target not in HANDLERS and n.target not in _SKIP
            and n.target is not operator.getitem}


def decompose_unhandled(ep: ExportedProgram, *, max_rounds: int = 8) -> ExportedProgram:
    """Op coverage by decomposition: while ``ep`` holds ops without a handler, run
    ``ExportedProgram.run_decompositions`` with a table holding only those ops' entries — torch's
    export table (:func:`torch.export.default_decompositions`: core ATen and composite ops) or,
    failing that, :data:`torch._decomp.decomposition_table` — so ``layer_norm`` becomes
    ``var_mean``/``rsqrt``/``mul``/``add``, ``gelu`` becomes ``erf`` (or ``tanh``) arithmetic,
    ``dropout``/``contiguous`` become clones, and ops the frontend handles (``linear``,
    ``softmax``, ``conv2d``, ``scaled_dot_product_attention`` ...) stay whole. Stops when no
    unhandled op has a decomposition (the frontend then names it and its module)."""
    for _ in range(max_rounds):
        todo = _unhandled(ep)
        if not todo:
            break
        todo |= _FOLLOW_UPS       # what the first decompositions produce: one retrace, not three
        table = torch.export.default_decompositions()
        for op in list(table.keys()):
            if op not in todo:
                del table[op]
        for op in todo & _FROM_DECOMP_TABLE:
            table[op] = decomposition_table[op]
        if not list(table.keys()):
            break
        new = ep.run_decompositions(table)
        if any(not str(t).startswith("aten.") for t in _unhandled(new)):
            break       # down to prims: keep the ATen op the user's module called for the error
        ep = new
    return ep


def export_model(model: torch.nn.Module, example_input: Any) -> ExportedProgram:
    """``torch.export.export(model, inputs)`` with the model in eval mode, then
    :func:`decompose_unhandled` (a no-op when every op has a handler); ``example_input`` is
    one tensor or a tuple of the model's positional inputs."""
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    return decompose_unhandled(torch.export.export(model.eval(), args))


def name_by_module(owned: list[tuple[Op, str]]) -> None:
    """Name each op by the module that emitted it (``owned``: (op, module path) in graph order):
    the path itself when the module emitted one op (``layers.0.self_attn.q_proj``), else
    ``<path>.<kind>`` with ``_1``, ``_2`` ... for a module's later ops of the same kind
    (``blk.0.mul_1``); ops of the top module (its own ``forward``, no submodule) are named the
    same way without a path: ``add``, ``add_1`` ... (not torch's graph-wide ``add_4``). Names
    stay unique (a clash gets a ``_<n>`` suffix)."""
    per_path: dict[str, int] = {}
    for _, path in owned:
        per_path[path] = per_path.get(path, 0) + 1
    used: set[str] = set()
    seen: dict[str, int] = {}
    for op, path in owned:
        if path and per_path[path] == 1:
            name = path
        else:
            base = f"{path}.{op.kind}" if path else op.kind
            k = seen.get(base, 0)
            seen[base] = k + 1
            name = base if k == 0 else f"{base}_{k}"
        cand, k = name, 0
        while cand in used:
            k += 1
            cand = f"{name}_{k}"
        used.add(cand)
        op.name = cand


def _tensor_of(node: torch.fx.Node) -> Tensor:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise _unsupported(node, f"producing {type(val).__name__} (only single tensors) ")
    if val.dtype not in _FORMATS:
        raise _unsupported(node, f"producing dtype {val.dtype} ")
    return Tensor(node.name, tuple(val.shape), _FORMATS[val.dtype])


def from_exported(ep: ExportedProgram, *, name: str = "graph") -> Graph:
    """Convert an ExportedProgram's graph to an IR Graph (parameters become constants)."""
    graph = Graph(name=name)
    lifted: dict[str, torch.Tensor] = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            lifted[spec.arg.name] = (ep.state_dict[spec.target] if spec.target in ep.state_dict
                                     else ep.constants[spec.target])
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            lifted[spec.arg.name] = ep.constants[spec.target]
        elif spec.kind != InputKind.USER_INPUT:
            raise UnsupportedOp(f"unsupported export input {spec.arg.name} of kind {spec.kind}")
    ctx = _Ctx(graph)
    owned: list[tuple[Op, str]] = []
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            t = _tensor_of(node)
            if node.name in lifted:
                value = lifted[node.name]
                if value.is_meta:
                    t.meta["param"] = True           # shape-only compile: values unknown
                elif value.dtype == torch.bfloat16:      # numpy has no bf16: exact via fp32
                    t.data = value.detach().cpu().float().numpy().astype(
                        FORMAT_DTYPES["bf16"])
                else:
                    t.data = value.detach().cpu().numpy().copy()
                t.meta["torch_name"] = next(s.target for s in ep.graph_signature.input_specs
                                            if s.arg.name == node.name)
            else:
                graph.inputs.append(node.name)
            graph.add_tensor(t)
        elif node.op == "call_function":
            if node.target in _SKIP:
                continue
            if node.target is operator.getitem:
                src, idx = node.args
                ctx.alias[node.name] = f"{ctx.name(src)}_{idx}"
                continue
            handler = HANDLERS.get(node.target)
            if handler is None:
                raise _unsupported(node)
            if node.target not in _MULTI:
                graph.add_tensor(_tensor_of(node))
            try:
                made = handler(node, ctx)
            except UnsupportedOp:
                raise
            except (TypeError, ValueError, KeyError, IndexError) as exc:
                raise _unsupported(node, f"({type(exc).__name__}: {exc}) ") from None
            where = source_of(node)[0]
            path = module_of(node)[0]
            for op in (made if isinstance(made, list) else [made]):
                op.source = where
                graph.add_op(op)
                owned.append((op, path))
        elif node.op == "output":
            outs = node.args[0]
            for o in (outs if isinstance(outs, (tuple, list)) else [outs]):
                if not isinstance(o, torch.fx.Node):
                    raise UnsupportedOp(f"model output {o!r} is not a tensor computed by the graph")
                graph.outputs.append(ctx.name(o))
        else:
            raise _unsupported(node, f"(fx node kind {node.op}) ")
    name_by_module(owned)
    graph.check()
    return graph


def calibrate(ep: ExportedProgram, graph: Graph, batch: torch.Tensor) -> Graph:
    """Run the float ExportedProgram on ``batch``; set ``meta["absmax"]`` (float units) of every
    graph input and op output to the largest |value| seen. Returns ``graph`` (edited in place)."""
    args = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            args.append(batch)
        elif spec.target in ep.state_dict:
            args.append(ep.state_dict[spec.target])
        else:
            args.append(ep.constants[spec.target])
    absmax: dict[str, float] = {}

    class _Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                absmax[n.name] = float(out.detach().abs().max()) if out.numel() else 0.0
            return out

    with torch.no_grad():
        _Recorder(ep.graph_module).run(*args)
    for name, t in graph.tensors.items():
        if not t.is_const and name in absmax:
            t.meta["absmax"] = absmax[name]
    return graph


def import_model(model: torch.nn.Module, example_input: torch.Tensor, *, name: str | None = None,
                 calibration: torch.Tensor | None = None, decompose: bool = False) -> Graph:
    """Export ``model`` with ``example_input`` and convert it to an IR Graph, calibrated on
    ``calibration`` (default: ``example_input``). ``decompose=True`` first runs torch's default
    decompositions (``nn.Linear`` then arrives as permute + addmm). ``name`` defaults to the
    model's ``config_name`` attribute or its class name."""
    ep = export_model(model, example_input)
    if decompose:
        ep = ep.run_decompositions()
    name = name or getattr(model, "config_name", None) or type(model).__name__
    graph = from_exported(ep, name=name)
    return calibrate(ep, graph, example_input if calibration is None else calibration)

