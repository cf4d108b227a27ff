"""The user's own model: ``path/file.py:factory`` or an ``.onnx`` file -> (nn.Module, example inputs).

:func:`load_user_model` is what ``--model`` resolves to when its text names a Python file and a
factory, or an ONNX file:

* ``path/file.py:factory`` — the file is imported by path (as a fresh module, its folder not added
  to ``sys.path``); ``factory()`` is called with no arguments and must return
  ``(module, example_inputs)``: an ``nn.Module`` and one tensor or a tuple of tensors;
* ``path/model.onnx`` — converted by the maintained converter ``onnx2torch`` (extra ``[onnx]``)
  into an ``nn.Module`` (a ``torch.fx.GraphModule``) that goes through the same ``torch.export``
  path; the example inputs are random tensors (seed 0) of the graph inputs' static shapes and
  element types.

Every mistake raises :class:`ModelInputError` (a :class:`~tilewright.errors.UserError`) with one
line naming the file and the factory or ONNX op: file missing, no such factory, the factory
raises, returns the wrong thing, an ONNX op the converter has no converter for, an input with a
dynamic dimension.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

import torch

from tilewright.models.llm_shapes import ModelInputError
from tilewright.extras import require

__all__ = ["ModelInputError", "load_user_model", "is_user_model"]

_PY = re.compile(r"^(?P<file>.+\.py):(?P<factory>[A-Za-z_][A-Za-z0-9_]*)$")

#: ONNX element type code -> torch dtype (onnx.TensorProto: FLOAT=1, INT32=6, INT64=7, BOOL=9)
_ONNX_DTYPES = {1: torch.float32, 6: torch.int32, 7: torch.int64, 9: torch.bool}


def is_user_model(text: str) -> bool:
    """True if ``text`` has the form of a user model: ``path/file.py:factory`` or ``*.onnx``."""
    return bool(_PY.match(text)) or text.lower().endswith(".onnx")


def load_user_model(text: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """``(module, example_inputs)`` for ``path/file.py:factory`` or ``path/model.onnx`` (module
    doc). Raises :class:`ModelInputError` naming the file and the factory or op."""
    m = _PY.match(text)
    if m:
        return _from_factory(Path(m["file"]), m["factory"])
    if text.lower().endswith(".onnx"):
        return _from_onnx(Path(text))
    raise ModelInputError(f"--model {text}: a user model is path/file.py:factory or a .onnx file")


def _check_pair(where: str, got: Any) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], torch.nn.Module)):
        raise ModelInputError(f"{where} returned {type(got).__name__}; it must return "
                              f"(nn.Module, example inputs)")
    module, inputs = got
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    bad = [type(x).__name__ for x in inputs if not isinstance(x, torch.Tensor)]
    if not inputs or bad:
        raise ModelInputError(f"{where}: example inputs must be one tensor or a tuple of tensors"
                              + (f", got {', '.join(bad)}" if bad else ", got none"))
    return module, inputs


def _from_factory(path: Path, factory: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    where = f"{path}:{factory}"
    if not path.is_file():
        raise ModelInputError(f"{path}: no such file (--model path/file.py:factory)")
    name = f"tilewright_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod          # dataclasses and pickling look the module up here
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:  # noqa: BLE001  (any error in the user's file is theirs to fix)
        sys.modules.pop(name, None)
        raise ModelInputError(f"{path}: importing it raised {type(exc).__name__}: "
                              f"{_one_line(exc)}") from None
    fn = getattr(mod, factory, None)
    if not callable(fn):
        known = sorted(k for k, v in vars(mod).items()
                       if callable(v) and not k.startswith("_") and getattr(v, "__module__", "") == name)
        raise ModelInputError(f"{path}: no factory {factory!r}"
                              + (f" (functions there: {', '.join(known)})" if known else ""))
    try:
        got = fn()
    except Exception as exc:  # noqa: BLE001
        raise ModelInputError(f"{where} raised {type(exc).__name__}: {_one_line(exc)}") from None
    return _check_pair(where, got)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else "(no message)"


def _import_onnx2torch() -> Any:
    """``onnx2torch``, or :class:`~tilewright.extras.ExtraMissing` naming ``[onnx]``.

    onnx2torch imports ``torchvision`` at import time only for its NonMaxSuppression and RoiAlign
    converters; where torchvision is absent or does not load (a CUDA wheel beside a CPU torch), it
    is imported with a stand-in ``torchvision`` whose ``ops`` raise :class:`ModelInputError` when
    called — only models with those two ops need the real one. The stand-in is removed from
    ``sys.modules`` right after."""
    require("onnx")
    if "onnx2torch" in sys.modules:
        return sys.modules["onnx2torch"]
    try:
        import torchvision  # noqa: F401, PLC0415  (lazy: optional, only probed)
        return require("onnx2torch")
    except (ImportError, RuntimeError):
        pass
    for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
        del sys.modules[k]

    def _needs_torchvision(*_a: Any, **_k: Any) -> Any:
        raise ModelInputError("this ONNX model uses NonMaxSuppression or RoiAlign, which need "
                              "torchvision (pip install torchvision)")
    stub = types.ModuleType("torchvision")
    stub.ops = types.ModuleType("torchvision.ops")
    for fn in ("nms", "box_convert", "roi_align", "batched_nms"):
        setattr(stub.ops, fn, _needs_torchvision)
    sys.modules["torchvision"], sys.modules["torchvision.ops"] = stub, stub.ops
    try:
        return require("onnx2torch")
    finally:
        sys.modules.pop("torchvision", None)
        sys.modules.pop("torchvision.ops", None)


def _from_onnx(path: Path) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    if not path.is_file():
        raise ModelInputError(f"{path}: no such file (--model path/model.onnx)")
    onnx2torch = _import_onnx2torch()
    import onnx  # noqa: PLC0415  (lazy: optional extra [onnx], checked above)
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # noqa: BLE001
        raise ModelInputError(f"{path}: not a readable ONNX file ({_one_line(exc)})") from None
    from onnx2torch.node_converters.registry import \
        get_converter  # noqa: PLC0415  (lazy: optional extra [onnx])
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    for node in model.graph.node:
        try:
            get_converter(node.op_type, opset, node.domain or "")
        except NotImplementedError:
            raise ModelInputError(f"{path}: ONNX op {node.op_type} (node {node.name or '?'}, opset "
                                  f"{opset}) has no converter in onnx2torch") from None
    inits = {i.name for i in model.graph.initializer}
    inputs = []
    gen = torch.Generator().manual_seed(0)
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if any(d is None or d < 1 for d in dims):
            raise ModelInputError(f"{path}: input {vi.name} has a dynamic shape "
                                  f"{[d if d else '?' for d in dims]}; export it with static shapes")
        dtype = _ONNX_DTYPES.get(tt.elem_type)
        if dtype is None:
            raise ModelInputError(f"{path}: input {vi.name} has ONNX element type {tt.elem_type}; "
                                  f"accepted: float32, int32, int64, bool")
        inputs.append(torch.randn(dims, generator=gen) if dtype.is_floating_point
                      else torch.zeros(dims, dtype=dtype))
    try:
        module = onnx2torch.convert(model)
    except Exception as exc:  # noqa: BLE001
        raise ModelInputError(f"{path}: onnx2torch could not convert it: {_one_line(exc)}") from None
    module.config_name = path.stem
    return module, tuple(inputs)
