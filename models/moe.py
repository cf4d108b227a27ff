"""Mixture-of-Experts feed-forward layer (Mixtral / DeepSeek-V3 style) with static-shape dispatch.

Routing: ``router_score="softmax"`` (Mixtral: softmax over all experts, top-k, gates renormalized
to sum to 1) or ``"sigmoid"`` (DeepSeek-V3: sigmoid affinities; experts are *chosen* on
``score + score_bias`` — the auxiliary-loss-free balancing bias — optionally restricted to the
best ``topk_group`` of ``n_group`` expert groups, each group ranked by the sum of its two best
scores; gates are the chosen sigmoid scores, renormalized, times ``routed_scaling_factor``).

Dispatch/combine never drops a token: each expert gets a buffer of ``C = tokens`` slots (a token
picks an expert at most once, so no expert can overflow); token ``t``'s assignment to expert ``e``
goes to slot "number of earlier assignments to ``e``" (a running ``cumsum``), the GShard
dispatch/combine formulation. Dispatch and combine are one-hot/gate tensors [T, E, C] contracted
with ``einsum``, so every shape is static and ``torch.export`` captures the graph. Memory is
O(T·E·C) = O(E·T²) — meant for reference runs at small T, not for production sizes.

Shape letters: ``T`` tokens (= batch·seq), ``D`` d_model, ``E`` routed experts, ``k`` top-k,
``F`` expert FFN width, ``C`` slots per expert.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from tilewright.models.transformer import SwiGLU

__all__ = ["MoELayer"]


class MoELayer(nn.Module):
    """Top-k routed SwiGLU experts plus optional always-on shared expert(s).

    Expert weights are stacked: ``w_gate``/``w_up`` [E, F, D], ``w_down`` [E, D, F] (expert ``e``
    computes ``w_down[e] @ (silu(w_gate[e] @ x) * (w_up[e] @ x))``). The shared experts are one
    :class:`SwiGLU` of width ``n_shared_experts * d_ffn`` (as DeepSeek implements them), or
    ``d_shared_ffn`` when given; ``shared_expert_gate`` scales the shared output by
    ``sigmoid(Linear(d_model, 1) x)`` per token (Qwen2-MoE).
    """

    def __init__(self, d_model: int, n_experts: int, top_k: int, d_ffn: int, *,
                 n_shared_experts: int = 0,
                 router_score: Literal["softmax", "sigmoid"] = "softmax",
                 norm_topk_prob: bool = True, routed_scaling_factor: float = 1.0,
                 n_group: int = 1, topk_group: int = 1, d_shared_ffn: int | None = None,
                 shared_expert_gate: bool = False) -> None:
        super().__init__()
        if d_model < 1 or d_ffn < 1 or n_experts < 1:
            raise ValueError(f"MoE widths must be >= 1: d_model={d_model}, d_ffn={d_ffn}, "
                             f"n_experts={n_experts}")
        if not 1 <= top_k <= n_experts:
            raise ValueError(f"top_k must be in 1..n_experts ({n_experts}), got {top_k}")
        if router_score not in ("softmax", "sigmoid"):
            raise ValueError(f"router_score must be 'softmax' or 'sigmoid', got {router_score!r}")
        if n_shared_experts < 0:
            raise ValueError(f"n_shared_experts must be >= 0, got {n_shared_experts}")
        if n_group < 1 or n_experts % n_group or not 1 <= topk_group <= n_group:
            raise ValueError(f"need n_group | n_experts and 1 <= topk_group <= n_group; got "
                             f"n_experts={n_experts}, n_group={n_group}, topk_group={topk_group}")
        if n_group > 1 and (n_experts // n_group < 2 or topk_group * n_experts // n_group < top_k):
            raise ValueError("group-limited routing needs >= 2 experts per group and "
                             "topk_group * experts_per_group >= top_k")
        self.n_experts, self.top_k, self.d_ffn = n_experts, top_k, d_ffn
        self.router_score, self.norm_topk_prob = router_score, norm_topk_prob
        self.routed_scaling_factor = float(routed_scaling_factor)
        self.n_group, self.topk_group = n_group, topk_group
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.w_gate = nn.Parameter(torch.empty(n_experts, d_ffn, d_model))
        self.w_up = nn.Parameter(torch.empty(n_experts, d_ffn, d_model))
        self.w_down = nn.Parameter(torch.empty(n_experts, d_model, d_ffn))
        if router_score == "sigmoid":
            self.register_buffer("score_bias", torch.zeros(n_experts))
        else:
            self.score_bias = None
        shared = n_shared_experts * d_ffn if d_shared_ffn is None else d_shared_ffn
        self.shared = SwiGLU(d_model, shared) if shared else None
        self.shared_gate = (nn.Linear(d_model, 1, bias=False)
                            if shared and shared_expert_gate else None)

    def _init_extra(self, gen: torch.Generator) -> None:
        """Experts: uniform ±1/sqrt(fan_in) like ``nn.Linear``."""
        for w in (self.w_gate, self.w_up, self.w_down):
            bound = 1.0 / math.sqrt(w.shape[-1])
            w.uniform_(-bound, bound, generator=gen)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x``: [T, D] -> ``(gates [T, k] float, experts [T, k] int64)``, experts in descending
        order of selection score."""
        logits = self.router(x)                                        # [T, E]
        if self.router_score == "softmax":
            scores = torch.softmax(logits, dim=-1)
            choice = scores
        else:
            scores = torch.sigmoid(logits)
            choice = scores + self.score_bias
        if self.n_group > 1:
            t, e, g = choice.shape[0], self.n_experts, self.n_group
            grouped = choice.view(t, g, e // g)
            group_score = grouped.topk(2, dim=-1).values.sum(-1)        # [T, G]
            best = group_score.topk(self.topk_group, dim=-1).indices   # [T, topk_group]
            keep = (best[..., None] == torch.arange(g, device=x.device)).any(1)  # [T, G]
            choice = choice.masked_fill(~keep[:, :, None].expand(t, g, e // g).reshape(t, e),
                                        float("-inf"))
        experts = choice.topk(self.top_k, dim=-1).indices               # [T, k]
        gates = scores.gather(-1, experts)
        if self.norm_topk_prob:
            gates = gates / gates.sum(-1, keepdim=True)
        return gates * self.routed_scaling_factor, experts

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x``: [B, S, D] -> ``(y [B, S, D], counts int64 [E])``; ``counts[e]`` is the number of
        tokens routed to expert ``e`` (sums to B·S·k; shared experts are not counted)."""
        b, s, d = x.shape
        t, e = b * s, self.n_experts
        xf = x.reshape(t, d)
        gates, experts = self.route(xf)
        assign = (experts[..., None] == torch.arange(e, device=x.device)).to(x.dtype)  # [T,k,E]
        counts = assign.sum((0, 1)).to(torch.int64)
        # slot of each assignment inside its expert's buffer (token-major running count)
        slot = (torch.cumsum(assign.reshape(t * self.top_k, e), dim=0) - 1).reshape(assign.shape)
        slot_hot = (slot[..., None] == torch.arange(t, device=x.device)).to(x.dtype)
        slot_hot = slot_hot * assign[..., None]                        # [T, k, E, C=T]
        dispatch = slot_hot.sum(1)                                     # [T, E, C] 0/1
        combine = (slot_hot * gates[:, :, None, None]).sum(1)          # [T, E, C] gate weights
        xe = torch.einsum("tec,td->ecd", dispatch, xf)                 # [E, C, D]
        hidden = F.silu(torch.matmul(xe, self.w_gate.transpose(1, 2))) \
            * torch.matmul(xe, self.w_up.transpose(1, 2))              # [E, C, F]
        ye = torch.matmul(hidden, self.w_down.transpose(1, 2))         # [E, C, D]
        y = torch.einsum("tec,ecd->td", combine, ye)
        if self.shared is not None:
            s_out = self.shared(xf)
            if self.shared_gate is not None:
                s_out = torch.sigmoid(self.shared_gate(xf)) * s_out
            y = y + s_out
        return y.reshape(b, s, d), counts
