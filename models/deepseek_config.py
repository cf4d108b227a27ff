"""DeepSeek-V3's ``config.json`` -> :class:`~tilewright.models.llm_shapes.DeepSeekConfig`,
without torch (the HF-config registry and the shape tables read it at start-up); the modules
are built by :mod:`tilewright.models.deepseek`."""

from __future__ import annotations

from typing import Any

from tilewright.models.llm_shapes import DeepSeekConfig, ModelInputError, YarnScaling

__all__ = ["deepseek_config_from_hf"]


_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
             "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
             "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
             "intermediate_size")


def deepseek_config_from_hf(hf: dict[str, Any], *, name: str = "deepseek-v3-hf",
                            source: str = "") -> DeepSeekConfig:
    """A :class:`DeepSeekConfig` from a parsed HF ``config.json`` of ``DeepseekV3ForCausalLM``
    (or ``DeepseekV2ForCausalLM``). Refuses (:class:`ModelInputError`, naming the field) a
    missing field, a ``rope_scaling`` other than ``yarn``, a routing (``topk_method``,
    ``scoring_func``) the MoE layer does not model, and tied embeddings; every other field it
    reads is listed in the source."""
    missing = [k for k in _REQUIRED if k not in hf]
    if missing:
        raise ModelInputError(f"{name}: config.json lacks {', '.join(missing)}")
    scoring = hf.get("scoring_func", "softmax")
    if scoring not in ("softmax", "sigmoid"):
        raise ModelInputError(f"{name}: config.json scoring_func {scoring!r}; accepted: "
                              "softmax, sigmoid")
    topk_method = hf.get("topk_method", "greedy")
    if topk_method not in ("greedy", "noaux_tc", "group_limited_greedy"):
        raise ModelInputError(f"{name}: config.json topk_method {topk_method!r}; accepted: "
                              "greedy, group_limited_greedy, noaux_tc")
    if topk_method == "group_limited_greedy":
        raise ModelInputError(f"{name}: config.json topk_method 'group_limited_greedy' (groups "
                              "ranked by their best score, DeepSeek-V2) is not modeled; "
                              "accepted: greedy, noaux_tc")
    if hf.get("tie_word_embeddings", False):
        raise ModelInputError(f"{name}: config.json tie_word_embeddings true; accepted: false")
    for key, want in (("attention_bias", False), ("hidden_act", "silu"), ("moe_layer_freq", 1)):
        if hf.get(key, want) != want:
            raise ModelInputError(f"{name}: config.json {key} {hf[key]!r}; accepted: {want!r}")
    rs = hf.get("rope_scaling")
    yarn = None
    if rs:
        kind = rs.get("type", rs.get("rope_type"))
        if kind != "yarn":
            raise ModelInputError(f"{name}: config.json rope_scaling type {kind!r}; accepted: "
                                  "yarn (or no rope_scaling)")
        if float(rs.get("mscale", 1)) != float(rs.get("mscale_all_dim", 0)):   # HF defaults
            raise ModelInputError(
                f"{name}: config.json rope_scaling mscale {rs.get('mscale', 1)} != "
                f"mscale_all_dim {rs.get('mscale_all_dim', 0)} (a cos/sin magnitude scaling, "
                "not modeled); accepted: equal values")
        yarn = YarnScaling(float(rs["factor"]), int(rs["original_max_position_embeddings"]),
                           float(rs.get("beta_fast", 32)), float(rs.get("beta_slow", 1)),
                           float(rs.get("mscale", 1)), float(rs.get("mscale_all_dim", 0)))
    greedy = topk_method == "greedy"
    return DeepSeekConfig(
        name, d_model=int(hf["hidden_size"]), n_layers=int(hf["num_hidden_layers"]),
        n_experts=int(hf["n_routed_experts"]), top_k=int(hf["num_experts_per_tok"]),
        d_expert_ffn=int(hf["moe_intermediate_size"]),
        n_shared_experts=int(hf.get("n_shared_experts") or 0), router_score=scoring,
        norm_topk_prob=bool(hf.get("norm_topk_prob", False)),
        routed_scaling_factor=float(hf.get("routed_scaling_factor", 1.0)),
        n_group=1 if greedy else int(hf.get("n_group") or 1),
        topk_group=1 if greedy else int(hf.get("topk_group") or 1),
        n_dense_layers=int(hf.get("first_k_dense_replace", 0)),
        d_dense_ffn=int(hf["intermediate_size"]), vocab_size=int(hf["vocab_size"]),
        rope_theta=float(hf.get("rope_theta", 10000.0)),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_seq_len=int(hf.get("max_position_embeddings", 4096)),
        n_attn_heads=int(hf["num_attention_heads"]), q_lora_rank=int(hf.get("q_lora_rank") or 0),
        kv_lora_rank=int(hf["kv_lora_rank"]), qk_nope_head_dim=int(hf["qk_nope_head_dim"]),
        qk_rope_head_dim=int(hf["qk_rope_head_dim"]), v_head_dim=int(hf["v_head_dim"]),
        yarn=yarn, n_mtp_layers=int(hf.get("num_nextn_predict_layers", 0)), source=source)
