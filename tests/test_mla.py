"""MLA (DeepSeek-V2/V3 Multi-head Latent Attention) and DeepSeek-V3 as a whole model.

References: an einsum re-derivation of MLA from the DeepSeek-V2 paper (arXiv 2405.04434, eqs.
37-47) with complex-number rotary (as DeepSeek's ``inference/model.py``), written here apart from
the module; closed forms for YaRN and the parameter counts; the published 671 B / 37 B figures
(DeepSeek-V3 README / HF model card, https://huggingface.co/deepseek-ai/DeepSeek-V3).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from tilewright.arch import load_arch
from tilewright.dataflow_sim.compile_flow import compile_llm
from tilewright.models.deepseek import build_deepseek_v3, deepseek_config_from_hf, mla_of
from tilewright.models.llm_configs import build_lm, build_llm, get_config, param_count
from tilewright.models.llm_shapes import ModelInputError
from tilewright.models.mla import MLAttention, yarn_inv_freq

#: deepseek-ai/DeepSeek-V3 config.json (the fields the builder reads), from
#: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
V3_HF = {
    "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
    "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "norm_topk_prob": True, "scoring_func": "sigmoid",
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 10000,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "tie_word_embeddings": False, "vocab_size": 129280, "num_nextn_predict_layers": 1,
}


# ---- independent reference ----------------------------------------------------------------------
def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _yarn_freqs(dim: int, theta: float, factor: float, orig: int, fast: float, slow: float
                ) -> np.ndarray:
    """YaRN frequencies (Peng et al. 2023, "YaRN", eq. 18-23; the NTK-by-parts ramp)."""
    i = np.arange(dim // 2)
    base = theta ** (-2.0 * i / dim)
    wavelen_rotations = orig * base / (2 * np.pi)       # rotations over the original context

    def d_of(r: float) -> float:                        # dim index doing r rotations
        return dim * np.log(orig / (r * 2 * np.pi)) / (2 * np.log(theta))
    lo, hi = max(math.floor(d_of(fast)), 0), min(math.ceil(d_of(slow)), dim - 1)
    gamma = np.clip((i - lo) / (hi - lo), 0, 1)          # 0: extrapolate, 1: interpolate
    assert ((wavelen_rotations > fast) <= (gamma == 0)).all()
    return base * (1 - gamma) + base / factor * gamma


def reference_mla(att: MLAttention, x: torch.Tensor, yarn) -> torch.Tensor:
    """Causal MLA over all of ``x`` [B, N, D] (float64, naive form, complex rotary)."""
    x = x.double()
    b, n, _ = x.shape
    h, dn, dr, dv, r = att.n_heads, att.dn, att.dr, att.dv, att.kv_lora_rank
    lin = {k: v.double() for k, v in att.state_dict().items() if k.endswith("weight")}
    eps = att.kv_norm.eps
    if att.q_lora_rank:
        cq = _rms(x @ lin["wq_a.weight"].T, lin["q_norm.weight"], eps)
        q = (cq @ lin["wq_b.weight"].T).view(b, n, h, dn + dr)
    else:
        q = (x @ lin["wq.weight"].T).view(b, n, h, dn + dr)
    ckv_kpe = x @ lin["wkv_a.weight"].T
    c = _rms(ckv_kpe[..., :r], lin["kv_norm.weight"], eps)
    kv = (c @ lin["wkv_b.weight"].T).view(b, n, h, dn + dv)
    freqs = torch.from_numpy(_yarn_freqs(dr, 10000.0, yarn.factor,
                                         yarn.original_max_position_embeddings, yarn.beta_fast,
                                         yarn.beta_slow))
    rot = torch.polar(torch.ones(n, dr // 2, dtype=torch.float64),
                      torch.arange(n, dtype=torch.float64)[:, None] * freqs[None])

    def rope(t: torch.Tensor) -> torch.Tensor:          # [B, N, heads, dr]
        z = torch.view_as_complex(t.reshape(*t.shape[:-1], dr // 2, 2).contiguous())
        return torch.view_as_real(z * rot[None, :, None, :]).flatten(-2)
    qf = torch.cat([q[..., :dn], rope(q[..., dn:])], -1)
    k_pe = rope(ckv_kpe[..., r:].unsqueeze(2)).expand(b, n, h, dr)
    kf = torch.cat([kv[..., :dn], k_pe], -1)
    mscale = 0.1 * yarn.mscale_all_dim * math.log(yarn.factor) + 1
    scores = torch.einsum("bshd,bthd->bhst", qf, kf) * (dn + dr) ** -0.5 * mscale ** 2
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.einsum("bhst,bthd->bshd", scores.softmax(-1), kv[..., dn:])
    return o.reshape(b, n, h * dv) @ lin["wo.weight"].T


@pytest.fixture(scope="module")
def tiny_layer():
    layer, _ = build_llm("tiny-deepseek", seed=5)
    return layer


def test_prefill_naive_matches_reference(tiny_layer):
    x = torch.randn(2, 9, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, c_kv, k_pe = tiny_layer.attn(x)
    ref = reference_mla(tiny_layer.attn, x, get_config("tiny-deepseek").yarn)
    assert (got.double() - ref).abs().max() <= 1e-5 * ref.abs().max()
    assert c_kv.shape == (2, 9, 16) and k_pe.shape == (2, 9, 8)


@pytest.mark.parametrize("past", [1, 7])
def test_absorbed_decode_matches_reference_and_naive(tiny_layer, past):
    """Decode of one token on the latent cache left by a prefill of ``past`` tokens equals the
    last row of a full causal run (reference), and the naive form on the same cache."""
    x = torch.randn(2, past + 1, 64, generator=torch.Generator().manual_seed(past))
    att = tiny_layer.attn
    with torch.no_grad():
        _, c_kv, k_pe = att(x[:, :past])
        got, c2, p2 = att(x[:, past:], c_kv, k_pe)               # absorbed
        naive, c3, p3 = att.naive(x[:, past:], c_kv, k_pe)
    ref = reference_mla(att, x, get_config("tiny-deepseek").yarn)[:, past:]
    scale = ref.abs().max()
    assert (got.double() - ref).abs().max() <= 1e-5 * scale
    assert (got - naive).abs().max() <= 1e-5 * scale
    assert c2.shape == (2, past + 1, 16) and torch.equal(c2, c3) and torch.equal(p2, p3)


def test_yarn_closed_form_deepseek_v3():
    """V3: dims rotating > 32 times over 4096 positions kept, < 1 time divided by 40;
    softmax scale 192**-0.5 * (0.1 ln 40 + 1)**2."""
    inv = yarn_inv_freq(64, 10000.0, get_config("deepseek-v3").yarn, 163840).numpy()
    base = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    rotations = 4096 * base / (2 * np.pi)
    np.testing.assert_allclose(inv[rotations > 32], base[rotations > 32], rtol=1e-12)
    np.testing.assert_allclose(inv[rotations < 1], base[rotations < 1] / 40, rtol=1e-12)
    with torch.device("meta"):
        att = mla_of(get_config("deepseek-v3"))
    assert att.softmax_scale == pytest.approx(192 ** -0.5 * (0.1 * math.log(40) + 1) ** 2)


# ---- compiled (functional model) against torch --------------------------------------------------
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_compiled_fp32_matches_torch(phase):
    arch = load_arch("ws16x16")
    res = compile_llm("tiny-deepseek", arch, seq=8, batch=2, phase=phase, seed=3)
    module, inputs = build_llm("tiny-deepseek", seed=3, seq=8, batch=2, phase=phase)
    with torch.no_grad():
        ref = module(*inputs)
    assert len(res.program.outputs) == len(ref) == 3
    for name, r in zip(res.program.outputs, ref):
        got = res.outputs[name]
        assert got.shape == tuple(r.shape)
        err = np.abs(got.astype(np.float64) - r.double().numpy()).max()
        assert err <= 1e-5 * max(float(r.abs().max()), 1e-30), (phase, name, err)


# ---- parameter counts ---------------------------------------------------------------------------
def _v3_hand_count() -> dict[str, int]:
    """DeepSeek-V3's parameters from its config.json (huggingface.co/deepseek-ai/DeepSeek-V3,
    config.json) written out here: MLA (q_lora 1536, kv_lora 512, 128 heads of nope 128 + rope 64,
    v 128), 3 dense SwiGLU layers (18432), 58 MoE layers (256 routed + 1 shared expert of 2048,
    sigmoid router), untied 129280-row embedding and head. The router's 256 score-correction
    biases per MoE layer (58 x 256 = 14,848 values, in the checkpoint) are not learned by
    gradient (the load-balancing rule sets them): a buffer here, so not in these counts."""
    d, v, h = 7168, 129280, 128
    attn = (d * 1536 + 1536 + 1536 * h * (128 + 64)          # q_a, q_a_norm, q_b
            + d * (512 + 64) + 512 + 512 * h * (128 + 128)   # kv_a (+ k_pe), kv_a_norm, kv_b
            + h * 128 * d)                                   # o
    expert = 3 * d * 2048
    dense = attn + 2 * d + 3 * d * 18432
    router = d * 256
    moe, moe_active = (attn + 2 * d + router + e * expert + expert for e in (256, 8))
    head = v * d + d                                         # final norm + LM head
    active_no_emb = 3 * dense + 58 * moe_active + head
    return {"total": 3 * dense + 58 * moe + head + v * d, "active": active_no_emb + v * d,
            "active_no_embedding": active_no_emb}


def test_v3_counts_match_published():
    """Published (DeepSeek-V3 Technical Report, arXiv:2412.19437, abstract: "671B total
    parameters with 37B activated for each token"; github.com/deepseek-ai/DeepSeek-V3 README:
    "685B ... includes 671B of the Main Model weights and 14B of the Multi-Token Prediction
    (MTP) Module weights"). Both figures are rounded to 1 B; no more precise figure was found.
    So each is checked at its stated precision (671.026 B rounds to 671; the activated count
    without the embedding table — a token reads one row of it, a lookup — is 36.63 B, which
    rounds to 37, while with it 37.55 B would round to 38, so the published convention is the
    former) AND the counts equal the closed form written here from the config (exactly)."""
    p = param_count("deepseek-v3")
    assert abs(p["total"] / 671e9 - 1) < 0.005
    assert round(p["total"] / 1e9) == 671
    assert round(p["active_no_embedding"] / 1e9) == 37
    hand = _v3_hand_count()
    assert {k: p[k] for k in hand} == hand
    lm = build_lm("deepseek-v3")                        # meta device: the modules' own count
    assert sum(q.numel() for q in lm.parameters()) == p["total"]
    # MTP: one MoE layer + eh_proj [2D -> D] + 3 norms, sharing embedding and head
    assert p["mtp"] == p["layer"] + 2 * 7168 ** 2 + 3 * 7168


def test_tiny_model_runs_and_counts():
    lm = build_lm("tiny-deepseek")
    assert sum(q.numel() for q in lm.parameters()) == param_count("tiny-deepseek")["total"]
    kinds = [type(layer.ffn).__name__ for layer in lm.layers]
    assert kinds == ["SwiGLU", "MoELayer", "MoELayer"]
    with torch.no_grad():
        out = lm(torch.randint(0, 256, (2, 5)))
    assert out.shape == (2, 5, 256) and torch.isfinite(out).all()


# ---- HF config.json -----------------------------------------------------------------------------
def test_from_hf_equals_builtin():
    cfg = deepseek_config_from_hf(V3_HF, name="deepseek-v3")
    builtin = get_config("deepseek-v3")
    assert dataclasses.replace(cfg, source=builtin.source) == builtin
    cfg2, lm = build_deepseek_v3(V3_HF)
    assert sum(q.numel() for q in lm.parameters()) == param_count("deepseek-v3")["total"]


@pytest.mark.parametrize("change,needle", [
    ({"rope_scaling": {"type": "linear", "factor": 2}}, "rope_scaling type 'linear'"),
    ({"scoring_func": "sqrtsoftplus"}, "scoring_func"),
    ({"topk_method": "group_limited_greedy"}, "group_limited_greedy"),
    ({"tie_word_embeddings": True}, "tie_word_embeddings"),
    ({"attention_bias": True}, "attention_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rope_scaling": {**V3_HF["rope_scaling"], "mscale": 0.707}}, "mscale_all_dim"),
])
def test_from_hf_refuses(change, needle):
    with pytest.raises(ModelInputError, match=needle):
        deepseek_config_from_hf({**V3_HF, **change})
    with pytest.raises(ModelInputError, match="kv_lora_rank"):
        deepseek_config_from_hf({k: v for k, v in V3_HF.items() if k != "kv_lora_rank"})


# ---- cluster model: latent KV cache and MLA attention cost --------------------------------------
def test_cluster_kv_cache_is_the_latent_one():
    """(kv_lora_rank + qk_rope_head_dim) x element bytes x layers = 576 x 2 B x 61 for V3 bf16,
    on every TP rank (the latent is shared by all heads, not split by TP)."""
    from tilewright.dataflow_sim.cluster import chip_model, load_cluster
    from tilewright.dataflow_sim.cluster.plan import ServePlan, serve_memory

    chip = chip_model(load_cluster("h100-64x-ib"))
    assert chip.element_bytes == 2
    for tp in (1, 8):
        mem = serve_memory(ServePlan(tp=tp, ep=64 // tp), chip, "deepseek-v3")
        assert mem["kv_bytes_per_token"] == 576 * 2 * 61
    big = chip.model_copy(update={"hbm_bytes": 10**15}) if hasattr(chip, "model_copy") \
        else dataclasses.replace(chip, hbm_bytes=10**15)
    whole = serve_memory(ServePlan(), big, "deepseek-v3")      # one chip: every weight
    assert whole["weight_bytes"] == 2 * (param_count("deepseek-v3")["total"] - 7168)  # no final norm


def test_cluster_mla_op_table_matches_closed_forms():
    """Token-linear MACs of one MoE layer = its active parameters minus the norm weights (the
    absorbed W_UK/W_UV cost what the naive W_kvb costs when qk_nope = v_head dims); attention
    per head and key = (r + dr) + r MACs (absorbed form)."""
    from tilewright.dataflow_sim.cluster.workload import Shard, layer_ops

    cfg, p = get_config("deepseek-v3"), param_count("deepseek-v3")
    expert = 3 * 7168 * 2048
    active_layer = p["layer"] - (256 - 8) * expert
    norms = 2 * 7168 + 1536 + 512
    T = 32                                              # 32 x top-8 = one token per expert
    ops = layer_ops(cfg, Shard(), batch=T, q_len=1, ctx_len=1000, element_bytes=2)
    gemm = ops[ops.kind == "gemm"].set_index("name")
    token_macs = gemm.drop(["attn_scores", "attn_values"])["flops"].sum() / 2
    assert token_macs == T * (active_layer - norms)
    attn_macs = gemm.loc[["attn_scores", "attn_values"], "flops"].sum() / 2
    assert attn_macs == T * 128 * 1000 * (512 + 64 + 512)
    assert ops.set_index("name").loc["kv_write", "bytes"] == T * 576 * 2


def test_cluster_serves_deepseek_v3_and_refuses_training():
    from tilewright.dataflow_sim.cluster import load_cluster, poisson_requests, simulate_serving
    from tilewright.dataflow_sim.cluster.cluster_spec import ClusterSpecError
    from tilewright.dataflow_sim.cluster.plan import ServePlan, TrainPlan
    from tilewright.dataflow_sim.cluster.training import simulate_training

    spec = load_cluster("h100-64x-ib")
    res = simulate_serving(spec, "deepseek-v3", ServePlan(tp=8, ep=8),
                           poisson_requests(20, 5.0, (64, 512), (4, 32), seed=1))
    assert res.metrics["finished"] == 20
    with pytest.raises(ClusterSpecError, match="MLA attention is not modelled in training"):
        simulate_training(spec, "deepseek-v3", TrainPlan(tp=8, ep=8))


def test_whole_model_step_cost_counts_dense_and_moe_layers():
    """compile's whole-model line for DeepSeek: n_moe_layers x the MoE decoder layer +
    n_dense_layers x the dense-FFN layer + embedding + LM head (each compiled)."""
    from tilewright.dataflow_sim.token_cost import layer_totals, llm_step_cost

    arch = load_arch("ws16x16")
    step = llm_step_cost(arch, "tiny-deepseek", phase="decode", seq=8, batch=2, fmt="fp32")
    p = step.parts
    moe = layer_totals(arch, "tiny-deepseek", seq=8, batch=2, phase="decode", fmt="fp32")
    assert p["layer"]["macs"] == moe["macs"] and p["dense_layer"]["macs"] != moe["macs"]
    assert step.macs == 2 * p["layer"]["macs"] + p["dense_layer"]["macs"] \
        + p["embedding"]["macs"] + p["lm_head"]["macs"]
    with pytest.raises(ModelInputError, match="dense"):
        build_llm("tiny-llama", dense=True)


def test_compiler_cost_source_serves_tiny_deepseek():
    """On ArchSpec chips the serving cost comes from the compiled MLA layer and the compiled
    absorbed attention (one latent KV head: r + dr key, r value features for all heads). The
    fused attention task costs its values at the key width (it has one head dim): its MACs lie
    between the absorbed closed form H·c·(2r + dr) and H·c·2(r + dr)."""
    import pandas as pd

    from tilewright.dataflow_sim.cluster import ClusterSpec, simulate_serving
    from tilewright.dataflow_sim.cluster.compiled import compiled_attention
    from tilewright.dataflow_sim.cluster.plan import ServePlan
    from tilewright.dataflow_sim.cluster.workload import Shard

    arch = {"name": "t16", "clock_mhz": 800.0,
            "tensor_engine": {"rows": 16, "cols": 16, "dataflow": "ws"},
            "offchip": {"bandwidth_gbps": 50.0, "capacity_gib": 1}}
    spec = ClusterSpec.from_dict({"name": "one", "chip": {"kind": "arch", "arch": arch},
                                  "chips_per_node": 1})
    reqs = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [8], "output_tokens": [2]})
    res = simulate_serving(spec, "tiny-deepseek", ServePlan(), reqs, cost_source="compiler")
    assert res.metrics["finished"] == 1 and res.metrics["cost_source"] == "compiler"
    cfg, c = get_config("tiny-deepseek"), 64
    rep = compiled_attention(cfg, Shard(), load_arch("ws16x16"), q_len=1, ctx_len=c)
    macs = rep.report.loc[rep.report.kind == "attention", "macs"].sum()
    assert 4 * c * (16 + 8 + 16) <= macs <= 4 * c * 2 * (16 + 8)


def test_compiled_v3_decode_layer_macs_closed_form():
    """One DeepSeek-V3 MoE layer decoding 1 token over a 64-token latent cache (shape-only
    compile): MACs = q_a + q_b + kv_a + W_UK and W_UV absorptions + o_proj + absorbed attention
    (128 heads x 65 keys x (512 + 64 + 512)) + router + 8 routed + 1 shared expert."""
    res = compile_llm("deepseek-v3", load_arch("ws16x16"), seq=65, phase="decode")
    assert res.shape_only
    d, h = 7168, 128
    mla = d * 1536 + 1536 * h * 192 + d * 576 + 2 * h * 128 * 512 + h * 128 * d
    attention = h * 65 * (512 + 64 + 512)              # 64 cached + the new token
    moe = d * 256 + 9 * 3 * d * 2048
    assert res.totals()["macs"] == mla + attention + moe


def test_deepseek_v3_config_json_compiles_through_the_cli(tmp_path):
    """A small DeepseekV3ForCausalLM config.json: the registry builds it (MLA + dense + MoE
    layers), the CLI compiles it with the whole model, and its parameter count is the hand count
    of the HF fields; an unread field is refused by name, exit 2."""
    import json
    import subprocess
    import sys

    f = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64,
         "num_hidden_layers": 3, "n_routed_experts": 8, "num_experts_per_tok": 2,
         "moe_intermediate_size": 32, "intermediate_size": 96, "vocab_size": 128,
         "num_attention_heads": 4, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
         "qk_rope_head_dim": 8, "v_head_dim": 8, "q_lora_rank": 24, "n_shared_experts": 1,
         "first_k_dense_replace": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
         "n_group": 2, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
         "max_position_embeddings": 256, "ep_size": 1, "num_key_value_heads": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(f))
    run = [sys.executable, "-m", "tilewright.app.cli.main", "compile", "--model", str(path),
           "--arch", "configs/ws16x16.yaml", "--phase", "decode", "--seq", "16", "--json"]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    d, h, qr, r, dn, dr, dv = 64, 4, 24, 16, 8, 8, 8
    attn = (d * qr + qr + qr * h * (dn + dr) + d * (r + dr) + r + r * h * (dn + dv)
            + h * dv * d + 2 * d)                         # + the layer's two RMSNorms
    e, k, fe, shared = 8, 2, 32, 1
    router = d * e                 # gate weight (the noaux_tc correction bias is a buffer in HF)
    moe_all = router + (e + shared) * 3 * d * fe
    moe_act = router + (k + shared) * 3 * d * fe
    dense = 3 * d * 96
    base = 3 * attn + dense + 2 * 128 * d + d             # embedding, head, final norm
    assert doc["params_total"] == base + 2 * moe_all
    assert doc["params_active"] == base + 2 * moe_act
    assert doc["whole_model"] is not None and "whole_model_not_computed" not in doc
    f["weird_field"] = 1
    path.write_text(json.dumps(f))
    bad = subprocess.run(run, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert bad.returncode == 2 and len(lines) == 1 and "'weird_field'" in lines[0]
