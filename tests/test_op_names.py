"""Ops are named by the module path torch.export records (``nn_module_stack``), not ``linear_4``:
the path itself when the module emitted one op, ``<path>.<kind>[_n]`` otherwise; names are unique
and reach the Program's tasks and the Report rows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from tilewright.arch import load_arch
from tilewright.compiler.errors import UnsupportedOp
from tilewright.compiler.frontend import export_model, from_exported
from tilewright.dataflow_sim.compile_flow import compile_module

ARCH = Path(__file__).resolve().parents[1] / "configs" / "ws8x8.yaml"


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(8, 8) for _ in range(3))

    def forward(self, x):
        return torch.softmax(self.q_proj(x) @ self.k_proj(x).T, -1) @ self.v_proj(x)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self_attn = Attn()
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x + self.self_attn(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_ops_are_named_by_module_path_and_unique() -> None:
    g = from_exported(export_model(Net(), (torch.randn(4, 8),)))
    names = [op.name for op in g.ops]
    assert len(set(names)) == len(names)
    for i in (0, 1):
        for p in ("q_proj", "k_proj", "v_proj"):
            assert f"layers.{i}.self_attn.{p}" in names          # one op: the path itself
        # the attention module's own ops: path.kind, then _1 for its second matmul
        assert f"layers.{i}.self_attn.matmul" in names and f"layers.{i}.self_attn.matmul_1" in names
        assert f"layers.{i}.norm.rsqrt" in names                 # LayerNorm, decomposed
    assert not any(n.startswith("linear") for n in names)


def test_report_rows_carry_the_module_paths() -> None:
    torch.manual_seed(0)
    res = compile_module(Net().eval(), (torch.randn(4, 8),), load_arch(ARCH))
    tasks = list(res.report["task"])
    assert "layers.1.self_attn.v_proj.gemm" in tasks
    assert len(set(tasks)) == len(tasks)


def test_a_module_called_twice_keeps_names_unique() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(self.fc(x))

    g = from_exported(export_model(Twice(), (torch.randn(2, 4),)))
    assert [op.name for op in g.ops] == ["fc.linear", "fc.linear_1"]


def test_unsupported_layer_names_module_path_and_class() -> None:
    class Enc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(4, 4, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = Enc()

        def forward(self, x):
            return self.encoder(x)

    with pytest.raises(UnsupportedOp) as e:
        from_exported(export_model(Model(), (torch.randn(1, 3, 4),)))
    msg = str(e.value)
    assert msg.startswith("unsupported module encoder.rnn (nn.LSTM): its op aten."), msg
