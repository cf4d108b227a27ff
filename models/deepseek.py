"""DeepSeek-V2/V3 decoder (MLA attention + dense or MoE FFN) and whole model, from a
:class:`~tilewright.models.llm_shapes.DeepSeekConfig` or from a Hugging Face ``config.json``.

Layer ``i`` (pre-norm): ``h = x + MLA(RMSNorm(x))``; ``y = h + FFN(RMSNorm(h))`` with FFN a dense
SwiGLU of ``d_dense_ffn`` for ``i < n_dense_layers`` (HF ``first_k_dense_replace``), else the
:class:`~tilewright.models.moe.MoELayer` (shared experts, sigmoid group-limited routing).
The model: token embedding -> layers -> RMSNorm -> LM head (untied). The multi-token-prediction
module is not built (it is not part of the main model; its size: ``param_count(...)["mtp"]``).

Sources: DeepSeek-V3 technical report (arXiv 2412.19437) and DeepSeek's public
``inference/model.py``; HF ``deepseek-ai/DeepSeek-V3/config.json`` for the field names.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from tilewright.models.deepseek_config import deepseek_config_from_hf
from tilewright.models.llm_shapes import DeepSeekConfig, ModelInputError, YarnScaling
from tilewright.models.mla import MLAttention
from tilewright.models.moe import MoELayer
from tilewright.models.transformer import CausalLM, RMSNorm, SwiGLU, seeded_init_

__all__ = ["DeepSeekDecoderLayer", "mla_of", "deepseek_config_from_hf", "build_deepseek_lm",
           "build_deepseek_v3"]


def mla_of(cfg: DeepSeekConfig) -> MLAttention:
    """The MLA module of ``cfg`` (on the current default device)."""
    return MLAttention(cfg.d_model, cfg.n_attn_heads, q_lora_rank=cfg.q_lora_rank,
                       kv_lora_rank=cfg.kv_lora_rank, qk_nope_head_dim=cfg.qk_nope_head_dim,
                       qk_rope_head_dim=cfg.qk_rope_head_dim, v_head_dim=cfg.v_head_dim,
                       rope_theta=cfg.rope_theta, max_seq_len=cfg.max_seq_len,
                       norm_eps=cfg.norm_eps, yarn=cfg.yarn)


class DeepSeekDecoderLayer(nn.Module):
    """One DeepSeek decoder layer (module doc); ``dense`` picks the dense FFN.

    Prefill ``layer(x)``; decode ``layer(x, c_kv, k_pe)`` (latent cache, see
    :class:`~tilewright.models.mla.MLAttention`); both return
    ``(y [B, S, D], c_kv [B, T+S, r], k_pe [B, T+S, dr])``.
    """

    def __init__(self, cfg: DeepSeekConfig, *, dense: bool) -> None:
        super().__init__()
        d = cfg.d_model
        self.attn_norm = RMSNorm(d, eps=cfg.norm_eps)
        self.attn = mla_of(cfg)
        self.ffn_norm = RMSNorm(d, eps=cfg.norm_eps)
        if dense:
            self.ffn: nn.Module = SwiGLU(d, cfg.d_dense_ffn)
        else:
            self.ffn = MoELayer(d, cfg.n_experts, cfg.top_k, cfg.d_expert_ffn,
                                n_shared_experts=cfg.n_shared_experts,
                                router_score=cfg.router_score, norm_topk_prob=cfg.norm_topk_prob,
                                routed_scaling_factor=cfg.routed_scaling_factor,
                                n_group=cfg.n_group, topk_group=cfg.topk_group)

    def forward(self, x: Tensor, c_kv: Tensor | None = None, k_pe: Tensor | None = None
                ) -> tuple[Tensor, Tensor, Tensor]:
        a, c_kv, k_pe = self.attn(self.attn_norm(x), c_kv, k_pe)
        h = x + a
        f = self.ffn(self.ffn_norm(h))
        if isinstance(f, tuple):
            f = f[0]
        return h + f, c_kv, k_pe


def build_deepseek_lm(cfg: DeepSeekConfig, *, seed: int = 0,
                      device: torch.device | str | None = None) -> CausalLM:
    """The whole model of ``cfg`` (``meta`` device by default unless ``cfg.tiny``), weights from
    ``seed`` (:func:`~tilewright.models.transformer.seeded_init_`)."""
    dev = torch.device(device if device is not None else ("cpu" if cfg.tiny else "meta"))
    index = iter(range(cfg.n_layers))

    def make() -> nn.Module:
        return DeepSeekDecoderLayer(cfg, dense=next(index) < cfg.n_dense_layers)

    with torch.device(dev):
        lm = CausalLM(cfg.vocab_size, cfg.d_model, cfg.n_layers, make, norm_eps=cfg.norm_eps)
    seeded_init_(lm, seed).eval()
    lm.config_name = cfg.name
    return lm


def build_deepseek_v3(hf_config: dict[str, Any], *, name: str = "deepseek-v3-hf",
                      seed: int = 0, device: torch.device | str | None = None
                      ) -> tuple[DeepSeekConfig, CausalLM]:
    """``(config, whole model)`` from a parsed ``config.json`` dict (the HF-config registry's
    entry point for ``DeepseekV3ForCausalLM``); ``meta`` device unless ``device`` is given."""
    cfg = deepseek_config_from_hf(hf_config, name=name)
    return cfg, build_deepseek_lm(cfg, seed=seed, device=device or "meta")
