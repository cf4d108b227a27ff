"""One step of a whole language model as one torch module, and torch's fp32 greedy decoding.

:class:`LMStep` wraps a :class:`~tilewright.models.transformer.CausalLM` (built by
:func:`~tilewright.models.llm_configs.build_lm`) so that a prefill and every decode step is one
``torch.export``-able call: token ids in, the last position's logits and every layer's state out.
A layer's state is its pair of recurrent tensors — ``(k_cache, v_cache)`` [B, Hkv, T, hd] of an
attention layer (Llama, MoE with attention), ``(conv_state, ssm_state)`` of a Mamba layer — which
each layer already takes and returns (``layer(x, s1, s2) -> (y, s1', s2', ...)``).

:func:`greedy_tokens_torch` is the fp32 reference the ``generate`` command checks against: it
recomputes the whole sequence with :meth:`CausalLM.forward` at every step (no cache at all), so
it shares no state handling with :class:`LMStep`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tilewright.models.transformer import CausalLM

__all__ = ["LMStep", "greedy_tokens_torch"]


class LMStep(nn.Module):
    """``step(ids [B, S] int64, *states) -> (logits [B, 1, vocab] of the last position,
    *states')``: embedding, every layer with its state (none on the first call: a prefill),
    the final norm and the LM head on the last position only (what greedy decoding reads).
    ``states`` holds two tensors per layer, in layer order."""

    def __init__(self, lm: CausalLM) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, ids: Tensor, *states: Tensor) -> tuple[Tensor, ...]:
        lm = self.lm
        if states and len(states) != 2 * len(lm.layers):
            raise ValueError(f"{len(states)} state tensors for {len(lm.layers)} layers (two each)")
        h = lm.embed(ids)
        new: list[Tensor] = []
        for i, layer in enumerate(lm.layers):
            out = layer(h, *states[2 * i:2 * i + 2])
            h = out[0]
            new += [out[1], out[2]]
        h = lm.norm(h[:, -1:])
        logits = h @ lm.embed.weight.t() if lm.lm_head is None else lm.lm_head(h)
        return (logits, *new)


@torch.no_grad()
def greedy_tokens_torch(lm: CausalLM, prompt: list[int], tokens: int
                        ) -> tuple[list[int], list[Tensor]]:
    """fp32 greedy decoding by :meth:`CausalLM.forward` over the whole sequence at each step:
    ``(the ``tokens`` generated ids, the last position's logits [vocab] of each step)``."""
    seq = list(prompt)
    out, logits = [], []
    for _ in range(tokens):
        z = lm(torch.tensor([seq]))[0, -1]
        nxt = int(torch.argmax(z))
        out.append(nxt)
        logits.append(z)
        seq.append(nxt)
    return out, logits
