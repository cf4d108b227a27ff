"""Named LLM configs with published shapes, plus tiny variants for tests.

``build_llm(name, ...)`` returns ONE layer of the model (the unit the compiler lowers) and its
example inputs; ``build_lm(name, ...)`` the whole stack (embedding, layers, norm, LM head) —
used to count parameters. Real-shape configs are built on the ``meta`` device unless a device
is given, so no weights are allocated; tiny configs default to CPU with weights from ``seed``.

Sources (HF ``config.json``): meta-llama/Meta-Llama-3-8B, meta-llama/Meta-Llama-3-70B,
mistralai/Mixtral-8x7B-v0.1, deepseek-ai/DeepSeek-V3, state-spaces/mamba-130m and mamba-2.8b.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Union

import torch
from torch import nn

from tilewright.models.moe import MoELayer
from tilewright.models.ssm import MambaLayer
from tilewright.models.transformer import CausalLM, DecoderLayer, seeded_init_

__all__ = ["LlamaConfig", "MoEConfig", "MambaConfig", "LLMConfig", "LLM_CONFIGS", "get_config",
           "build_llm", "build_lm", "describe", "param_count"]

Phase = Literal["prefill", "decode"]


@dataclass(frozen=True)
class LlamaConfig:
    """Llama-style dense decoder (GQA attention + SwiGLU FFN). Widths in features."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ffn: int
    vocab_size: int
    rope_theta: float
    norm_eps: float = 1e-5
    max_seq_len: int = 8192
    """rotary table length = longest past + new tokens a layer accepts"""
    tie_embeddings: bool = False
    tiny: bool = False
    source: str = ""
    family: str = dataclasses.field(default="llama", init=False)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class MoEConfig:
    """MoE layer (see :class:`~tilewright.models.moe.MoELayer`) and, when ``n_heads`` is set, the
    Llama-style attention of the full decoder it sits in (Mixtral). ``n_heads=None`` means the
    model's attention is not modeled here (DeepSeek-V3 uses MLA), so no full-model count."""

    name: str
    d_model: int
    n_layers: int
    n_experts: int
    top_k: int
    d_expert_ffn: int
    n_shared_experts: int = 0
    router_score: Literal["softmax", "sigmoid"] = "softmax"
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0
    n_group: int = 1
    topk_group: int = 1
    n_dense_layers: int = 0
    """leading layers with a dense FFN instead of MoE (DeepSeek-V3 ``first_k_dense_replace``)"""
    d_dense_ffn: int = 0
    n_heads: int | None = None
    n_kv_heads: int | None = None
    vocab_size: int | None = None
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 8192
    tiny: bool = False
    source: str = ""
    family: str = dataclasses.field(default="moe", init=False)

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers


@dataclass(frozen=True)
class MambaConfig:
    """Mamba v1 LM: ``n_layers`` residual Mamba layers, tied embeddings, vocab padded up to a
    multiple of ``pad_vocab_size_multiple``."""

    name: str
    d_model: int
    n_layers: int
    vocab_size: int
    d_state: int = 16
    expand: int = 2
    d_conv: int = 4
    dt_rank: int | None = None
    """None = ceil(d_model / 16)"""
    pad_vocab_size_multiple: int = 8
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    tiny: bool = False
    source: str = ""
    family: str = dataclasses.field(default="mamba", init=False)

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def rank(self) -> int:
        return math.ceil(self.d_model / 16) if self.dt_rank is None else self.dt_rank

    @property
    def padded_vocab(self) -> int:
        m = self.pad_vocab_size_multiple
        return -(-self.vocab_size // m) * m


LLMConfig = Union[LlamaConfig, MoEConfig, MambaConfig]

_HF = "https://huggingface.co/"
LLM_CONFIGS: dict[str, LLMConfig] = {c.name: c for c in (
    LlamaConfig("llama3-8b", d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ffn=14336,
                vocab_size=128256, rope_theta=500000.0,
                source=_HF + "meta-llama/Meta-Llama-3-8B/blob/main/config.json"),
    LlamaConfig("llama3-70b", d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ffn=28672,
                vocab_size=128256, rope_theta=500000.0,
                source=_HF + "meta-llama/Meta-Llama-3-70B/blob/main/config.json"),
    LlamaConfig("tiny-llama", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ffn=128,
                vocab_size=256, rope_theta=10000.0, max_seq_len=256, tiny=True),
    MoEConfig("mixtral-8x7b", d_model=4096, n_layers=32, n_experts=8, top_k=2,
              d_expert_ffn=14336, n_heads=32, n_kv_heads=8, vocab_size=32000,
              rope_theta=1e6, max_seq_len=32768,
              source=_HF + "mistralai/Mixtral-8x7B-v0.1/blob/main/config.json"),
    MoEConfig("deepseek-v3", d_model=7168, n_layers=61, n_experts=256, top_k=8,
              d_expert_ffn=2048, n_shared_experts=1, router_score="sigmoid",
              norm_topk_prob=True, routed_scaling_factor=2.5, n_group=8, topk_group=4,
              n_dense_layers=3, d_dense_ffn=18432, vocab_size=129280, norm_eps=1e-6,
              source=_HF + "deepseek-ai/DeepSeek-V3/blob/main/config.json"),
    MoEConfig("tiny-moe", d_model=64, n_layers=2, n_experts=4, top_k=2, d_expert_ffn=128,
              n_shared_experts=1, n_heads=4, n_kv_heads=2, vocab_size=256, max_seq_len=256,
              tiny=True),
    MoEConfig("tiny-moe-sigmoid", d_model=64, n_layers=2, n_experts=8, top_k=2,
              d_expert_ffn=32, n_shared_experts=1, router_score="sigmoid",
              routed_scaling_factor=2.5, n_group=4, topk_group=2, tiny=True),
    MambaConfig("mamba-130m", d_model=768, n_layers=24, vocab_size=50277,
                source=_HF + "state-spaces/mamba-130m/blob/main/config.json"),
    MambaConfig("mamba-2.8b", d_model=2560, n_layers=64, vocab_size=50277,
                source=_HF + "state-spaces/mamba-2.8b/blob/main/config.json"),
    MambaConfig("tiny-mamba", d_model=64, n_layers=2, vocab_size=256, d_state=8, tiny=True),
)}


def get_config(name: str) -> LLMConfig:
    """The config called ``name``; ValueError listing the known names otherwise."""
    if name not in LLM_CONFIGS:
        raise ValueError(f"unknown LLM config {name!r}; known: {', '.join(sorted(LLM_CONFIGS))}")
    return LLM_CONFIGS[name]


# ---- module construction ------------------------------------------------------------------------
def _moe_layer(cfg: MoEConfig) -> MoELayer:
    return MoELayer(cfg.d_model, cfg.n_experts, cfg.top_k, cfg.d_expert_ffn,
                    n_shared_experts=cfg.n_shared_experts, router_score=cfg.router_score,
                    norm_topk_prob=cfg.norm_topk_prob,
                    routed_scaling_factor=cfg.routed_scaling_factor,
                    n_group=cfg.n_group, topk_group=cfg.topk_group)


def _layer(cfg: LLMConfig) -> nn.Module:
    """One layer: DecoderLayer (llama), MoELayer (moe), MambaLayer (mamba)."""
    if isinstance(cfg, LlamaConfig):
        return DecoderLayer(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ffn,
                            rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps,
                            max_seq_len=cfg.max_seq_len)
    if isinstance(cfg, MoEConfig):
        return _moe_layer(cfg)
    return MambaLayer(cfg.d_model, norm_eps=cfg.norm_eps, d_state=cfg.d_state,
                      expand=cfg.expand, d_conv=cfg.d_conv, dt_rank=cfg.dt_rank)


def _resolve_device(cfg: LLMConfig, device: torch.device | str | None) -> torch.device:
    return torch.device(device if device is not None else ("cpu" if cfg.tiny else "meta"))


def build_llm(name: str, *, seed: int = 0, seq: int = 8, batch: int = 1,
              phase: Phase = "prefill", device: torch.device | str | None = None
              ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """One layer of config ``name`` in eval mode and example inputs for ``phase``.

    * llama — :class:`DecoderLayer`; prefill inputs ``(x [batch, seq, D],)``; decode inputs
      ``(x [batch, 1, D], k_cache, v_cache [batch, Hkv, seq, hd])`` (``seq`` cached tokens).
    * moe — :class:`MoELayer`; inputs ``(x [batch, seq, D],)`` (decode: seq 1).
    * mamba — :class:`MambaLayer`; prefill ``(x [batch, seq, D],)``; decode
      ``(x [batch, 1, D], conv_state [batch, Di, d_conv], ssm_state [batch, Di, d_state])``.

    ``device`` None means CPU for tiny configs, ``meta`` (no storage) for real-shape ones; pass
    ``device="cpu"`` to materialize a big one. Weights come from ``seed``
    (:func:`seeded_init_`), example inputs from N(0, 1) with a generator seeded by ``seed + 1``.
    The module gets ``config_name = name``.
    """
    cfg = get_config(name)
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase must be 'prefill' or 'decode', got {phase!r}")
    if seq < 1 or batch < 1:
        raise ValueError(f"seq and batch must be >= 1, got seq={seq}, batch={batch}")
    dev = _resolve_device(cfg, device)
    with torch.device(dev):
        module = _layer(cfg)
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
    if isinstance(cfg, LlamaConfig):
        kv = (batch, cfg.n_kv_heads, seq, cfg.head_dim)
        return module, (rand(batch, 1, d), rand(*kv), rand(*kv))
    if isinstance(cfg, MoEConfig):
        return module, (rand(batch, 1, d),)
    return module, (rand(batch, 1, d), rand(batch, cfg.d_inner, cfg.d_conv),
                    rand(batch, cfg.d_inner, cfg.d_state))


def build_lm(name: str, *, seed: int = 0, device: torch.device | str | None = None) -> CausalLM:
    """The full model (embedding, all layers, final norm, LM head) for ``name``; ``meta`` device
    by default for real-shape configs. DeepSeek-V3 raises ValueError (its MLA attention is not
    modeled). Only the tiny configs are practical to materialize."""
    cfg = get_config(name)
    if isinstance(cfg, MoEConfig) and cfg.n_heads is None:
        raise ValueError(f"{name}: the attention of this model is not modeled "
                         "(DeepSeek-V3 uses MLA); "
                         "only its MoE layer is available from build_llm")
    dev = _resolve_device(cfg, device)
    if isinstance(cfg, MoEConfig):
        def make() -> nn.Module:
            return DecoderLayer(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_expert_ffn,
                                rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps,
                                max_seq_len=cfg.max_seq_len, ffn=_moe_layer(cfg))
        vocab, tie = cfg.vocab_size, False
    else:
        def make() -> nn.Module:
            return _layer(cfg)
        vocab = cfg.padded_vocab if isinstance(cfg, MambaConfig) else cfg.vocab_size
        tie = cfg.tie_embeddings
    with torch.device(dev):
        lm = CausalLM(vocab, cfg.d_model, cfg.n_layers, make, norm_eps=cfg.norm_eps,
                      tie_embeddings=tie)
    seeded_init_(lm, seed).eval()
    lm.config_name = name
    return lm


# ---- analytic shapes and counts -----------------------------------------------------------------
def _swiglu(d: int, f: int) -> int:
    return 3 * d * f


def _attention(d: int, h: int, hkv: int, hd: int) -> int:
    return 2 * d * h * hd + 2 * d * hkv * hd


def param_count(name: str) -> dict[str, int | None]:
    """Parameter counts computed from the config by formula (independent of the modules):

    ``layer`` (one layer as built by :func:`build_llm`), ``total`` (full model incl. embedding
    and LM head; None if not modeled), ``active`` (parameters touched per token: for MoE only the
    top-k routed experts count; None if not modeled).
    """
    cfg = get_config(name)
    d = cfg.d_model
    if isinstance(cfg, LlamaConfig):
        layer = _attention(d, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim) \
            + _swiglu(d, cfg.d_ffn) + 2 * d
        emb = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
        total = cfg.n_layers * layer + emb + d
        return {"layer": layer, "total": total, "active": total}
    if isinstance(cfg, MoEConfig):
        expert = _swiglu(d, cfg.d_expert_ffn)
        moe = d * cfg.n_experts + cfg.n_experts * expert \
            + _swiglu(d, cfg.n_shared_experts * cfg.d_expert_ffn)
        if cfg.n_heads is None:
            return {"layer": moe, "total": None, "active": None}
        hd = d // cfg.n_heads
        layer_total = _attention(d, cfg.n_heads, cfg.n_kv_heads, hd) + moe + 2 * d
        emb = 2 * cfg.vocab_size * d
        total = cfg.n_layers * layer_total + emb + d
        active = total - cfg.n_layers * (cfg.n_experts - cfg.top_k) * expert
        return {"layer": moe, "total": total, "active": active}
    di, n, r = cfg.d_inner, cfg.d_state, cfg.rank
    layer = (d * 2 * di + di * cfg.d_conv + di + di * (r + 2 * n) + r * di + di
             + di * n + di + di * d + d)
    total = cfg.n_layers * layer + cfg.padded_vocab * d * (1 if cfg.tie_embeddings else 2) + d
    return {"layer": layer, "total": total, "active": total}


def describe(name: str) -> dict:
    """Shapes of config ``name`` as a plain dict: the config fields, derived sizes, every
    parameter of one layer (name -> shape, from a meta-device build) and :func:`param_count`."""
    cfg = get_config(name)
    module, _ = build_llm(name, device="meta")
    out: dict = {"name": name, "family": cfg.family, "config": dataclasses.asdict(cfg)}
    if isinstance(cfg, LlamaConfig):
        out["derived"] = {"head_dim": cfg.head_dim, "kv_groups": cfg.n_heads // cfg.n_kv_heads,
                          "kv_cache_per_token_per_layer": 2 * cfg.n_kv_heads * cfg.head_dim}
    elif isinstance(cfg, MoEConfig):
        out["derived"] = {"n_moe_layers": cfg.n_moe_layers,
                          "d_shared_ffn": cfg.n_shared_experts * cfg.d_expert_ffn,
                          "expert_params": _swiglu(cfg.d_model, cfg.d_expert_ffn)}
    else:
        out["derived"] = {"d_inner": cfg.d_inner, "dt_rank": cfg.rank,
                          "padded_vocab": cfg.padded_vocab}
    out["layer_param_shapes"] = {k: tuple(p.shape) for k, p in module.named_parameters()}
    out["params"] = param_count(name)
    return out
