"""Mamba (v1) selective state-space block, written as explicit ops with the scan as a time loop.

Block (``d_inner = expand * d_model``, ``N = d_state``, ``R = dt_rank``)::

    x, z   = split(in_proj(u))                   # [B, L, d_inner] each
    x      = silu(causal depthwise conv1d(x))    # kernel d_conv, one filter per channel
    dt,B,C = split(x_proj(x))                    # [B, L, R], [B, L, N], [B, L, N]
    delta  = softplus(dt_proj(dt))               # [B, L, d_inner], time-step (>0)
    h[t]   = exp(delta[t] * A) * h[t-1] + delta[t] * B[t] * x[t]     # h: [B, d_inner, N]
    y[t]   = h[t] @ C[t] + D * x[t]
    out    = out_proj(y * silu(z))

with ``A = -exp(A_log)`` [d_inner, N]. The conv is written as ``d_conv`` shifted multiply-adds
(a vector-unit op, not a generic convolution) but keeps ``nn.Conv1d``'s parameter layout
(``conv1d.weight`` [d_inner, 1, d_conv], ``conv1d.bias`` [d_inner]) so reference checkpoints map.

State for decoding: ``conv_state`` [B, d_inner, d_conv] holds the last ``d_conv`` conv inputs
(oldest first; zeros before the sequence start), ``ssm_state`` [B, d_inner, N] holds ``h``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from tilewright.models.transformer import RMSNorm

__all__ = ["selective_scan", "ssm_scan", "scan_loop", "ssd_scan", "MambaBlock", "MambaLayer"]


def scan_loop(a: Tensor, b: Tensor, c: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
    """The linear recurrence as an explicit time loop (the unrolled reference form).

    ``a``, ``b``: [Bt, L, Di, N] decay and input terms; ``c``: [Bt, L, N]; ``h0``: [Bt, Di, N].
    ``h[t] = a[:, t] * h[t-1] + b[:, t]`` (h[-1] = h0), ``y[:, t] = sum_n h[t][..., n] c[:, t, n]``.
    Returns ``(y [Bt, L, Di], h[L-1] [Bt, Di, N])``. Under ``torch.export`` this loop unrolls into
    about six ops per time step (what the ``lower_scan`` pass folds back into one ``scan``).
    """
    h = h0
    ys = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        ys.append((h * c[:, t, None, :]).sum(-1))                     # [Bt, Di]
    return torch.stack(ys, dim=1), h


@torch.library.custom_op("tilewright::ssm_scan", mutates_args=())
def ssm_scan(a: Tensor, b: Tensor, c: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
    """The same recurrence as :func:`scan_loop`, as ONE torch op (``torch.ops.tilewright.ssm_scan``)
    so ``torch.export`` records a single node instead of unrolling ``L`` steps; the compiler's
    frontend maps it to the IR's ``scan`` op (inputs a, b, c, h0; outputs y, h_last).

    Shapes as in :func:`scan_loop`. The operands are general enough for both scans in use:

    * Mamba (v1): ``a = exp(delta ⊗ A)``, ``b = (delta * u) ⊗ B`` (see :func:`selective_scan`);
    * Mamba-2 SSD (scalar decay per head): with heads ``H`` of ``P`` channels, ``Di = H * P``,
      ``a = exp(dt * A_head)`` broadcast over P and N, ``b = (dt * x) ⊗ B``, ``c = C``; with
      ``ngroups = G > 1`` one call per group (:func:`ssd_scan` does both).

    The ``D * u`` skip term is not part of the op. Eager kernel: a loop that writes into
    preallocated outputs; gradients by the reverse recurrence (:func:`_ssm_scan_backward`).
    """
    bt, length, di, _ = a.shape
    y = a.new_empty(bt, length, di)
    h = h0.clone()
    for t in range(length):
        h = a[:, t] * h + b[:, t]
        y[:, t] = (h * c[:, t, None, :]).sum(-1)
    return y, h


@ssm_scan.register_fake
def _ssm_scan_fake(a: Tensor, b: Tensor, c: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
    bt, length, di, n = a.shape
    torch._check(b.shape == a.shape, lambda: f"ssm_scan: b {tuple(b.shape)} != a {tuple(a.shape)}")
    torch._check(c.shape == (bt, length, n), lambda: f"ssm_scan: c {tuple(c.shape)}, want "
                 f"{(bt, length, n)}")
    torch._check(h0.shape == (bt, di, n), lambda: f"ssm_scan: h0 {tuple(h0.shape)}, want "
                 f"{(bt, di, n)}")
    return a.new_empty(bt, length, di), h0.new_empty(bt, di, n)


def _ssm_scan_setup(ctx, inputs, output) -> None:
    a, b, c, h0 = inputs
    ctx.save_for_backward(a, b, c, h0)


def _ssm_scan_backward(ctx, grad_y: Tensor | None, grad_h: Tensor | None):
    """Reverse recurrence: ``g[t] = grad_y[t] ⊗ c[t] + a[t+1] * g[t+1]`` (``g[L-1]`` adds the
    h_last gradient); ``da[t] = g[t] * h[t-1]``, ``db[t] = g[t]``,
    ``dc[t] = sum_Di grad_y[t] h[t]``, ``dh0 = a[0] * g[0]``. The forward states are recomputed
    (one extra loop)."""
    a, b, c, h0 = ctx.saved_tensors
    length = a.shape[1]
    hs = [h0]
    for t in range(length):
        hs.append(a[:, t] * hs[-1] + b[:, t])
    gy = torch.zeros_like(a[..., 0]) if grad_y is None else grad_y
    g = torch.zeros_like(h0) if grad_h is None else grad_h.clone()
    da, db, dc = torch.empty_like(a), torch.empty_like(b), torch.empty_like(c)
    for t in reversed(range(length)):
        g = g + gy[:, t, :, None] * c[:, t, None, :]
        da[:, t] = g * hs[t]
        db[:, t] = g
        dc[:, t] = (gy[:, t, :, None] * hs[t + 1]).sum(1)
        g = a[:, t] * g
    return da, db, dc, g


ssm_scan.register_autograd(_ssm_scan_backward, setup_context=_ssm_scan_setup)


def selective_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor,
                   h0: Tensor | None = None, *, unrolled: bool = False) -> tuple[Tensor, Tensor]:
    """Mamba's selective scan: the discretized operands, then the recurrence as one
    :func:`ssm_scan` op (``unrolled=True``: as the explicit loop :func:`scan_loop`, for checking).

    ``u``, ``delta``: [Bt, L, Di]; ``A``: [Di, N]; ``B``, ``C``: [Bt, L, N]; ``D``: [Di];
    ``h0``: [Bt, Di, N] or None (zeros). Returns ``(y [Bt, L, Di], h_last [Bt, Di, N])``.
    """
    bt, length, di = u.shape
    d_a = torch.exp(delta[..., None] * A)                              # [Bt, L, Di, N]
    d_bu = (delta * u)[..., None] * B[:, :, None, :]                   # [Bt, L, Di, N]
    h = h0 if h0 is not None else u.new_zeros(bt, di, A.shape[1])
    y, h = (scan_loop if unrolled else ssm_scan)(d_a, d_bu, C, h)
    return y + u * D, h


def ssd_scan(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, h0: Tensor | None = None
             ) -> tuple[Tensor, Tensor]:
    """Mamba-2's SSD recurrence (scalar decay per head) through :func:`ssm_scan`, one op per
    group, so ``torch.export`` records ``ngroups`` scan nodes instead of an unrolled loop.

    ``x``: [Bt, L, H, P] (H heads of P channels); ``dt``: [Bt, L, H] (after softplus and bias);
    ``A``: [H] (negative); ``B``, ``C``: [Bt, L, G, N] with G dividing H (head ``h`` reads group
    ``h // (H / G)``); ``h0``: [Bt, H, P, N] or None (zeros). Per head, time ``t``::

        h[t] = exp(dt[t] A) * h[t-1] + dt[t] * x[t] ⊗ B[t]       # [P, N]
        y[t] = h[t] @ C[t]                                          # [P]

    Returns ``(y [Bt, L, H, P], h_last [Bt, H, P, N])``; the ``D * x`` skip term and the gating
    are the layer's. The decay is expanded to [Bt, L, H/G * P, N] (the scan op's ``a`` operand).
    """
    bt, length, heads, p = x.shape
    groups, n = B.shape[2], B.shape[3]
    if heads % groups:
        raise ValueError(f"ssd_scan: {heads} heads do not split into {groups} groups")
    hg = heads // groups
    if h0 is None:
        h0 = x.new_zeros(bt, heads, p, n)
    decay = torch.exp(dt * A)                                          # [Bt, L, H]
    dtx = dt[..., None] * x                                            # [Bt, L, H, P]
    ys, hs = [], []
    for g in range(groups):
        heads_g = slice(g * hg, (g + 1) * hg)
        a = decay[:, :, heads_g, None, None].expand(bt, length, hg, p, n) \
            .reshape(bt, length, hg * p, n)
        b = (dtx[:, :, heads_g, :, None] * B[:, :, g, None, None, :]).reshape(bt, length, hg * p, n)
        y, h = ssm_scan(a, b, C[:, :, g], h0[:, heads_g].reshape(bt, hg * p, n))
        ys.append(y.reshape(bt, length, hg, p))
        hs.append(h.reshape(bt, hg, p, n))
    if groups == 1:
        return ys[0], hs[0]
    return torch.cat(ys, dim=2), torch.cat(hs, dim=1)


class MambaBlock(nn.Module):
    """The Mamba mixer (no norm, no residual — see :class:`MambaLayer`). Bias only on the conv and
    ``dt_proj`` as in the reference implementation. ``unrolled_scan = True`` (on an instance)
    runs the scan as the explicit time loop instead of the one-op :func:`ssm_scan` (for checking
    and for the before/after of ``benchmarks/compile_speed.py``)."""

    unrolled_scan: bool = False

    def __init__(self, d_model: int, *, d_state: int = 16, expand: int = 2, d_conv: int = 4,
                 dt_rank: int | None = None, dt_min: float = 1e-3, dt_max: float = 1e-1) -> None:
        super().__init__()
        if min(d_model, d_state, expand, d_conv) < 1:
            raise ValueError(f"Mamba sizes must be >= 1: d_model={d_model}, d_state={d_state}, "
                             f"expand={expand}, d_conv={d_conv}")
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"need 0 < dt_min <= dt_max, got {dt_min}, {dt_max}")
        self.d_model, self.d_state, self.d_conv = d_model, d_state, d_conv
        self.d_inner = expand * d_model
        self.dt_rank = math.ceil(d_model / 16) if dt_rank is None else dt_rank
        self.dt_min, self.dt_max = dt_min, dt_max
        di, n, r = self.d_inner, d_state, self.dt_rank
        self.in_proj = nn.Linear(d_model, 2 * di, bias=False)
        self.conv1d = nn.Conv1d(di, di, d_conv, groups=di, bias=True)
        self.x_proj = nn.Linear(di, r + 2 * n, bias=False)
        self.dt_proj = nn.Linear(r, di, bias=True)
        self.A_log = nn.Parameter(torch.empty(di, n))
        self.D = nn.Parameter(torch.empty(di))
        self.out_proj = nn.Linear(di, d_model, bias=False)

    def _init_extra(self, gen: torch.Generator) -> None:
        """Reference init: ``A = -[1..N]`` per channel (S4D-real), ``D = 1``, and ``dt_proj.bias``
        = softplus⁻¹(dt) with dt log-uniform in [dt_min, dt_max]."""
        n = self.d_state
        a = torch.arange(1, n + 1, dtype=torch.float32)
        self.A_log.copy_(torch.log(a).expand_as(self.A_log))
        self.D.fill_(1.0)
        u = torch.rand(self.d_inner, generator=gen)
        dt = torch.exp(u * (math.log(self.dt_max) - math.log(self.dt_min)) + math.log(self.dt_min))
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def _ssm_params(self, xc: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``xc``: [B, L, Di] conv output -> ``(delta [B, L, Di], B [B, L, N], C [B, L, N])``."""
        r, n = self.dt_rank, self.d_state
        x_dbl = self.x_proj(xc)
        dt, b_mat, c_mat = x_dbl[..., :r], x_dbl[..., r:r + n], x_dbl[..., r + n:]
        return F.softplus(self.dt_proj(dt)), b_mat, c_mat

    def forward(self, u: Tensor, conv_state: Tensor | None = None,
                ssm_state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``u``: [B, L, D]; states (see module doc) or None to start a new sequence.

        Returns ``(out [B, L, D], conv_state [B, Di, d_conv], ssm_state [B, Di, N])`` after the
        last token, so a sequence can be continued in chunks or one token at a time (decode form:
        L = 1 with the previous call's states).
        """
        b, length, _ = u.shape
        k = self.d_conv
        x, z = self.in_proj(u).chunk(2, dim=-1)                        # [B, L, Di] each
        xt = x.transpose(1, 2)                                         # [B, Di, L]
        if conv_state is None:
            xpad = F.pad(xt, (k - 1, 0))                               # [B, Di, L+k-1]
        else:
            xpad = torch.cat((conv_state[:, :, 1:], xt), dim=-1)
        w = self.conv1d.weight[:, 0, :]                                # [Di, k]
        xc = self.conv1d.bias[:, None] + w[:, 0:1] * xpad[:, :, 0:length]
        for j in range(1, k):
            xc = xc + w[:, j:j + 1] * xpad[:, :, j:j + length]
        xc = F.silu(xc.transpose(1, 2))                                # [B, L, Di]
        delta, b_mat, c_mat = self._ssm_params(xc)
        y, h = selective_scan(xc, delta, -torch.exp(self.A_log), b_mat, c_mat, self.D, ssm_state,
                              unrolled=self.unrolled_scan)
        out = self.out_proj(y * F.silu(z))
        return out, xpad[:, :, length - 1:], h

    def step(self, u: Tensor, conv_state: Tensor,
             ssm_state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Recurrent single-token form written independently of :meth:`forward`.

        ``u``: [B, D] one token; returns ``(out [B, D], conv_state, ssm_state)``.
        """
        x, z = self.in_proj(u).chunk(2, dim=-1)                        # [B, Di]
        conv_state = torch.cat((conv_state[:, :, 1:], x[:, :, None]), dim=-1)
        xc = F.silu((conv_state * self.conv1d.weight[:, 0, :]).sum(-1) + self.conv1d.bias)
        delta, b_vec, c_vec = self._ssm_params(xc)                     # [B, Di], [B, N], [B, N]
        d_a = torch.exp(delta[:, :, None] * -torch.exp(self.A_log))
        ssm_state = d_a * ssm_state + (delta * xc)[:, :, None] * b_vec[:, None, :]
        y = (ssm_state * c_vec[:, None, :]).sum(-1) + self.D * xc
        return self.out_proj(y * F.silu(z)), conv_state, ssm_state

    def empty_state(self, batch: int, device: torch.device | str | None = None
                    ) -> tuple[Tensor, Tensor]:
        """Zero ``(conv_state [batch, Di, d_conv], ssm_state [batch, Di, N])`` (sequence start)."""
        return (torch.zeros(batch, self.d_inner, self.d_conv, device=device),
                torch.zeros(batch, self.d_inner, self.d_state, device=device))


class MambaLayer(nn.Module):
    """Residual wrapper used in the Mamba LM: ``y = u + mixer(norm(u))`` (RMSNorm)."""

    def __init__(self, d_model: int, *, norm_eps: float = 1e-5, **block_kwargs) -> None:
        super().__init__()
        self.norm = RMSNorm(d_model, eps=norm_eps)
        self.mixer = MambaBlock(d_model, **block_kwargs)

    def forward(self, u: Tensor, conv_state: Tensor | None = None,
                ssm_state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``u``: [B, L, D] -> ``(y [B, L, D], conv_state, ssm_state)``."""
        y, conv_state, ssm_state = self.mixer(self.norm(u), conv_state, ssm_state)
        return u + y, conv_state, ssm_state
