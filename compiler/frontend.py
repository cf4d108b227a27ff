"""Frontend: a torch model -> ``torch.export`` ExportedProgram -> IR :class:`~.ir.Graph`.

Only ops in :data:`HANDLERS` are accepted; any other op raises :class:`UnsupportedOp` naming the
aten op and the model source line it came from. ``torch.export.export`` keeps ``nn.Linear`` as
``aten.linear.default`` (torch 2.13); after ``ExportedProgram.run_decompositions()`` it becomes
``aten.permute(W, [1, 0])`` + ``aten.addmm`` / ``aten.mm``, which is accepted too and folded back
into ``linear`` by the ``canonicalize_linear`` pass.

Calibration (:func:`calibrate`) runs the exported float graph on a batch and records in every
activation tensor's ``meta["absmax"]`` the largest |value| seen (float units).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from tilewright.compiler.ir import Graph, Op, Tensor

__all__ = ["UnsupportedOp", "export_model", "from_exported", "import_model", "calibrate",
           "HANDLERS", "source_of"]

_TORCH_DIR = str(Path(torch.__file__).parent)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n(?P<code>[^\n]*)')
_FORMATS = {torch.float32: "fp32", torch.int8: "int8", torch.int32: "int32", torch.int64: "int64"}
_aten = torch.ops.aten


class UnsupportedOp(ValueError):
    """The model uses an op (or an op variant) the compiler does not handle; the message names
    the op and the model source line (``file:line``)."""


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


def _unsupported(node: torch.fx.Node, why: str = "") -> UnsupportedOp:
    where, code = source_of(node)
    known = ", ".join(str(t) for t in HANDLERS)
    return UnsupportedOp(
        f"unsupported op {node.target} {why}at {where or '<unknown source>'}"
        f"{': ' + code if code else ''} (supported: {known})")


# ---- handlers: aten op -> IR op ----------------------------------------------------------------
def _linear(node: torch.fx.Node, names: list[str | None]) -> Op:
    return Op("linear", [n for n in names if n is not None], [node.name])


def _relu(node: torch.fx.Node, names: list[str | None]) -> Op:
    return Op("relu", names[:1], [node.name])


def _transpose(node: torch.fx.Node, names: list[str | None]) -> Op:
    if node.target == _aten.permute.default and list(node.args[1]) not in ([1, 0], [-1, -2]):
        raise _unsupported(node, f"with dims {list(node.args[1])} (only a 2-D transpose) ")
    return Op("transpose", names[:1], [node.name])


def _mm(node: torch.fx.Node, names: list[str | None]) -> Op:
    return Op("matmul", names[:2], [node.name])


def _addmm(node: torch.fx.Node, names: list[str | None]) -> Op:
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        raise _unsupported(node, "with alpha/beta != 1 ")
    return Op("addmm", names[:3], [node.name])


#: aten op -> handler(node, input tensor names) -> IR Op. Anything else raises UnsupportedOp.
HANDLERS: dict[Any, Callable[[torch.fx.Node, list[str | None]], Op]] = {
    _aten.linear.default: _linear,
    _aten.relu.default: _relu,
    _aten.t.default: _transpose,
    _aten.permute.default: _transpose,
    _aten.mm.default: _mm,
    _aten.addmm.default: _addmm,
}


# ---- conversion --------------------------------------------------------------------------------
def export_model(model: torch.nn.Module, example_input: torch.Tensor) -> ExportedProgram:
    """``torch.export.export(model, (example_input,))`` with the model in eval mode."""
    return torch.export.export(model.eval(), (example_input,))


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
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            t = _tensor_of(node)
            if node.name in lifted:
                t.data = lifted[node.name].detach().cpu().numpy().copy()
                t.meta["torch_name"] = next(s.target for s in ep.graph_signature.input_specs
                                            if s.arg.name == node.name)
            else:
                graph.inputs.append(node.name)
            graph.add_tensor(t)
        elif node.op == "call_function":
            handler = HANDLERS.get(node.target)
            if handler is None:
                raise _unsupported(node)
            names: list[str | None] = []
            for a in node.args:
                if isinstance(a, torch.fx.Node):
                    names.append(a.name)
                elif a is None:
                    names.append(None)
            graph.add_tensor(_tensor_of(node))
            op = handler(node, names)
            op.source = source_of(node)[0]
            graph.add_op(op)
        elif node.op == "output":
            outs = node.args[0]
            for o in (outs if isinstance(outs, (tuple, list)) else [outs]):
                if not isinstance(o, torch.fx.Node):
                    raise UnsupportedOp(f"model output {o!r} is not a tensor computed by the graph")
                graph.outputs.append(o.name)
        else:
            raise _unsupported(node, f"(fx node kind {node.op}) ")
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

