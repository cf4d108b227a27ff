"""Attention + Mamba + MoE hybrid layers (Jamba): one residual block per layer, a mixer
(attention or Mamba) then an FFN (SwiGLU or MoE), both pre-norm::

    h = x + mixer(norm(x));  y = h + ffn(norm(h))

Jamba's attention has no positional embedding (the Mamba layers carry position), so it is
:class:`~tilewright.models.transformer.GroupedQueryAttention` with ``rope=False``. Its Mamba mixer
is Mamba v1 with RMSNorms on ``dt``, ``B`` and ``C`` after ``x_proj`` (:class:`JambaMambaMixer`).
Which layer gets which mixer and FFN comes from the config (``attn_layer_period/offset``,
``expert_layer_period/offset``; :meth:`tilewright.models.llm_shapes.HybridConfig.kind`).
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from tilewright.models.moe import MoELayer
from tilewright.models.ssm import MambaBlock
from tilewright.models.transformer import GroupedQueryAttention, RMSNorm, SwiGLU

__all__ = ["JambaMambaMixer", "HybridLayer"]


class JambaMambaMixer(MambaBlock):
    """Mamba v1 mixer with RMSNorm on ``dt`` [R], ``B`` and ``C`` [N] (Jamba)."""

    def __init__(self, d_model: int, *, norm_eps: float = 1e-6, **kwargs) -> None:
        super().__init__(d_model, **kwargs)
        self.dt_norm = RMSNorm(self.dt_rank, eps=norm_eps)
        self.b_norm = RMSNorm(self.d_state, eps=norm_eps)
        self.c_norm = RMSNorm(self.d_state, eps=norm_eps)

    def _ssm_params(self, xc: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        r, n = self.dt_rank, self.d_state
        x_dbl = self.x_proj(xc)
        dt = self.dt_norm(x_dbl[..., :r])
        b_mat, c_mat = self.b_norm(x_dbl[..., r:r + n]), self.c_norm(x_dbl[..., r + n:])
        return F.softplus(self.dt_proj(dt)), b_mat, c_mat


class HybridLayer(nn.Module):
    """One Jamba layer: ``mixer`` is ``"attn"`` or ``"mamba"``, ``ffn`` ``"mlp"`` or ``"moe"``.

    Prefill ``layer(x)``; decode ``layer(x, s0, s1)`` with the attention's KV cache
    ``[B, Hkv, T, hd]`` twice or the Mamba ``conv_state [B, Di, d_conv]`` and
    ``ssm_state [B, Di, N]``. Returns ``(y, s0, s1)`` and, for an MoE FFN, its expert counts.
    """

    def __init__(self, d_model: int, mixer: str, ffn: str, *, n_heads: int, n_kv_heads: int,
                 d_ffn: int, n_experts: int, top_k: int, max_seq_len: int, d_state: int,
                 d_conv: int, expand: int, dt_rank: int, norm_eps: float = 1e-6) -> None:
        super().__init__()
        if mixer not in ("attn", "mamba") or ffn not in ("mlp", "moe"):
            raise ValueError(f"hybrid layer kind {mixer}-{ffn}: mixer attn|mamba, ffn mlp|moe")
        self.kind = f"{mixer}-{ffn}"
        self.mixer_norm = RMSNorm(d_model, eps=norm_eps)
        if mixer == "attn":
            self.mixer = GroupedQueryAttention(d_model, n_heads, n_kv_heads, rope_theta=1.0,
                                               max_seq_len=max_seq_len, rope=False)
        else:
            self.mixer = JambaMambaMixer(d_model, norm_eps=norm_eps, d_state=d_state,
                                         d_conv=d_conv, expand=expand, dt_rank=dt_rank)
        self.ffn_norm = RMSNorm(d_model, eps=norm_eps)
        self.ffn = (SwiGLU(d_model, d_ffn) if ffn == "mlp"
                    else MoELayer(d_model, n_experts, top_k, d_ffn))

    def forward(self, x: Tensor, s0: Tensor | None = None,
                s1: Tensor | None = None) -> tuple[Tensor, ...]:
        """``x``: [B, S, D] -> ``(y [B, S, D], s0, s1[, counts])`` (class doc)."""
        a, s0, s1 = self.mixer(self.mixer_norm(x), s0, s1)
        h = x + a
        f = self.ffn(self.ffn_norm(h))
        extra: tuple = ()
        if isinstance(f, tuple):
            f, extra = f[0], tuple(f[1:])
        return (h + f, s0, s1, *extra)
