"""Mamba (selective SSM) models in the cluster model: training and serving with per-chip compute
from the compiler, the TP rule for d_inner, and the recurrent state replacing the KV cache.
Expected values come from compile_llm / compile_module on independently built modules and from
the config's shapes (models.llm_configs.param_count), not from the cluster code's own compile."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tilewright.dataflow_sim.compile_flow import compile_llm
from tilewright.dataflow_sim.cluster import (ClusterSpec, CollectiveTimer, IterationCost,
                                             PlanError, ServePlan, Topology, TrainPlan,
                                             chip_model, simulate_serving, simulate_training)
from tilewright.dataflow_sim.cluster.compiled import compiled_layer
from tilewright.dataflow_sim.cluster.plan import serve_memory
from tilewright.dataflow_sim.cluster.workload import Shard
from tilewright.dataflow_sim.report import report_totals
from tilewright.models.llm_configs import get_config, param_count

from .test_cluster_compiler_costs import _embedding_seconds, _matmul_seconds, arch_cluster


def _head_seconds(arch, cfg, tokens: int, fmt: str) -> tuple[float, float]:
    """(forward, backward) seconds of final RMSNorm + D×V_padded projection + softmax, compiled
    here on their own (backward: dgrad + wgrad matmuls, 2 × every other op)."""
    import torch

    from tilewright.dataflow_sim.compile_flow import compile_module
    from tilewright.models.transformer import RMSNorm

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = RMSNorm(cfg.d_model)
            self.proj = torch.nn.Linear(cfg.d_model, cfg.padded_vocab, bias=False)

        def forward(self, x):
            return torch.softmax(self.proj(self.norm(x)), dim=-1)

    with torch.device("meta"):
        out = compile_module(Head(), (torch.empty(1, tokens, cfg.d_model),), arch, fmt=fmt,
                             execute=False)
    rep, hz = out.report, out.report.attrs["clock_mhz"] * 1e6
    bwd = sum(_matmul_seconds(arch, t.m, t.n, t.k, fmt) + _matmul_seconds(arch, t.k, t.m, t.n, fmt)
              if t.kind == "bgemm" else 2 * r.time_cycles / hz
              for t, r in zip(out.program.tasks, rep.itertuples()))
    return report_totals(rep)["total_cycles"] / hz, bwd


def test_one_chip_mamba_step_is_the_sum_of_compiled_ops():
    """One chip, no network: step = m · (n_layers · (fwd + bwd) + head + 3 · embedding), with the
    layer's forward the Report of compile_llm('tiny-mamba') (the model's own MambaLayer, d_inner
    = expand·D), each GEMM's dgrad/wgrad compiled as stand-alone matmuls, every other op twice
    its forward row; the embedding a compiled row gather (forward + 2 × forward)."""
    m, s, fmt = 2, 16, "int8"
    spec = arch_cluster()
    arch, cfg = spec.arch(), get_config("tiny-mamba")
    out = compile_llm("tiny-mamba", arch, seq=s, batch=1, phase="prefill", fmt=fmt, execute=False)
    rep, hz = out.report, out.report.attrs["clock_mhz"] * 1e6
    assert (rep.kind == "scan").sum() == 1
    fwd = report_totals(rep)["total_cycles"] / hz
    bwd = 0.0
    for task, row in zip(out.program.tasks, rep.itertuples()):
        if task.kind == "bgemm":
            assert not task.batch
            bwd += _matmul_seconds(arch, task.m, task.n, task.k, fmt)
            bwd += _matmul_seconds(arch, task.k, task.m, task.n, fmt)
        else:
            bwd += 2 * row.time_cycles / hz
    hfwd, hbwd = _head_seconds(arch, cfg, s, fmt)
    emb = _embedding_seconds(arch, cfg.padded_vocab, cfg.d_model, s, fmt)
    res = simulate_training(spec, "tiny-mamba", TrainPlan(micro_batches=m, seq_len=s))
    assert res.metrics["cost_source"] == "compiler"
    expected = m * (cfg.n_layers * (fwd + bwd) + hfwd + hbwd + 3 * emb)
    assert res.step_seconds == pytest.approx(expected, rel=1e-9)
    assert res.breakdown.exposed_comm_s.iloc[0] == 0


def test_tp2_halves_the_per_chip_projection_macs_and_scan_channels():
    """Closed form per T tokens: in_proj T·D·2di + x_proj T·di·(R+2N) + dt_proj T·R·di +
    out_proj T·di·D; TP=2 halves di on each chip, so every term halves; the scan task's channels
    (d_inner) halve."""
    cfg = get_config("mamba-130m")
    arch = arch_cluster().arch()
    T = 8
    D, di, N, R = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.rank
    reps = {tp: compiled_layer(cfg, Shard(tp=tp), arch, batch=1, q_len=T, ctx_len=T)
            for tp in (1, 2)}
    for tp, r in reps.items():
        d = di // tp
        assert r.gemm_macs == T * (D * 2 * d + d * (R + 2 * N) + R * d + d * D)
        scan = [t for t in r.program.tasks if t.kind == "scan"]
        assert [t.channels for t in scan] == [d]
    assert reps[2].gemm_macs * 2 == reps[1].gemm_macs


def test_long_sequences_are_compiled_as_chunks_with_carried_state():
    """A 64-token sequence costs 4 × the compiled 16-token chunk with carried state (the
    layer's cost is linear in tokens); GEMM MACs equal the closed form for 64 tokens."""
    cfg = get_config("tiny-mamba")
    arch = arch_cluster().arch()
    long = compiled_layer(cfg, Shard(), arch, batch=2, q_len=64, ctx_len=64)
    chunk = compiled_layer(cfg, Shard(), arch, batch=2, q_len=16, ctx_len=17)
    assert long.forward_seconds == pytest.approx(4 * chunk.forward_seconds, rel=1e-12)
    D, di, N, R = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.rank
    assert long.gemm_macs == 2 * 64 * (D * 2 * di + di * (R + 2 * N) + R * di + di * D)


@pytest.mark.parametrize("tp", [1, 2])
def test_serving_state_memory_is_the_closed_form_and_ignores_context(tp):
    """Per sequence per chip: n_layers · (d_inner/tp) · (d_state + d_conv) · e bytes; weights
    = param_count's layers / tp (+ one tied vocab matrix / tp) · e; slots = what is left."""
    name = "mamba-2.8b"
    cfg = get_config(name)
    spec = ClusterSpec.from_dict({"name": "h", "chip": {"kind": "gpu", "preset": "h100-sxm"},
                                  "chips_per_node": tp,
                                  **({"intra_node": {"topology": "switch"}} if tp > 1 else {})})
    chip = chip_model(spec)
    plan = ServePlan(tp=tp)
    mem = serve_memory(plan, chip, name)
    e = chip.element_bytes
    state = cfg.n_layers * (cfg.d_inner // tp) * (cfg.d_state + cfg.d_conv) * e
    assert mem["state_bytes_per_seq"] == state and mem["kv_bytes_per_token"] == 0
    pc = param_count(name)
    # total − final norm − vocab = n_layers · layer; each chip holds 1/tp of the d_inner
    # parts (everything but the layer's RMSNorm weight, D)
    layer_chip = (pc["layer"] - cfg.d_model) / tp + cfg.d_model
    vocab = -(-cfg.padded_vocab // tp) * cfg.d_model
    weights = (cfg.n_layers * layer_chip + vocab) * e
    assert mem["weight_bytes"] == pytest.approx(weights, rel=1e-12)
    usable = chip.hbm_bytes * plan.memory_fraction
    assert mem["state_slots"] == int((usable - weights) // state)
    # serving: one request of any prompt length takes one slot; decode cost has no context term
    timer = CollectiveTimer(Topology(spec))
    cost = IterationCost(cfg, plan, chip, timer, list(range(tp)))
    one = np.array([1])
    assert cost.seconds(one, np.array([16]), 1) == cost.seconds(one, np.array([100_000]), 1)


def test_mamba_serving_decode_time_does_not_grow_with_the_prompt():
    """Compiler path: two single requests with prompts 8 and 200 tokens have the same TPOT (the
    recurrent state has a fixed size), while a Llama model's TPOT grows with the context."""
    spec = arch_cluster()
    plan = ServePlan(max_batch_tokens=16)

    def tpot(model: str, prompt: int) -> float:
        req = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [prompt], "output_tokens": [4]})
        res = simulate_serving(spec, model, plan, req)
        assert res.metrics["cost_source"] == "compiler"
        return float(res.requests.tpot_s.iloc[0])

    assert tpot("tiny-mamba", 8) == pytest.approx(tpot("tiny-mamba", 200), rel=1e-12)
    assert tpot("tiny-llama", 200) > tpot("tiny-llama", 8)


def test_mamba_plans_that_cannot_run_are_refused():
    spec2 = arch_cluster(2)
    with pytest.raises(PlanError, match="d_inner"):
        simulate_training(arch_cluster(3), "tiny-mamba", TrainPlan(tp=3, seq_len=16))
    with pytest.raises(PlanError, match="sequence parallelism"):
        simulate_training(spec2, "tiny-mamba", TrainPlan(sp=2, seq_len=16))
    with pytest.raises(PlanError, match="no experts"):
        simulate_serving(spec2, "tiny-mamba", ServePlan(ep=2),
                         pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [4],
                                       "output_tokens": [2]}))


def test_mamba_dp_pp_training_runs_with_pipeline_and_gradient_traffic():
    """DP=2 × PP=2 on 4 chips: each stage runs half the layers; the pipeline has a bubble and the
    gradient all-reduce moves bytes."""
    spec = arch_cluster(4)
    res = simulate_training(spec, "tiny-mamba", TrainPlan(dp=2, pp=2, micro_batches=4,
                                                           seq_len=16))
    assert res.metrics["bubble_s"] > 0 and res.metrics["network_messages"] > 0
    assert res.step_seconds > 0
