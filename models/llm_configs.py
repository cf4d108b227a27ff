"""Named LLM configs (shapes: :mod:`tilewright.models.llm_shapes`, re-exported here) built as
torch modules.

``build_llm(name, ...)`` returns ONE layer of the model (the unit the compiler lowers) and its
example inputs; ``build_lm(name, ...)`` the whole stack (embedding, layers, norm, LM head) —
used to count parameters. Real-shape configs are built on the ``meta`` device unless a device
is given, so no weights are allocated; tiny configs default to CPU with weights from ``seed``.

Sources (HF ``config.json``): meta-llama/Meta-Llama-3-8B, meta-llama/Meta-Llama-3-70B,
mistralai/Mixtral-8x7B-v0.1, deepseek-ai/DeepSeek-V3, state-spaces/mamba-130m and mamba-2.8b.
"""

from __future__ import annotations

import dataclasses
import os

import torch
from torch import nn

from tilewright.models.deepseek import DeepSeekDecoderLayer, build_deepseek_lm
from tilewright.models.hybrid import HybridLayer
from tilewright.models.llm_shapes import (LLM_CONFIGS, DeepSeekConfig, HybridConfig, LLMConfig,
                                         LlamaConfig, Mamba2Config, MambaConfig,
                                         ModelInputError, MoEConfig, Phase, _swiglu, get_config,
                                         layer_kinds, param_count)
from tilewright.models.moe import MoELayer
from tilewright.models.ssm import MambaLayer
from tilewright.models.ssm2 import Mamba2Layer
from tilewright.models.transformer import CausalLM, DecoderLayer, seeded_init_

__all__ = ["ModelInputError", "LlamaConfig", "MoEConfig", "MambaConfig", "LLMConfig", "LLM_CONFIGS", "get_config",
           "build_llm", "build_lm", "describe", "param_count", "has_attention", "count_params"]


# ---- module construction ------------------------------------------------------------------------
def _moe_layer(cfg: MoEConfig) -> MoELayer:
    return MoELayer(cfg.d_model, cfg.n_experts, cfg.top_k, cfg.d_expert_ffn,
                    n_shared_experts=cfg.n_shared_experts, router_score=cfg.router_score,
                    norm_topk_prob=cfg.norm_topk_prob,
                    routed_scaling_factor=cfg.routed_scaling_factor,
                    n_group=cfg.n_group, topk_group=cfg.topk_group,
                    d_shared_ffn=cfg.d_shared_ffn, shared_expert_gate=cfg.shared_expert_gate)


def _decoder(cfg: LlamaConfig | MoEConfig, ffn: nn.Module | None = None) -> DecoderLayer:
    """The attention decoder layer of ``cfg`` (SwiGLU FFN, or ``ffn``) with every attention
    field the config sets (head_dim, biases, q/k norm, rope scaling)."""
    return DecoderLayer(cfg.d_model, cfg.n_heads, cfg.n_kv_heads,
                        cfg.d_ffn if isinstance(cfg, LlamaConfig) else cfg.d_expert_ffn,
                        rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps,
                        max_seq_len=cfg.max_seq_len, ffn=ffn, mlp_bias=cfg.mlp_bias,
                        head_dim=cfg.head_dim, qkv_bias=cfg.qkv_bias, o_bias=cfg.o_bias,
                        qk_norm=cfg.qk_norm, rope_scaling=cfg.rope_scaling)


def has_attention(cfg: LLMConfig) -> bool:
    """True when a layer of ``cfg`` as built here has its attention (Llama; MoE with
    ``n_heads``): its decode inputs carry a KV cache."""
    return isinstance(cfg, LlamaConfig) or (isinstance(cfg, MoEConfig) and cfg.n_heads is not None)


def _hybrid_layer(cfg: HybridConfig, kind: str) -> HybridLayer:
    mixer, ffn = kind.split("-")
    return HybridLayer(cfg.d_model, mixer, ffn, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads,
                       d_ffn=cfg.d_ffn, n_experts=cfg.n_experts, top_k=cfg.top_k,
                       max_seq_len=cfg.max_seq_len, d_state=cfg.d_state, d_conv=cfg.d_conv,
                       expand=cfg.expand, dt_rank=cfg.dt_rank, norm_eps=cfg.norm_eps)


def _layer(cfg: LLMConfig, kind: str | None = None, dense: bool = False) -> nn.Module:
    """One layer: DecoderLayer (llama; MoE with attention: its FFN is the MoE layer),
    DeepSeekDecoderLayer (DeepSeek: MLA + MoE FFN, the kind of all but the first
    ``n_dense_layers`` layers; ``dense``: one of those), MoELayer (MoE whose attention is not
    modeled), HybridLayer (Jamba: of ``kind``), Mamba2Layer, MambaLayer (mamba)."""
    if isinstance(cfg, DeepSeekConfig):
        return DeepSeekDecoderLayer(cfg, dense=dense)
    if isinstance(cfg, HybridConfig):
        return _hybrid_layer(cfg, kind or cfg.kind(0))
    if isinstance(cfg, LlamaConfig):
        return _decoder(cfg)
    if isinstance(cfg, MoEConfig):
        return _decoder(cfg, _moe_layer(cfg)) if cfg.n_heads is not None else _moe_layer(cfg)
    if isinstance(cfg, Mamba2Config):
        return Mamba2Layer(cfg.d_model, norm_eps=cfg.norm_eps, d_state=cfg.d_state,
                           expand=cfg.expand, d_conv=cfg.d_conv, head_dim=cfg.head_dim,
                           n_groups=cfg.n_groups, bias=cfg.proj_bias, conv_bias=cfg.conv_bias)
    return MambaLayer(cfg.d_model, norm_eps=cfg.norm_eps, d_state=cfg.d_state,
                      expand=cfg.expand, d_conv=cfg.d_conv, dt_rank=cfg.dt_rank)


def _resolve_device(cfg: LLMConfig, device: torch.device | str | None) -> torch.device:
    return torch.device(device if device is not None else ("cpu" if cfg.tiny else "meta"))


#: the most elements of a materialized (CPU) model's example inputs (1 GiB of fp32): --batch 1e11
#: asked torch for 200 TB
MAX_INPUT_ELEMENTS = 1 << 28

#: working-set bytes per example-input byte assumed when a layer with real storage is traced (the
#: activations torch.export and the functional run keep alive): a refusal threshold, not a model
WORKING_SET_FACTOR = 32


def _check_fits_in_memory(name: str, cfg: LLMConfig, seq: int, batch: int) -> None:
    """Refuse, before anything is allocated, a layer with real storage whose example input
    (``batch x seq x d_model`` fp32) times :data:`WORKING_SET_FACTOR` exceeds this machine's
    physical memory, naming both figures."""
    need = batch * seq * cfg.d_model * 4 * WORKING_SET_FACTOR
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if need > have:
        raise ModelInputError(
            f"{name}: --seq {seq} x --batch {batch} needs about {need / 2**30:,.0f} GiB to run "
            f"(x [batch, seq, d_model={cfg.d_model}] fp32 x {WORKING_SET_FACTOR}); this machine "
            f"has {have / 2**30:,.0f} GiB")


def build_llm(name: str, *, seed: int = 0, seq: int = 8, batch: int = 1,
              phase: Phase = "prefill", device: torch.device | str | None = None,
              kind: str | None = None, dense: bool = False
              ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """One layer of config ``name`` in eval mode and example inputs for ``phase``.

    * llama — :class:`DecoderLayer`; prefill inputs ``(x [batch, seq, D],)``; decode inputs
      ``(x [batch, 1, D], k_cache, v_cache [batch, Hkv, seq - 1, hd])``: ``seq`` is the context
      (positions attended, as for prefill): ``seq - 1`` cached tokens and the new one at position
      ``seq - 1`` (``seq = 1``: no cache). Both phases accept ``seq <= max_seq_len``.
    * deepseek (MLA) — :class:`~tilewright.models.deepseek.DeepSeekDecoderLayer` (MLA + MoE
      FFN); prefill ``(x [batch, seq, D],)`` (naive MLA); decode ``(x [batch, 1, D],
      c_kv [batch, seq - 1, kv_lora_rank], k_pe [batch, seq - 1, qk_rope_head_dim])`` (absorbed
      MLA over the latent cache; ``seq = 1``: ``(x,)`` alone, naive).
    * moe with attention (Mixtral, Qwen2-MoE) — :class:`DecoderLayer` whose FFN is the
      :class:`MoELayer`; inputs as llama.
    * moe without attention — :class:`MoELayer`; inputs ``(x [batch, seq, D],)`` (decode: seq 1).
    * mamba — :class:`MambaLayer`; prefill ``(x [batch, seq, D],)``; decode
      ``(x [batch, 1, D], conv_state [batch, Di, d_conv], ssm_state [batch, Di, d_state])``.
    * mamba2 — :class:`~tilewright.models.ssm2.Mamba2Layer`; as mamba with conv_state
      ``[batch, Di + 2 G N, d_conv]``.
    * hybrid (Jamba) — the :class:`~tilewright.models.hybrid.HybridLayer` of ``kind`` (one of
      :func:`~tilewright.models.llm_shapes.layer_kinds`; default layer 0's); decode inputs of
      an attention kind as llama, of a Mamba kind as mamba. Other configs refuse ``kind``
      other than None or ``"layer"``.

    ``device`` None means CPU for tiny configs, ``meta`` (no storage) for real-shape ones; pass
    ``device="cpu"`` to materialize a big one. Weights come from ``seed``
    (:func:`seeded_init_`), example inputs from N(0, 1) with a generator seeded by ``seed + 1``.
    The module gets ``config_name = name``. ``dense`` (DeepSeek configs only): one of the first
    ``n_dense_layers`` layers (dense SwiGLU FFN) instead of an MoE one.
    """
    cfg = get_config(name)
    if dense and not (isinstance(cfg, DeepSeekConfig) and cfg.n_dense_layers):
        raise ModelInputError(f"{name}: has no dense-FFN layers (dense=True is for DeepSeek "
                              "configs with n_dense_layers > 0)")
    kinds = layer_kinds(cfg)
    if kind not in (None, *kinds):
        raise ModelInputError(f"{name}: layer kind {kind!r}; this config has "
                              f"{', '.join(kinds)}")
    if kind == "layer":
        kind = None
    if phase not in ("prefill", "decode"):
        raise ModelInputError(f"phase must be 'prefill' or 'decode', got {phase!r}")
    if seq < 1 or batch < 1:
        raise ModelInputError(f"seq and batch must be >= 1, got seq={seq}, batch={batch}")
    context = getattr(cfg, "max_seq_len", None)
    need = seq      # positions: prefill seq prompt tokens; decode seq - 1 cached + 1 new token
    what = 'context: seq - 1 cached + 1 new token' if phase == 'decode' else 'prompt tokens'
    if context is not None and need > context:          # before any tensor is allocated
        raise ModelInputError(
            f"{name}: --seq {seq} needs {need} positions ({what}); the config's context is "
            f"max_seq_len = {context}")
    window = getattr(cfg, "sliding_window", None)
    if window is not None and need > window:     # full causal attention = the window within it
        raise ModelInputError(
            f"{name}: --seq {seq} needs {need} positions ({what}); the config's sliding_window "
            f"is {window} and attention beyond a window is not modeled (accepted: --seq <= "
            f"{window})")
    dev = _resolve_device(cfg, device)
    if dev.type != "meta":                                 # before any tensor is allocated
        _check_fits_in_memory(name, cfg, seq, batch)
    elems = batch * max(need, 64) * 2 * cfg.d_model       # bounds every example input's size
    if dev.type != "meta" and elems > MAX_INPUT_ELEMENTS:
        raise ModelInputError(
            f"{name}: --batch {batch} x --seq {seq}: inputs of up to {elems:,} elements; a model "
            f"run with real tensors takes at most {MAX_INPUT_ELEMENTS:,} (lower --batch)")
    with torch.device(dev):
        module = _layer(cfg, kind, dense)
    seeded_init_(module, seed).eval()
    module.config_name = name
    gen = torch.Generator().manual_seed(seed + 1)

    def rand(*shape: int) -> torch.Tensor:
        if dev.type == "meta":
            return torch.empty(shape, device=dev)
        return torch.randn(shape, generator=gen).to(dev)

    d = cfg.d_model
    if phase == "prefill":
        return module, (rand(batch, seq, d),)
    if isinstance(cfg, HybridConfig) and module.kind.startswith("mamba"):
        return module, (rand(batch, 1, d), rand(batch, cfg.d_inner, cfg.d_conv),
                        rand(batch, cfg.d_inner, cfg.d_state))
    if has_attention(cfg) or isinstance(cfg, HybridConfig):
        if seq == 1:                                # context 1: the new token alone, no cache
            return module, (rand(batch, 1, d),)
        kv = (batch, cfg.n_kv_heads, seq - 1, cfg.head_dim)
        return module, (rand(batch, 1, d), rand(*kv), rand(*kv))
    if isinstance(cfg, DeepSeekConfig):
        if seq == 1:
            return module, (rand(batch, 1, d),)
        return module, (rand(batch, 1, d), rand(batch, seq - 1, cfg.kv_lora_rank),
                        rand(batch, seq - 1, cfg.qk_rope_head_dim))
    if isinstance(cfg, MoEConfig):
        return module, (rand(batch, 1, d),)
    if isinstance(cfg, Mamba2Config):
        return module, (rand(batch, 1, d), rand(batch, cfg.conv_dim, cfg.d_conv),
                        rand(batch, cfg.d_inner, cfg.d_state))
    return module, (rand(batch, 1, d), rand(batch, cfg.d_inner, cfg.d_conv),
                    rand(batch, cfg.d_inner, cfg.d_state))


def build_lm(name: str, *, seed: int = 0, device: torch.device | str | None = None) -> CausalLM:
    """The full model (embedding, all layers, final norm, LM head) for ``name``; ``meta`` device
    by default for real-shape configs (DeepSeek:
    :func:`~tilewright.models.deepseek.build_deepseek_lm`, dense FFN in the first
    ``n_dense_layers``). An MoE config without attention raises
    ValueError. Only the tiny configs are practical to materialize."""
    cfg = get_config(name)
    if isinstance(cfg, DeepSeekConfig):
        return build_deepseek_lm(cfg, seed=seed, device=device)
    if isinstance(cfg, MoEConfig) and cfg.n_heads is None:
        raise ValueError(f"{name}: the attention of this model is not modeled "
                         "(DeepSeek-V3 uses MLA); "
                         "only its MoE layer is available from build_llm")
    dev = _resolve_device(cfg, device)
    index = iter(range(cfg.n_layers))

    def make() -> nn.Module:
        i = next(index)
        return _layer(cfg, cfg.kind(i) if isinstance(cfg, HybridConfig) else None)
    vocab = cfg.padded_vocab if isinstance(cfg, (MambaConfig, Mamba2Config)) else cfg.vocab_size
    tie = cfg.tie_embeddings
    with torch.device(dev):
        lm = CausalLM(vocab, cfg.d_model, cfg.n_layers, make, norm_eps=cfg.norm_eps,
                      tie_embeddings=tie)
    seeded_init_(lm, seed).eval()
    lm.config_name = name
    return lm


def count_params(name: str) -> dict[str, int]:
    """``total`` and ``active`` parameters of the whole model counted on its meta-device build
    (:func:`build_lm`; a tied LM head is counted once): ``active`` leaves out, per MoE layer, the
    ``n_experts - top_k`` routed experts a token does not use. DeepSeek-V3 raises as
    :func:`build_lm`."""
    lm = build_lm(name, device="meta")
    total = sum(p.numel() for p in lm.parameters())
    inactive = 0
    for m in lm.modules():
        if isinstance(m, MoELayer):
            per_expert = (m.w_gate.numel() + m.w_up.numel() + m.w_down.numel()) // m.n_experts
            inactive += (m.n_experts - m.top_k) * per_expert
    return {"total": int(total), "active": int(total - inactive)}


def describe(name: str) -> dict:
    """Shapes of config ``name`` as a plain dict: the config fields, derived sizes, every
    parameter of one layer (name -> shape, from a meta-device build) and :func:`param_count`."""
    cfg = get_config(name)
    module, _ = build_llm(name, device="meta")
    out: dict = {"name": name, "family": cfg.family, "config": dataclasses.asdict(cfg)}
    if isinstance(cfg, LlamaConfig):
        out["derived"] = {"head_dim": cfg.head_dim, "kv_groups": cfg.n_heads // cfg.n_kv_heads,
                          "kv_cache_per_token_per_layer": 2 * cfg.n_kv_heads * cfg.head_dim}
    elif isinstance(cfg, DeepSeekConfig):
        out["derived"] = {"n_moe_layers": cfg.n_moe_layers,
                          "d_shared_ffn": cfg.n_shared_experts * cfg.d_expert_ffn,
                          "expert_params": _swiglu(cfg.d_model, cfg.d_expert_ffn),
                          "qk_head_dim": cfg.qk_nope_head_dim + cfg.qk_rope_head_dim,
                          "kv_cache_per_token_per_layer": cfg.kv_cache_elems_per_token}
    elif isinstance(cfg, MoEConfig):
        out["derived"] = {"n_moe_layers": cfg.n_moe_layers,
                          "d_shared_ffn": cfg.shared_width,
                          "expert_params": _swiglu(cfg.d_model, cfg.d_expert_ffn)}
    elif isinstance(cfg, MambaConfig):
        out["derived"] = {"d_inner": cfg.d_inner, "dt_rank": cfg.rank,
                          "padded_vocab": cfg.padded_vocab}
    else:
        out["derived"] = {"layer_kinds": layer_kinds(cfg)}
    out["layer_param_shapes"] = {k: tuple(p.shape) for k, p in module.named_parameters()}
    out["params"] = param_count(name)
    return out
