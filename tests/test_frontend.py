"""Frontend (torch.export -> IR), passes and model configs."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from tilewright.compiler.frontend import UnsupportedOp, import_model
from tilewright.compiler.passes import run_flow
from tilewright.models import mlp as mlp_module
from tilewright.models.configs import CONFIGS, build
from tilewright.models.mlp import MLP


def line_of(obj: object, text: str) -> int:
    """Line number (in its file) of the first line of ``obj``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(obj)
    return start + next(i for i, line in enumerate(lines) if text in line)


class SigmoidHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.fc(x))


class CosHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cos(self.fc(x))


class CumprodModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        return y.cumprod(dim=1)


class SortModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x.permute(0, 2, 1), dim=-1).values


# ---- models/configs -----------------------------------------------------------------------------
def test_build_known_configs_and_determinism() -> None:
    for name, cfg in CONFIGS.items():
        m1, x1 = build(name, seed=3)
        m2, x2 = build(name, seed=3)
        m3, _ = build(name, seed=4)
        assert tuple(x1.shape) == cfg.input_shape and torch.equal(x1, x2)
        assert m1.config_name == name
        for (k, p1), p2, p3 in zip(m1.state_dict().items(), m2.state_dict().values(),
                                   m3.state_dict().values()):
            assert torch.equal(p1, p2), k
            assert not torch.equal(p1, p3), k
        assert m1(x1).shape == (cfg.input_shape[0], cfg.kwargs["sizes"][-1])


def test_build_unknown_name_lists_known() -> None:
    with pytest.raises(ValueError, match="mlp-small.*mlp-tiny|mlp-tiny.*mlp-small"):
        build("mlp-huge")


def test_mlp_structure_relu_between_not_after() -> None:
    m = MLP([3, 5, 7, 2], seed=0)
    x = torch.randn(4, 3)
    h = x
    for i, layer in enumerate(m.layers):
        h = layer(h)
        if i < 2:
            h = torch.clamp(h, min=0)
    assert torch.equal(m(x), h)  # the last layer's output keeps its negative values
    with pytest.raises(ValueError):
        MLP([3])


# ---- frontend ---------------------------------------------------------------------------------
def test_import_mlp_ops_shapes_and_source_lines() -> None:
    model, x = build("mlp-tiny")
    g = import_model(model, x)
    assert [op.kind for op in g.ops] == ["linear", "relu", "linear", "relu", "linear"]
    mlp_file = Path(inspect.getsourcefile(mlp_module)).name
    lin_line = line_of(MLP.forward, "x = layer(x)")
    relu_line = line_of(MLP.forward, "torch.relu")
    for op in g.ops:
        expect = lin_line if op.kind == "linear" else relu_line
        assert op.source.endswith(f"{mlp_file}:{expect}"), op.source
    sizes = CONFIGS["mlp-tiny"].kwargs["sizes"]
    lin = [op for op in g.ops if op.kind == "linear"]
    for op, k, n in zip(lin, sizes[:-1], sizes[1:]):
        assert g.tensors[op.inputs[1]].shape == (n, k) and g.tensors[op.inputs[1]].is_const
        assert g.tensors[op.outputs[0]].shape == (4, n)
    # calibration: absmax of the input is max|x|
    assert g.tensors[g.inputs[0]].meta["absmax"] == pytest.approx(float(x.abs().max()))
    text = str(g)
    assert "linear(%x" in text and "relu(" in text and "mlp.py" in text


def test_decomposed_export_canonicalizes_to_the_same_graph() -> None:
    model, x = build("mlp-tiny")
    plain = run_flow(import_model(model, x), "optimize")
    dec = import_model(model, x, decompose=True)
    assert {op.kind for op in dec.ops} == {"transpose", "addmm", "relu"}
    run_flow(dec, "optimize")
    assert [op.kind for op in dec.ops] == [op.kind for op in plain.ops] == ["linear"] * 3
    for a, b in zip(dec.ops, plain.ops):
        assert a.attrs == b.attrs
        for ta, tb in zip(a.inputs[1:], b.inputs[1:]):
            assert (dec.const(ta) == plain.const(tb)).all()


def test_fuse_linear_relu() -> None:
    model, x = build("mlp-small")
    g = run_flow(import_model(model, x), "optimize")
    assert [op.kind for op in g.ops] == ["linear"] * 3
    assert [op.attrs.get("relu", False) for op in g.ops] == [True, True, False]
    assert g.ops[-1].outputs == g.outputs


@pytest.mark.parametrize("model,shape,op_name,marker", [
    (CosHead(), (2, 8), "cos", "torch.cos"),
    (CumprodModel(), (2, 8), "cumprod", "cumprod"),
    (SortModel(), (2, 3, 4), "sort", "torch.sort"),
])
def test_unsupported_op_names_op_and_source_line(model, shape, op_name, marker) -> None:
    with pytest.raises(UnsupportedOp) as info:
        import_model(model, torch.randn(*shape))
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    assert op_name in msg
    assert f"test_frontend.py:{line_of(type(model).forward, marker)}" in msg, msg


class LstmHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.rnn = torch.nn.Sequential(torch.nn.LSTM(8, 8, batch_first=True))

    def forward(self, x):
        return self.rnn(self.proj(x))[0]


def test_an_unsupported_layer_is_named_by_its_module_path_and_class() -> None:
    """An nn.LSTM was reported as ``aten.zeros.default`` (the zeros of its initial state): the
    message now names the layer the user wrote (module path ``rnn.0``, class ``nn.LSTM``)."""
    with pytest.raises(UnsupportedOp) as info:
        import_model(LstmHead().eval(), torch.randn(1, 4, 8))
    msg = str(info.value)
    assert msg.startswith("unsupported module rnn.0 (nn.LSTM): its op aten."), msg
    assert f"test_frontend.py:{line_of(LstmHead.forward, 'self.rnn')}" in msg, msg


def test_compile_model_propagates_unsupported_op() -> None:
    from tilewright.arch import load_arch
    from tilewright.compiler import compile_model

    with pytest.raises(UnsupportedOp, match="sigmoid"):
        compile_model(SigmoidHead(), torch.randn(2, 8), load_arch("ws8x8"))


def test_compiler_core_does_not_import_torch() -> None:
    code = ("import sys; import tilewright.compiler, tilewright.compiler.program, "
            "tilewright.compiler.layout, tilewright.compiler.ir, tilewright.compiler.passes, "
            "tilewright.compiler.lower_mlp, tilewright.dataflow_sim.functional; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
