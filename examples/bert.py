"""A BERT-style encoder (tilewright example): ``make()`` returns the module and its token ids.

The BERT layout (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers"):
token + position embeddings, LayerNorm, then post-LN encoder layers of multi-head self-attention
(``nn.MultiheadAttention``) and a GELU feed-forward, each with a residual and a LayerNorm — built
from ``nn.TransformerEncoderLayer`` (``norm_first=False``, ``activation="gelu"``) at a small size
(2 layers, d_model 32, 4 heads, FFN 64, 16 tokens).

    tilewright compile --model examples/bert.py:make --arch configs/ws16x16.yaml
"""

import torch
from torch import nn


class BertEncoder(nn.Module):
    def __init__(self, vocab: int = 100, seq: int = 16, d: int = 32, heads: int = 4,
                 ffn: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=False)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.norm(self.tok(ids) + self.pos))


def make():
    """(BERT-style encoder in eval mode, token ids [1, 16]), seed 0."""
    torch.manual_seed(0)
    return BertEncoder().eval(), (torch.randint(0, 100, (1, 16)),)
