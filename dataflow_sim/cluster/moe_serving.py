"""MoE at serving scale: routing draws, expert placement and all-to-all volumes.

**Routing** (:class:`ExpertRouter`): every token picks ``top_k`` *distinct* experts, freshly in
every MoE layer. Expert popularity per layer is uniform or Zipf(``s``) over a seeded random
ranking of that layer's experts (a different ranking per layer). Picking k distinct experts with
probability proportional to popularity ``p`` (successive sampling, the Gumbel-top-k trick) gives
expert j an inclusion probability ``π_j`` (uniform: ``k/E``; skewed: estimated once by
:data:`INCLUSION_DRAWS` Gumbel-top-k draws, then scaled so ``Σπ = k``). The tokens of an
iteration are independent, so expert j's load in a layer is Binomial(T, π_j): never above T, its
mean ``T·π_j``; loads of different experts are drawn independently (their sum is ``T·k`` on
average, not exactly). A routing trace (expert ids) is consumed ``T·k`` ids per layer as given.

**Placement** (:func:`eplb_placement`): without redundant experts expert j lives on EP rank
``j // (E/ep)``. With ``R`` redundant experts (DeepSeek's EPLB, github.com/deepseek-ai/EPLB):
the R replicas go, one at a time, to the expert with the highest expected load per replica; then
the ``E + R`` slots are packed onto the ``ep`` ranks, ``(E + R)/ep`` each, heaviest first onto the
least-loaded rank with room (greedy balanced packing) — DeepSeek EPLB's global policy
(``replicate_experts`` then ``balanced_packing`` in its ``eplb.py``; its hierarchical policy, which
first packs expert groups onto nodes, is not modelled). An expert's tokens are split evenly over
its replicas. Every EP rank is an attention data-parallel rank (DP attention), so the expert rows
a rank receives are the load EPLB balances; :func:`rank_expected_loads` gives a placement's
expected rows per rank and :func:`max_over_mean` its imbalance (1 = perfectly balanced). The
placement is computed from the routing's expected loads (what EPLB's load statistics estimate),
once per replica and layer; a routing trace is placed as uniform.

**Dispatch / combine volumes** (:func:`a2a_bytes`; bytes leaving one rank per MoE layer, uniform
routing over ``E`` experts on ``G`` EP ranks, ``g`` of them per node, ``N = G/g`` nodes, token
hidden size ``d``, ``b`` bytes per element), with ``miss(m) = C(E − m, k)/C(E, k)`` the chance that
none of a token's k experts is among m given experts:

* ``flat`` (one copy per routed expert, the old all-to-all): ``T·k·(1 − 1/G)·d·b``, all on the
  network's all-to-all.
* ``deepep`` (DeepEP's normal kernels, DeepSeek-V3 report §3.2 / github.com/deepseek-ai/DeepEP:
  a token crosses to each *node* holding any of its experts once over RDMA and is forwarded over
  NVLink inside that node): inter-node ``T·(N − 1)·(1 − miss(E/N))·d·b``; intra-node (to the other
  GPUs of the own node, one copy per GPU hit) ``T·(g − 1)·(1 − miss(E/G))·d·b``. NVLink forwarding
  inside remote nodes is not counted (it is not the bottleneck). Time: the slower of the RDMA part
  on one NIC (``inter_node.link_gbps``, one NIC per GPU) and the NVLink part
  (``intra_node.link_gbps``), plus one inter-node latency.

Dispatch may be FP8 (``dispatch_bytes=1``; DeepSeek-V3 report §3.3.4 "Low-Precision
Communication": activations are quantized to FP8 before dispatch, combine stays BF16).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np

from tilewright.models.llm_configs import LLMConfig, MoEConfig
from tilewright.models.llm_shapes import DeepSeekConfig

__all__ = ["standin_attention", "STANDIN_HEADS", "STANDIN_KV_HEADS", "inclusion_probabilities",
           "ExpertRouter", "eplb_placement", "SlotMap", "miss_probability", "a2a_bytes",
           "INCLUSION_DRAWS", "rank_expected_loads", "max_over_mean"]

#: query heads and KV heads of the stand-in attention of an MoE config without attention
#: (DeepSeek-V3's MLA is not modelled here): GQA with DeepSeek-V3's 128 query heads, head dim
#: d_model/128 and 8 KV heads. A STAND-IN, not MLA: its KV cache is 2·8·56 = 896 elements per
#: token per layer for d_model 7168 (MLA's latent cache is 512 + 64 = 576).
STANDIN_HEADS = 128
STANDIN_KV_HEADS = 8
#: Gumbel-top-k draws that estimate skewed inclusion probabilities
INCLUSION_DRAWS = 4000


def standin_attention(cfg: LLMConfig) -> tuple[LLMConfig, str | None]:
    """(config, label): an MoE config whose attention is not modelled (``n_heads is None``) gets
    the stand-in GQA of :data:`STANDIN_HEADS`/:data:`STANDIN_KV_HEADS` and a vocabulary if it
    has none; the label says so (None for any other config, returned unchanged — DeepSeek-V3's
    MLA is modelled, :mod:`tilewright.models.mla`)."""
    if not isinstance(cfg, MoEConfig) or cfg.n_heads is not None or \
            isinstance(cfg, DeepSeekConfig):
        return cfg, None
    out = dataclasses.replace(cfg, n_heads=STANDIN_HEADS, n_kv_heads=STANDIN_KV_HEADS)
    hd = cfg.d_model // STANDIN_HEADS
    return out, (f"stand-in GQA attention ({STANDIN_HEADS} query heads of {hd}, "
                 f"{STANDIN_KV_HEADS} KV heads): {cfg.name}'s own attention (MLA) is not modelled")


def inclusion_probabilities(p: np.ndarray, k: int, rng: np.random.Generator,
                            draws: int = INCLUSION_DRAWS) -> np.ndarray:
    """π_j: chance expert j is among a token's k distinct experts when they are drawn in
    proportion to ``p`` without replacement (module docstring). Uniform ``p``: exactly k/E."""
    p = np.asarray(p, dtype=float)
    E = len(p)
    if np.allclose(p, p[0]):
        return np.full(E, k / E)
    g = np.log(p)[None, :] - np.log(-np.log(rng.random((draws, E))))
    top = np.argpartition(-g, k - 1, axis=1)[:, :k]
    pi = np.bincount(top.ravel(), minlength=E) / draws
    pi = np.minimum(pi * (k / pi.sum()), 1.0)
    return pi


class ExpertRouter:
    """Per-layer expert loads of an iteration (module docstring): ``loads(T)`` -> an
    ``(n_moe_layers, E)`` array of tokens per expert."""

    def __init__(self, n_experts: int, top_k: int, n_moe_layers: int, routing: str,
                 zipf_s: float, rng: np.random.Generator,
                 trace: np.ndarray | None = None) -> None:
        self.E, self.k, self.L = n_experts, top_k, n_moe_layers
        self._rng, self._trace, self._pos = rng, trace, 0
        if routing == "zipf":
            shape = 1.0 / np.arange(1, n_experts + 1, dtype=float) ** zipf_s
            pi_sorted = inclusion_probabilities(shape / shape.sum(), top_k, rng)
            self.pi = np.stack([pi_sorted[rng.permutation(n_experts)]
                                for _ in range(n_moe_layers)])
        else:
            self.pi = np.full((n_moe_layers, n_experts), top_k / n_experts)

    def loads(self, T: int) -> np.ndarray:
        """Tokens per expert in each MoE layer for ``T`` tokens (each ≤ T)."""
        if self._trace is not None:
            n = T * self.k
            idx = (self._pos + np.arange(n * self.L)) % len(self._trace)
            self._pos = int((self._pos + n * self.L) % len(self._trace))
            ids = self._trace[idx].reshape(self.L, n)
            return np.stack([np.bincount(r, minlength=self.E)[:self.E] for r in ids])
        return self._rng.binomial(T, self.pi)


def eplb_placement(expected: np.ndarray, ep: int, redundant: int = 0) -> np.ndarray:
    """Slots of each EP rank, an ``(ep, (E + R)/ep)`` array of expert ids (module docstring).
    ``expected``: expected load per expert (any scale)."""
    E = len(expected)
    if (E + redundant) % ep:
        raise ValueError(f"{E} experts + {redundant} redundant do not split over {ep} ranks")
    if redundant == 0:
        return np.arange(E).reshape(ep, E // ep)
    copies = np.ones(E, dtype=np.int64)
    w = np.asarray(expected, dtype=float)
    for _ in range(redundant):
        copies[int(np.argmax(w / copies))] += 1
    slots = np.repeat(np.arange(E), copies)
    slot_w = (w / copies)[slots]
    per = (E + redundant) // ep
    out = np.empty((ep, per), dtype=np.int64)
    fill = np.zeros(ep, dtype=np.int64)
    rank_w = np.zeros(ep)
    for s in np.argsort(-slot_w, kind="stable"):
        open_ranks = np.flatnonzero(fill < per)
        r = open_ranks[np.argmin(rank_w[open_ranks])]
        out[r, fill[r]] = slots[s]
        fill[r] += 1
        rank_w[r] += slot_w[s]
    return out


def rank_expected_loads(placement: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Expected rows per EP rank, ``(ep,)``, of a placement (:func:`eplb_placement`): each
    expert's expected load split evenly over its replicas, summed over the rank's slots."""
    copies = np.bincount(placement.ravel(), minlength=len(expected))
    return (np.asarray(expected, dtype=float) / copies)[placement].sum(axis=1)


def max_over_mean(rows: np.ndarray) -> float:
    """Load imbalance over the last axis: the busiest rank's rows over the mean rank's rows,
    averaged over any leading axes (layers); 1.0 when every rank gets the same."""
    rows = np.asarray(rows, dtype=float)
    return float(np.mean(rows.max(axis=-1) / rows.mean(axis=-1)))


class SlotMap:
    """Per MoE layer placements (:func:`eplb_placement`) precomputed for :meth:`rank_loads`."""

    def __init__(self, placements: list[np.ndarray]) -> None:
        self.shape = placements[0].shape                       # (ep, slots per rank)
        self.flat = np.stack([p.ravel() for p in placements])  # (L, S) expert of each slot
        E = int(self.flat.max()) + 1
        self.copies = np.stack([np.bincount(f, minlength=E) for f in self.flat])
        order = np.zeros_like(self.flat)
        for i, f in enumerate(self.flat):                      # replica index of each slot
            seen: dict[int, int] = {}
            for j, x in enumerate(f):
                order[i, j] = seen.get(int(x), 0)
                seen[int(x)] = order[i, j] + 1
        self.order = order
        self._slot_copies = np.take_along_axis(self.copies, self.flat, axis=1)  # (L, S)
        self._index: tuple[int, np.ndarray] | None = None   # (E, flat index of each slot)

    def rank_loads(self, loads: np.ndarray) -> np.ndarray:
        """Rows per slot, ``(..., L, ep, slots)``, from per-expert loads ``(..., L, E)`` (leading
        axes: iterations): each expert's load split evenly over its replicas (remainders to the
        first replicas)."""
        L, E = loads.shape[-2:]
        if self._index is None or self._index[0] != E:
            self._index = (E, (np.arange(L)[:, None] * E + self.flat).ravel())
        lo = np.take(loads.reshape(*loads.shape[:-2], L * E), self._index[1], axis=-1)
        lo = np.ascontiguousarray(lo).reshape(*loads.shape[:-2], *self.flat.shape)
        cp = self._slot_copies
        out = lo // cp + ((lo % cp) > self.order)
        return out.reshape(*loads.shape[:-1], *self.shape)


def miss_probability(E: int, k: int, m: int) -> float:
    """Chance that none of a token's k distinct (uniform) experts is among ``m`` given experts:
    ``C(E − m, k)/C(E, k)``."""
    return math.comb(E - m, k) / math.comb(E, k) if E - m >= k else 0.0


def a2a_bytes(tokens: float, d: int, elem_bytes: float, E: int, k: int, ep: int,
              ranks_per_node: int, mode: Literal["flat", "deepep"]) -> tuple[float, float]:
    """(inter-node, intra-node) bytes leaving one EP rank in one dispatch (or combine) of
    ``tokens`` tokens (module docstring). ``flat`` returns all of it as the first term."""
    if ep <= 1:
        return 0.0, 0.0
    if mode == "flat":
        return tokens * k * (1 - 1 / ep) * d * elem_bytes, 0.0
    g = min(ranks_per_node, ep)
    nodes = ep // g
    inter = tokens * (nodes - 1) * (1 - miss_probability(E, k, E // nodes)) * d * elem_bytes
    intra = tokens * (g - 1) * (1 - miss_probability(E, k, E // ep)) * d * elem_bytes
    return inter, intra
