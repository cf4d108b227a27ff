"""The user's own model (``path/file.py:factory``, ``.onnx``) through compile and the functional
model, checked against torch running the same module; bad inputs refused in one line.

Bound (fp32 functional model vs torch fp32 on CPU): max |got - ref| <= 1e-5 * (1 + max |ref|)
— both compute in IEEE single precision; they differ only in summation order and in
``erf`` (float64 ``math.erf`` rounded once). Measured: cnn 6e-8, bert 5e-7, vit 2.5e-7.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from tilewright.arch import load_arch
from tilewright.dataflow_sim.compile_flow import compile_module
from tilewright.models.user_module import ModelInputError, is_user_model, load_user_model

ROOT = Path(__file__).resolve().parents[1]
ARCH = ROOT / "configs" / "ws8x8.yaml"


def _fp32_arch():
    return load_arch(ARCH)        # compile_module compiles for its fp32 variant (fmt="fp32")


def _check_against_torch(module, inputs) -> float:
    res = compile_module(module, inputs, _fp32_arch(), fmt="fp32")
    with torch.no_grad():
        ref = module(*inputs).numpy()
    got = res.outputs[res.program.outputs[0]]
    err = float(np.abs(got - ref).max())
    assert got.shape == ref.shape
    assert err <= 1e-5 * (1 + float(np.abs(ref).max())), err
    return err


@pytest.mark.slow
@pytest.mark.parametrize("example", ["cnn", "bert", "vit"])
def test_examples_compile_and_match_torch(example) -> None:
    module, inputs = load_user_model(str(ROOT / "examples" / f"{example}.py") + ":make")
    _check_against_torch(module, inputs)


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "user_model.py"
    p.write_text(textwrap.dedent(body))
    return p


def test_factory_from_a_file_by_path(tmp_path) -> None:
    p = _write(tmp_path, """
        import torch
        def make():
            torch.manual_seed(1)
            m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
            return m, torch.randn(3, 8)
    """)
    assert is_user_model(f"{p}:make") and not is_user_model("llama3-8b")
    module, inputs = load_user_model(f"{p}:make")
    assert isinstance(module, torch.nn.Module) and inputs[0].shape == (3, 8)
    _check_against_torch(module, inputs)


@pytest.mark.parametrize("body,factory,needle", [
    ("def make():\n    return 1\n", "make", "returned int; it must return (nn.Module, example inputs)"),
    ("def make():\n    raise RuntimeError('boom')\n", "make", "make raised RuntimeError: boom"),
    ("def other():\n    pass\n", "make", "no factory 'make' (functions there: other)"),
    ("import torch\ndef make():\n    return torch.nn.ReLU(), [1]\n", "make",
     "example inputs must be one tensor or a tuple of tensors, got int"),
    ("raise ImportError('no such lib')\n", "make", "importing it raised ImportError: no such lib"),
])
def test_bad_factories_name_the_file_and_factory(tmp_path, body, factory, needle) -> None:
    p = _write(tmp_path, body)
    with pytest.raises(ModelInputError) as e:
        load_user_model(f"{p}:{factory}")
    msg = str(e.value)
    assert needle in msg and str(p) in msg and "\n" not in msg


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ModelInputError, match="no such file"):
        load_user_model(f"{tmp_path / 'nope.py'}:make")
    with pytest.raises(ModelInputError, match="no such file"):
        load_user_model(str(tmp_path / "nope.onnx"))


def test_cli_factory_that_raises_is_one_line_exit_2(tmp_path) -> None:
    p = _write(tmp_path, "def make():\n    raise ValueError('bad width')\n")
    r = subprocess.run([sys.executable, "-m", "tilewright.app.cli.main", "compile", "--model",
                        f"{p}:make", "--arch", str(ARCH)], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and "make raised ValueError: bad width" in lines[0], lines
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_cli_compiles_a_factory(tmp_path) -> None:
    p = _write(tmp_path, """
        import torch
        def make():
            return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)), torch.randn(2, 8)
    """)
    r = subprocess.run([sys.executable, "-m", "tilewright.app.cli.main", "compile", "--model",
                        f"{p}:make", "--arch", str(ARCH)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "0.gemm" in r.stdout and "whole model" in r.stdout
    r = subprocess.run([sys.executable, "-m", "tilewright.app.cli.main", "compile", "--model",
                        f"{p}:make", "--arch", str(ARCH), "--seq", "64"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "--seq/--batch/--phase apply to named configs" in r.stderr


# ---- ONNX ---------------------------------------------------------------------------------------
onnx = pytest.importorskip("onnx")


def test_onnx_round_trip(tmp_path) -> None:
    """A torch model exported to ONNX, converted back by onnx2torch, compiled and run: equal to
    the original torch model (on the loader's example input) within the fp32 bound."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.LayerNorm(16),
                            torch.nn.Linear(16, 4)).eval()
    path = tmp_path / "m.onnx"
    with pytest.warns(DeprecationWarning):   # the TorchScript exporter (no onnxscript needed)
        torch.onnx.export(m, (torch.randn(2, 8),), str(path), dynamo=False)
    module, inputs = load_user_model(str(path))
    assert inputs[0].shape == (2, 8)
    res = compile_module(module, inputs, _fp32_arch())
    with torch.no_grad():
        ref = m(*inputs).numpy()
    got = res.outputs[res.program.outputs[0]]
    assert np.abs(got - ref).max() <= 1e-5 * (1 + np.abs(ref).max())


def test_onnx_unsupported_op_named(tmp_path) -> None:
    from onnx import TensorProto, helper
    node = helper.make_node("Unique", ["x"], ["y"], name="uniq0")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    path = tmp_path / "u.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(ModelInputError) as e:
        load_user_model(str(path))
    assert str(e.value).startswith(f"{path}: ONNX op Unique (node uniq0")
