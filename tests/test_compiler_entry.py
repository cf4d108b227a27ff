"""The compiler's one entry point (:func:`tilewright.compiler.compile`): both flows go through it,
``flow="auto"`` picks the one the graph needs, and the older calls give the same Programs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tilewright.arch import load_arch
from tilewright.compiler import compile, compile_model, compile_traced
from tilewright.compiler.entry import choose_flow
from tilewright.compiler.frontend import export_model, from_exported
from tilewright.dataflow_sim.compile_flow import compile_module
from tilewright.models.configs import build
from tilewright.models.llm_configs import build_llm


def _same(p, q) -> None:
    assert p.model_dump(exclude={"constants"}) == q.model_dump(exclude={"constants"})
    assert p.constants.keys() == q.constants.keys()
    for k in p.constants:
        np.testing.assert_array_equal(p.constants[k], q.constants[k])


def test_auto_picks_mlp_for_linear_relu_and_matches_compile_model() -> None:
    arch = load_arch("ws8x8")
    model, x = build("mlp-tiny")
    out = compile_traced(model, x, arch)
    assert out.flow == "mlp"
    _same(out.program, compile_model(model, x, arch))
    _same(compile(model, (x,), arch, flow="mlp", fmt="int8"), out.program)


def test_auto_picks_llm_for_a_decoder_layer_and_matches_compile_module() -> None:
    arch = load_arch("ws8x8")
    module, example = build_llm("tiny-llama", seq=8)
    out = compile_traced(module, example, arch, fmt="bf16")
    assert out.flow == "llm" and out.program.meta["format"] == "bf16"
    _same(out.program, compile_module(module, example, arch, fmt="bf16", execute=False).program)


def test_choose_flow_and_bad_arguments() -> None:
    model, x = build("mlp-tiny")
    graph = from_exported(export_model(model, x))
    assert choose_flow(graph) == choose_flow(graph, "int8") == "mlp"
    assert choose_flow(graph, "fp32") == "llm"      # an MLP in another format: the LLM lowering
    arch = load_arch("ws8x8")
    assert compile(model, x, arch, fmt="fp32").meta["format"] == "fp32"
    with pytest.raises(ValueError, match="must be one of auto, mlp, llm"):
        compile(model, x, arch, flow="cnn")
    with pytest.raises(ValueError, match="mlp flow compiles int8 only"):
        compile(model, x, arch, flow="mlp", fmt="bf16")
    with pytest.raises(ValueError, match="one example input"):
        compile(model, (x, torch.zeros(1)), arch, flow="mlp")
