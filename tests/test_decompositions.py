"""Op coverage by decomposition, checked against torch: each layer alone is compiled (fp32),
run on the functional model and compared with torch running the same module.

Bound: max |got - ref| <= 1e-5 * (1 + max |ref|) (both IEEE fp32; summation order differs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tilewright.arch import load_arch
from tilewright.compiler.errors import UnsupportedOp
from tilewright.dataflow_sim.compile_flow import compile_module

ARCH = load_arch(Path(__file__).resolve().parents[1] / "configs" / "ws8x8.yaml")


class _Fn(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *x):
        return self.fn(*x)


def _bn() -> nn.Module:
    bn = nn.BatchNorm2d(4).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-0.5, 0.5)
    return bn


class MHA(nn.Module):
    def __init__(self, need_weights: bool) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x):
        return self.mha(x, x, x, need_weights=self.need_weights)[0]


X3 = (2, 6, 16)
IMG = (2, 4, 9, 9)
CASES = {
    "layernorm": (lambda: nn.LayerNorm(16), X3),
    "gelu_erf": (lambda: nn.GELU(), X3),
    "gelu_tanh": (lambda: nn.GELU(approximate="tanh"), X3),
    "sdpa": (lambda: _Fn(lambda q: F.scaled_dot_product_attention(q, q * 0.5, q + 1)), (2, 3, 5, 8)),
    "sdpa_causal": (lambda: _Fn(lambda q: F.scaled_dot_product_attention(
        q, q * 2, q - 1, is_causal=True, scale=0.3)), (1, 2, 7, 8)),
    "mha": (lambda: MHA(False), X3),
    "mha_weights": (lambda: MHA(True), X3),
    "conv2d": (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1), IMG),
    "conv2d_dilated_groups": (lambda: nn.Conv2d(4, 6, 3, dilation=2, groups=2, bias=False), IMG),
    "conv1d": (lambda: nn.Conv1d(4, 5, 3, padding=2), (2, 4, 10)),
    "maxpool": (lambda: nn.MaxPool2d(3, 2, 1), IMG),
    "avgpool": (lambda: nn.AvgPool2d(3, 3), IMG),
    "adaptive_avg_1": (lambda: nn.AdaptiveAvgPool2d(1), IMG),
    "adaptive_avg_3": (lambda: nn.AdaptiveAvgPool2d(3), IMG),
    "batchnorm_eval": (_bn, IMG),
    "flatten_dropout": (lambda: nn.Sequential(nn.Dropout(0.5), nn.Flatten()), IMG),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_matches_torch(case) -> None:
    torch.manual_seed(0)
    make, shape = CASES[case]
    module = make().eval()
    x = torch.randn(shape)
    res = compile_module(module, (x,), ARCH)
    with torch.no_grad():
        ref = module(x).numpy()
    got = res.outputs[res.program.outputs[0]]
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-5 * (1 + np.abs(ref).max())


def test_sdpa_becomes_one_attention_task_and_conv_one_gemm() -> None:
    res = compile_module(_Fn(lambda q: F.scaled_dot_product_attention(q, q, q)).eval(),
                         (torch.randn(1, 2, 8, 8),), ARCH)
    assert [t.kind for t in res.program.tasks if t.kind != "vector"] == ["attention"]
    res = compile_module(nn.Conv2d(4, 6, 3).eval(), (torch.randn(1, 4, 6, 6),), ARCH)
    gemms = [t for t in res.program.tasks if t.kind == "bgemm"]
    # im2col: M = 4 * 4 output pixels, K = 4 channels * 9 taps, N = 6 output channels
    assert [(g.m, g.k, g.n) for g in gemms] == [(16, 36, 6)]


def test_ceil_mode_partial_window_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedOp, match="ceil_mode"):
        compile_module(nn.MaxPool2d(2, 2, ceil_mode=True).eval(), (torch.randn(1, 1, 5, 5),), ARCH)
