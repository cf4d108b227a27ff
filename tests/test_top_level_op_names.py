"""Ops of a model's own top-level ``forward`` are named ``<kind>``, ``<kind>_1`` ... like the ops
of its submodules (``<path>.<kind>_n``), not by torch's graph-wide node names (``add_4``).

Reference: the names written here from the forward's own ops in order.
"""

from __future__ import annotations

import torch
from torch import nn

from tilewright.arch import load_arch
from tilewright.compiler.frontend import export_model, from_exported
from tilewright.dataflow_sim.compile_flow import compile_llm


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        h = x + self.norm(x)           # the norm's own adds come first in torch's numbering
        return h + self.fc(h) * 2.0


def test_top_level_ops_get_the_kind_n_form():
    g = from_exported(export_model(Residual().eval(), (torch.randn(2, 8),)))
    top = [op.name for op in g.ops if "." not in op.name and op.name != "fc"]
    assert top == ["add", "mul", "add_1"]
    assert len({op.name for op in g.ops}) == len(g.ops)


def test_moe_layer_compiled_alone_names_its_residual_adds():
    """tiny-moe's layer (attention + MoE FFN) compiled alone: its two residual adds live in the
    layer's own forward; they were ``add_4`` and ``add_<n>`` (torch's numbering)."""
    c = compile_llm("tiny-moe", load_arch("ws16x16"), fmt="int8", execute=False)
    top = [t.name for t in c.program.tasks if "." not in t.name]
    assert top == ["add", "add_1"]
