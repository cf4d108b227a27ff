"""Mamba-2 (SSD) block, as explicit ops; the scan is Mamba v1's :func:`selective_scan`.

Block (``Di = expand * d_model`` = ``H`` heads x ``P`` head_dim, ``G`` groups, ``N`` state)::

    z, xBC, dt = split(in_proj(u))                # [B, L, Di], [B, L, Di + 2 G N], [B, L, H]
    xBC        = silu(causal depthwise conv1d(xBC))
    x, B, C    = split(xBC)                       # [B, L, Di], [B, L, G, N] twice
    delta      = softplus(dt + dt_bias)           # [B, L, H], one time step per head
    h[t]       = exp(delta[t] * A) h[t-1] + delta[t] x[t] B[t]      # h: [B, H, P, N]
    y[t]       = h[t] C[t] + D x[t]
    out        = out_proj(rmsnorm(y * silu(z)) * norm.weight)

with ``A = -exp(A_log)`` one scalar per head; head ``h`` reads group ``h // (H / G)``'s B and C.
The SSD recurrence is Mamba v1's with every channel of a head sharing that head's ``delta``,
``A`` and ``D``, so the scan is :func:`~tilewright.models.ssm.selective_scan` on the ``H x P``
channels of each group (a plain unrolled time loop). Parameter layout as the reference
(``in_proj``, ``conv1d`` [Di + 2GN, 1, K], ``dt_bias``, ``A_log``, ``D`` [H], ``norm.weight``
[Di], ``out_proj``). The gated norm normalizes over all ``Di`` features (HF ``Mamba2``).

Decode state: ``conv_state`` [B, Di + 2GN, K] (the last K conv inputs), ``ssm_state``
[B, Di, N] (``h`` with heads and head_dim flattened).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from tilewright.models.ssm import selective_scan
from tilewright.models.transformer import RMSNorm

__all__ = ["Mamba2Block", "Mamba2Layer"]


class Mamba2Block(nn.Module):
    """The Mamba-2 mixer (no residual; see :class:`Mamba2Layer`)."""

    def __init__(self, d_model: int, *, d_state: int = 128, expand: int = 2, d_conv: int = 4,
                 head_dim: int = 64, n_groups: int = 1, norm_eps: float = 1e-5,
                 bias: bool = False, conv_bias: bool = True) -> None:
        super().__init__()
        di = expand * d_model
        if min(d_model, d_state, expand, d_conv, head_dim, n_groups) < 1 or di % head_dim:
            raise ValueError(f"Mamba-2 sizes: d_inner {di} must be a multiple of head_dim "
                             f"{head_dim}, all sizes >= 1")
        heads = di // head_dim
        if heads % n_groups:
            raise ValueError(f"Mamba-2: {heads} heads must be a multiple of n_groups {n_groups}")
        self.d_inner, self.n_heads, self.head_dim = di, heads, head_dim
        self.n_groups, self.d_state, self.d_conv = n_groups, d_state, d_conv
        self.conv_dim = di + 2 * n_groups * d_state
        self.in_proj = nn.Linear(d_model, di + self.conv_dim + heads, bias=bias)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim,
                                bias=conv_bias)
        self.dt_bias = nn.Parameter(torch.empty(heads))
        self.A_log = nn.Parameter(torch.empty(heads))
        self.D = nn.Parameter(torch.empty(heads))
        self.norm = RMSNorm(di, eps=norm_eps)
        self.out_proj = nn.Linear(di, d_model, bias=bias)

    def _init_extra(self, gen: torch.Generator) -> None:
        """``A`` uniform in [1, 16] per head, ``D = 1``, ``dt_bias`` = softplus⁻¹(dt), dt
        log-uniform in [1e-3, 1e-1] (the reference init)."""
        self.A_log.copy_(torch.log(1 + 15 * torch.rand(self.n_heads, generator=gen)))
        self.D.fill_(1.0)
        u = torch.rand(self.n_heads, generator=gen)
        dt = torch.exp(u * (math.log(1e-1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def forward(self, u: Tensor, conv_state: Tensor | None = None,
                ssm_state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``u``: [B, L, D] -> ``(out [B, L, D], conv_state, ssm_state)`` (module doc)."""
        b, length, _ = u.shape
        di, hh, p, g, n, k = (self.d_inner, self.n_heads, self.head_dim, self.n_groups,
                              self.d_state, self.d_conv)
        proj = self.in_proj(u)
        z, xbc, dt = proj[..., :di], proj[..., di:di + self.conv_dim], proj[..., di + self.conv_dim:]
        xt = xbc.transpose(1, 2)                                       # [B, C, L]
        xpad = F.pad(xt, (k - 1, 0)) if conv_state is None \
            else torch.cat((conv_state[:, :, 1:], xt), dim=-1)
        w = self.conv1d.weight[:, 0, :]                                # [C, K]
        xc = w[:, 0:1] * xpad[:, :, 0:length]
        for j in range(1, k):
            xc = xc + w[:, j:j + 1] * xpad[:, :, j:j + length]
        if self.conv1d.bias is not None:
            xc = xc + self.conv1d.bias[:, None]
        xc = F.silu(xc.transpose(1, 2))                                # [B, L, C]
        x, bmat, cmat = xc[..., :di], xc[..., di:di + g * n], xc[..., di + g * n:]
        delta = F.softplus(dt + self.dt_bias)                          # [B, L, H]
        # per channel (head-major, head_dim minor): the head's delta, A and D
        delta_c = delta[..., :, None].expand(b, length, hh, p).reshape(b, length, di)
        a_c = (-torch.exp(self.A_log))[:, None, None].expand(hh, p, n).reshape(di, n)
        d_c = self.D[:, None].expand(hh, p).reshape(di)
        per = di // g                                                  # channels per group
        ys, hs = [], []
        for gi in range(g):
            sl = slice(gi * per, (gi + 1) * per)
            h0 = None if ssm_state is None else ssm_state[:, sl]
            y, h = selective_scan(x[..., sl], delta_c[..., sl], a_c[sl],
                                  bmat[..., gi * n:(gi + 1) * n], cmat[..., gi * n:(gi + 1) * n],
                                  d_c[sl], h0)
            ys.append(y)
            hs.append(h)
        y = ys[0] if g == 1 else torch.cat(ys, dim=-1)
        h = hs[0] if g == 1 else torch.cat(hs, dim=1)
        out = self.out_proj(self.norm(y * F.silu(z)))
        return out, xpad[:, :, length - 1:], h


class Mamba2Layer(nn.Module):
    """Residual wrapper of the Mamba-2 LM: ``y = u + mixer(norm(u))`` (RMSNorm)."""

    def __init__(self, d_model: int, *, norm_eps: float = 1e-5, **block_kwargs) -> None:
        super().__init__()
        self.norm = RMSNorm(d_model, eps=norm_eps)
        self.mixer = Mamba2Block(d_model, norm_eps=norm_eps, **block_kwargs)

    def forward(self, u: Tensor, conv_state: Tensor | None = None,
                ssm_state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``u``: [B, L, D] -> ``(y [B, L, D], conv_state, ssm_state)``."""
        y, conv_state, ssm_state = self.mixer(self.norm(u), conv_state, ssm_state)
        return u + y, conv_state, ssm_state
