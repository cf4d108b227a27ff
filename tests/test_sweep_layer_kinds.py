"""Sweep ``llm`` workloads cost Jamba-like (several layer kinds) and Mamba-2 whole models
(``layers: all``) the way ``compile`` does (issue 14: one cost path).

References: ``tilewright compile --json``'s ``whole_model`` of the same config.json, arch and
shape (the figures the sweep must reproduce); the per-kind layer totals compiled here, counted by
the config's own layer pattern (Jamba: attention every ``attn_layer_period`` layers at
``attn_layer_offset``, MoE every ``expert_layer_period`` at ``expert_layer_offset``).
"""

from __future__ import annotations

import json

import pytest

from tests.test_cli import tw_here
from tests.test_hf_configs import ARCH, SMALL, _write
from tilewright.app.sweep.evaluate import evaluate_point, workload_cost
from tilewright.arch import load_arch


@pytest.mark.parametrize("arch_name,phase", [
    pytest.param("JambaForCausalLM", "decode", marks=pytest.mark.slow),   # three layer kinds
    ("Mamba2ForCausalLM", "prefill")])
def test_sweep_and_compile_cost_the_whole_model_alike(tmp_path, capsys, arch_name, phase):
    path = _write(tmp_path, arch_name, SMALL[arch_name])
    code, out, err = tw_here(capsys, "compile", "--model", path, "--arch", ARCH, "--seq", "16",
                          "--phase", phase, "--json")
    assert code == 0, err
    whole = json.loads(out)["whole_model"]
    w = {"model": path, "seq": 16, "batch": 1, "phase": phase, "layers": "all"}
    # a design point with this workload evaluates (no refusal) to compile's figures
    r = evaluate_point(load_arch(ARCH).model_dump(mode="json", exclude_none=True), [w], "45nm")
    assert r["status"] == "ok", r.get("error")
    m = r["metrics"]
    assert (m["w0:cycles"], m["w0:macs"], m["w0:dram_bytes"]) == \
        (whole["cycles"], whole["macs"], whole["dram_bytes"])
    # the whole model is more than one layer: every layer counted, not layer 0 times n_layers
    assert whole["macs"] > workload_cost(load_arch(ARCH), {**w, "layers": 1})["macs"]


def test_jamba_whole_model_counts_each_kind_by_the_config_pattern(tmp_path):
    """Jamba-like, 4 layers, attention period 4 offset 2, experts period 2 offset 1: layers 0
    mamba-mlp, 1 mamba-moe, 2 attn-mlp, 3 mamba-moe — so the step's MACs are
    1·mamba-mlp + 2·mamba-moe + 1·attn-mlp + embedding + LM head."""
    from tilewright.dataflow_sim.compile_flow import compile_llm

    path = _write(tmp_path, "JambaForCausalLM", SMALL["JambaForCausalLM"])
    spec = load_arch(ARCH)
    fmt = spec.tensor_engine.input_format
    per = {k: compile_llm(path, spec, seq=16, batch=1, phase="decode", fmt=fmt, execute=False,
                          kind=k).totals()["macs"] for k in ("mamba-mlp", "mamba-moe", "attn-mlp")}
    d, v = SMALL["JambaForCausalLM"]["hidden_size"], SMALL["JambaForCausalLM"]["vocab_size"]
    head = d * v                           # one decode token: d x vocab LM head GEMM
    got = workload_cost(spec, {"model": path, "seq": 16, "batch": 1, "phase": "decode",
                               "layers": "all"})
    assert got["tokens"] == 1                  # one decode token
    assert got["macs"] == per["mamba-mlp"] + 2 * per["mamba-moe"] + per["attn-mlp"] + head
