"""Hugging Face ``config.json`` -> the project's config dataclasses (torch-free).

``load_hf_config(path)`` reads a ``config.json`` (or a folder holding one) and returns a
:class:`~tilewright.models.llm_shapes.LlamaConfig` / ``MoEConfig`` / ``MambaConfig`` named by the
path. Only the configuration is read: no network, no weights (the modules are built on the meta
device by :mod:`tilewright.models.llm_configs`).

One architecture is one entry of :data:`ARCHITECTURES` (``"LlamaForCausalLM"`` -> builder); a
builder reads fields through :class:`Fields`, which refuses by name a missing field, a field of
the wrong type, and — after the builder ran — any field the config sets that the builder did not
read and that is not in :data:`NO_EFFECT` (fields with no effect on shapes or costs: token ids,
dtype, dropout, initialisation). So every field is honoured or refused, never silently ignored.
Errors are :class:`HFConfigError` (a user error: one line, exit 2 through the CLI).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tilewright.models.deepseek_config as _deepseek  # a module: circular with llm_shapes
from tilewright.models.llm_shapes import (HybridConfig, LlamaConfig, LLMConfig, Mamba2Config,
                                         MambaConfig, ModelInputError, MoEConfig)

__all__ = ["HFConfigError", "ARCHITECTURES", "NO_EFFECT", "Fields", "load_hf_config",
           "config_path", "looks_like_config"]


class HFConfigError(ModelInputError):
    """A ``config.json`` the builders cannot take; the message names the file and the field."""


#: fields that change neither a shape nor a cost (token ids, dtype, dropout, initialisation,
#: training-only losses, bookkeeping): read by no builder, accepted everywhere
NO_EFFECT = frozenset({
    "architectures", "model_type", "_name_or_path", "transformers_version", "torch_dtype",
    "dtype", "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "initializer_range",
    "attention_dropout", "hidden_dropout", "output_router_logits", "router_aux_loss_coef",
    "router_jitter_noise", "pretraining_tp", "time_step_init_scheme", "time_step_floor",
    "time_step_min", "time_step_max", "time_step_scale", "rescale_prenorm_residual",
    "residual_in_fp32", "use_mambapy", "use_cache", "max_window_layers", "use_mrope",
    "tokenizer_class", "auto_map", "quantization_config", "layer_norm_epsilon_is_rms",
})


class Fields:
    """Typed access to one config's fields; remembers which were read (see module doc)."""

    def __init__(self, data: dict[str, Any], path: str, arch: str) -> None:
        self.data, self.path, self.arch = data, path, arch
        self.read: set[str] = set()

    def _check(self, key: str, value: Any, kind: type | tuple) -> Any:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if not ok:
            names = " or ".join(k.__name__ for k in kinds)
            raise HFConfigError(f"{self.path}: field {key!r} = {value!r} must be {names}")
        return value

    def need(self, key: str, kind: type | tuple = int) -> Any:
        """The value of required field ``key`` (of type ``kind``)."""
        self.read.add(key)
        if key not in self.data or self.data[key] is None:
            raise HFConfigError(f"{self.path}: {self.arch} needs field {key!r}")
        return self._check(key, self.data[key], kind)

    def get(self, key: str, kind: type | tuple, default: Any) -> Any:
        """Field ``key`` (of type ``kind``), ``default`` when absent or null."""
        self.read.add(key)
        if self.data.get(key) is None:
            return default
        return self._check(key, self.data[key], kind)

    def only(self, key: str, accepted: tuple, default: Any, why: str) -> Any:
        """Field ``key`` whose value must be one of ``accepted`` (else refused, ``why``)."""
        self.read.add(key)
        value = default if self.data.get(key) is None else self.data[key]
        if not any(value == a and type(value) is type(a) for a in accepted):
            raise HFConfigError(f"{self.path}: field {key!r} = {value!r} is not supported "
                                f"({why}; accepted: {', '.join(map(repr, accepted))})")
        return value

    def refuse_unread(self) -> None:
        """Refuse, by name, every field set that no builder read and that has an effect."""
        left = sorted(k for k, v in self.data.items()
                      if k not in self.read and k not in NO_EFFECT and v is not None)
        if left:
            raise HFConfigError(f"{self.path}: field(s) {', '.join(map(repr, left))} not "
                                f"supported for {self.arch} (not modeled; remove them or use a "
                                f"supported config)")


# ---- builders -----------------------------------------------------------------------------------
def _rope(f: Fields) -> tuple[float, dict | None]:
    theta = f.get("rope_theta", float, 10000.0)
    scaling = f.get("rope_scaling", dict, None)
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        need = {"linear": ("factor",),
                "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                           "original_max_position_embeddings")}
        if kind not in need:
            raise HFConfigError(f"{f.path}: field 'rope_scaling' rope_type {kind!r} is not "
                                f"supported (accepted: {', '.join(need)})")
        for k in need[kind]:
            if not isinstance(scaling.get(k), (int, float)) or isinstance(scaling.get(k), bool):
                raise HFConfigError(f"{f.path}: field 'rope_scaling.{k}' must be a number for "
                                    f"rope_type {kind!r}")
        scaling = {k: (v if isinstance(v, str) else float(v)) for k, v in scaling.items()}
    return theta, scaling


def _window(f: Fields, qwen: bool) -> int | None:
    """``sliding_window`` honoured (Mistral), or inert when Qwen's ``use_sliding_window`` is
    false; Qwen's per-layer mix (``use_sliding_window`` true) is refused."""
    if qwen:
        use = f.get("use_sliding_window", bool, False)
        f.read.add("sliding_window")
        if use:
            raise HFConfigError(f"{f.path}: field 'use_sliding_window' = true is not supported "
                                f"(Qwen's mix of windowed and full layers is not modeled; "
                                f"accepted: false)")
        return None
    return f.get("sliding_window", int, None)


def _attention_fields(f: Fields, arch: str) -> dict[str, Any]:
    """The attention and common fields of a Llama-family config (dense or MoE)."""
    f.only("hidden_act", ("silu",), "silu", "the FFN is SwiGLU")
    d, h = f.need("hidden_size"), f.need("num_attention_heads")
    theta, scaling = _rope(f)
    qwen = arch.startswith("Qwen")
    bias = f.get("attention_bias", bool, False)
    out = dict(d_model=d, n_layers=f.need("num_hidden_layers"), n_heads=h,
               n_kv_heads=f.get("num_key_value_heads", int, h),
               vocab_size=f.need("vocab_size"), rope_theta=theta, rope_scaling=scaling,
               norm_eps=f.get("rms_norm_eps", float, 1e-6 if qwen else 1e-5),
               max_seq_len=f.need("max_position_embeddings"),
               tie_embeddings=f.get("tie_word_embeddings", bool, False),
               d_head=f.get("head_dim", int, None), sliding_window=_window(f, qwen),
               qkv_bias=bias or arch in ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM"),
               o_bias=bias and arch in ("LlamaForCausalLM",),
               qk_norm=arch in ("Qwen3ForCausalLM",))
    if bias and arch not in ("LlamaForCausalLM", "Qwen3ForCausalLM"):
        raise HFConfigError(f"{f.path}: field 'attention_bias' = true is not supported for "
                            f"{arch} (accepted: false)")
    if arch == "Qwen3ForCausalLM":     # Qwen3's attention_bias covers q, k, v and o
        out["o_bias"] = bias
    if out["d_head"] is None and d % h:
        raise HFConfigError(f"{f.path}: field 'hidden_size' ({d}) must be a multiple of "
                            f"'num_attention_heads' ({h}) when 'head_dim' is not given")
    if h % out["n_kv_heads"]:
        raise HFConfigError(f"{f.path}: field 'num_attention_heads' ({h}) must be a multiple of "
                            f"'num_key_value_heads' ({out['n_kv_heads']})")
    return out


def _dense(f: Fields, name: str, arch: str) -> LlamaConfig:
    common = _attention_fields(f, arch)
    mlp_bias = f.get("mlp_bias", bool, False)
    if mlp_bias and arch != "LlamaForCausalLM":
        raise HFConfigError(f"{f.path}: field 'mlp_bias' is not supported for {arch}")
    return LlamaConfig(name, d_ffn=f.need("intermediate_size"), mlp_bias=mlp_bias, source=f.path,
                       **common)


def _mixtral(f: Fields, name: str, arch: str) -> MoEConfig:
    common = _attention_fields(f, arch)
    return MoEConfig(name, n_experts=f.need("num_local_experts"),
                     top_k=f.need("num_experts_per_tok"),
                     d_expert_ffn=f.need("intermediate_size"), norm_topk_prob=True,
                     source=f.path, **common)


def _qwen2_moe(f: Fields, name: str, arch: str) -> MoEConfig:
    common = _attention_fields(f, arch)
    if f.get("decoder_sparse_step", int, 1) != 1:
        raise HFConfigError(f"{f.path}: field 'decoder_sparse_step' must be 1 (every layer MoE; "
                            f"dense layers in between are not modeled)")
    if f.get("mlp_only_layers", list, []):
        raise HFConfigError(f"{f.path}: field 'mlp_only_layers' must be empty (dense layers "
                            f"among the MoE layers are not modeled)")
    f.read.add("intermediate_size")     # the dense FFN width of mlp_only_layers: none here
    shared = f.get("shared_expert_intermediate_size", int, 0)
    return MoEConfig(name, n_experts=f.need("num_experts"), top_k=f.need("num_experts_per_tok"),
                     d_expert_ffn=f.need("moe_intermediate_size"),
                     norm_topk_prob=f.get("norm_topk_prob", bool, False),
                     d_shared_ffn=shared, shared_expert_gate=bool(shared), source=f.path,
                     **common)


def _mamba(f: Fields, name: str, arch: str) -> MambaConfig:
    f.only("hidden_act", ("silu",), "silu", "the Mamba mixer gates with SiLU")
    f.only("use_bias", (False,), False, "in_proj/out_proj without bias")
    f.only("use_conv_bias", (True,), True, "the depthwise conv has a bias")
    d = f.need("hidden_size")
    rank = f.get("time_step_rank", (int, str), "auto")
    if rank == "auto":
        rank = math.ceil(d / 16)
    elif isinstance(rank, str):
        raise HFConfigError(f"{f.path}: field 'time_step_rank' = {rank!r} must be an int or "
                            f"'auto'")
    vocab = f.need("vocab_size")
    pad = f.get("pad_vocab_size_multiple", int, 1)
    if vocab % pad:
        raise HFConfigError(f"{f.path}: field 'vocab_size' ({vocab}) must be a multiple of "
                            f"'pad_vocab_size_multiple' ({pad}) (HF stores the padded size)")
    return MambaConfig(name, d_model=d, n_layers=f.need("num_hidden_layers"), vocab_size=vocab,
                       d_state=f.get("state_size", int, 16), expand=f.get("expand", int, 2),
                       d_conv=f.get("conv_kernel", int, 4), dt_rank=rank,
                       pad_vocab_size_multiple=pad,
                       norm_eps=f.get("layer_norm_epsilon", float, 1e-5),
                       tie_embeddings=f.get("tie_word_embeddings", bool, True), source=f.path)


def _mamba2(f: Fields, name: str, arch: str) -> Mamba2Config:
    f.only("hidden_act", ("silu",), "silu", "the Mamba-2 mixer gates with SiLU")
    f.only("rms_norm", (True,), True, "the gated norm is an RMSNorm")
    f.only("norm_before_gate", (False,), False, "the norm follows the SiLU gate, as HF Mamba2")
    f.read.update(("chunk_size", "time_step_limit", "time_step_rank"))  # SSD kernel chunking,
    # dt clamp at training and an unused rank: the unrolled scan computes the same recurrence
    d, expand = f.need("hidden_size"), f.get("expand", int, 2)
    heads, hd = f.need("num_heads"), f.get("head_dim", int, 64)
    if heads * hd != expand * d:
        raise HFConfigError(f"{f.path}: field 'num_heads' x 'head_dim' ({heads} x {hd}) must "
                            f"equal 'expand' x 'hidden_size' ({expand} x {d})")
    groups = f.get("n_groups", int, 1)
    if heads % groups:
        raise HFConfigError(f"{f.path}: field 'num_heads' ({heads}) must be a multiple of "
                            f"'n_groups' ({groups})")
    f.read.add("pad_vocab_size_multiple")   # HF stores the padded vocab_size
    return Mamba2Config(name, d_model=d, n_layers=f.need("num_hidden_layers"),
                        vocab_size=f.need("vocab_size"), d_state=f.get("state_size", int, 128),
                        expand=expand, d_conv=f.get("conv_kernel", int, 4), head_dim=hd,
                        n_groups=groups, norm_eps=f.get("layer_norm_epsilon", float, 1e-5),
                        proj_bias=f.get("use_bias", bool, False),
                        conv_bias=f.get("use_conv_bias", bool, True),
                        tie_embeddings=f.get("tie_word_embeddings", bool, True), source=f.path)


def _jamba(f: Fields, name: str, arch: str) -> HybridConfig:
    f.only("hidden_act", ("silu",), "silu", "the FFN is SwiGLU")
    f.only("mamba_proj_bias", (False,), False, "in_proj/out_proj without bias")
    f.only("mamba_conv_bias", (True,), True, "the depthwise conv has a bias")
    f.only("sliding_window", (None,), None, "Jamba's attention is full")
    f.read.update(("num_logits_to_keep", "calc_logits_for_entire_prompt",
                   "use_mamba_kernels"))      # which logits are returned; kernel choice
    d, h = f.need("hidden_size"), f.need("num_attention_heads")
    layers = f.need("num_hidden_layers")
    if d % h:
        raise HFConfigError(f"{f.path}: field 'hidden_size' ({d}) must be a multiple of "
                            f"'num_attention_heads' ({h})")
    rank = f.get("mamba_dt_rank", (int, str), "auto")
    if rank == "auto":
        rank = math.ceil(d / 16)
    elif isinstance(rank, str):
        raise HFConfigError(f"{f.path}: field 'mamba_dt_rank' = {rank!r} must be an int or "
                            f"'auto'")
    periods = {}
    for key in ("attn_layer_period", "attn_layer_offset", "expert_layer_period",
                "expert_layer_offset"):
        periods[key] = f.need(key)
    for kind in ("attn", "expert"):
        if not 0 <= periods[f"{kind}_layer_offset"] < periods[f"{kind}_layer_period"]:
            raise HFConfigError(f"{f.path}: field '{kind}_layer_offset' must be in 0 .. "
                                f"'{kind}_layer_period' - 1")
    return HybridConfig(name, d_model=d, n_layers=layers, n_heads=h,
                        n_kv_heads=f.get("num_key_value_heads", int, h),
                        d_ffn=f.need("intermediate_size"), vocab_size=f.need("vocab_size"),
                        n_experts=f.need("num_experts"), top_k=f.need("num_experts_per_tok"),
                        attn_period=periods["attn_layer_period"],
                        attn_offset=periods["attn_layer_offset"],
                        expert_period=periods["expert_layer_period"],
                        expert_offset=periods["expert_layer_offset"],
                        d_state=f.get("mamba_d_state", int, 16),
                        d_conv=f.get("mamba_d_conv", int, 4),
                        expand=f.get("mamba_expand", int, 2), dt_rank=rank,
                        norm_eps=f.get("rms_norm_eps", float, 1e-6),
                        max_seq_len=f.need("max_position_embeddings"),
                        tie_embeddings=f.get("tie_word_embeddings", bool, False), source=f.path)


#: the config.json fields :func:`tilewright.models.deepseek_config.deepseek_config_from_hf` reads
#: (or refuses by value), and DeepSeek fields without effect on shapes or cost (deployment and
#: training-loss settings; MLA has no separate KV heads)
_DEEPSEEK_READ = frozenset({
    "hidden_size", "num_hidden_layers", "n_routed_experts", "num_experts_per_tok",
    "moe_intermediate_size", "intermediate_size", "vocab_size", "num_attention_heads",
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank",
    "scoring_func", "topk_method", "tie_word_embeddings", "attention_bias", "hidden_act",
    "moe_layer_freq", "rope_scaling", "n_shared_experts", "norm_topk_prob",
    "routed_scaling_factor", "n_group", "topk_group", "first_k_dense_replace", "rope_theta",
    "rms_norm_eps", "max_position_embeddings", "num_nextn_predict_layers"})
_DEEPSEEK_NO_EFFECT = frozenset({"ep_size", "aux_loss_alpha", "seq_aux", "num_key_value_heads"})


def _deepseek_v3(f: Fields, name: str, arch: str) -> LLMConfig:
    """DeepSeek-V3 (MLA + MoE): :func:`~tilewright.models.deepseek_config.deepseek_config_from_hf`,
    which refuses by name what it does not model; other fields are refused as unread."""
    cfg = _deepseek.deepseek_config_from_hf(f.data, name=name, source=f.path)
    f.read.update(k for k in f.data if k in _DEEPSEEK_READ | _DEEPSEEK_NO_EFFECT)
    return cfg


Builder = Callable[[Fields, str, str], LLMConfig]

#: architecture name (``architectures[0]`` of config.json) -> builder; adding an architecture is
#: adding an entry
ARCHITECTURES: dict[str, Builder] = {
    "LlamaForCausalLM": _dense,
    "MistralForCausalLM": _dense,
    "Qwen2ForCausalLM": _dense,
    "Qwen3ForCausalLM": _dense,
    "MixtralForCausalLM": _mixtral,
    "Qwen2MoeForCausalLM": _qwen2_moe,
    "MambaForCausalLM": _mamba,
    "Mamba2ForCausalLM": _mamba2,
    "JambaForCausalLM": _jamba,
    "DeepseekV3ForCausalLM": _deepseek_v3,
}


# ---- entry --------------------------------------------------------------------------------------
def looks_like_config(text: str) -> bool:
    """True when ``text`` names a ``.json`` file or an existing folder (the resolver's test)."""
    return text.endswith(".json") or Path(text).is_dir()


def config_path(text: str) -> Path:
    """The ``config.json`` that ``text`` names (the file, or ``text/config.json``)."""
    p = Path(text)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise HFConfigError(f"{text}: no such config file"
                            + (" (a folder must hold config.json)" if Path(text).is_dir() else ""))
    return p


def load_hf_config(text: str) -> LLMConfig:
    """The config named ``text`` (a config.json or a folder holding one), named ``text``."""
    path = config_path(text)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HFConfigError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise HFConfigError(f"{path}: must hold a JSON object of config fields")
    archs = data.get("architectures")
    if not (isinstance(archs, list) and len(archs) == 1 and isinstance(archs[0], str)):
        raise HFConfigError(f"{path}: field 'architectures' must be a list of one architecture "
                            f"name; supported: {', '.join(sorted(ARCHITECTURES))}")
    arch = archs[0]
    if arch not in ARCHITECTURES:
        raise HFConfigError(f"{path}: architecture {arch!r} is not supported; supported: "
                            f"{', '.join(sorted(ARCHITECTURES))}")
    fields = Fields(data, str(path), arch)
    fields.read.add("_comment")   # the shipped configs' model-card source
    cfg = ARCHITECTURES[arch](fields, text, arch)
    fields.refuse_unread()
    return cfg
