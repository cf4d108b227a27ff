"""A ViT-style encoder (tilewright example): ``make()`` returns the module and one image.

The ViT layout (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words"): a patch embedding
(a convolution with kernel = stride = patch), a class token and learned position embeddings,
pre-LN encoder layers (LayerNorm, multi-head self-attention through
``F.scaled_dot_product_attention``, LayerNorm, tanh-GELU MLP), a final LayerNorm and a linear head
on the class token — at a small size (32x32 image, 8x8 patches, d_model 32, 4 heads, 2 layers).

    tilewright compile --model examples/vit.py:make --arch configs/ws16x16.yaml
"""

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, mlp), nn.GELU(approximate="tanh"), nn.Linear(mlp, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image: int = 32, patch: int = 8, d: int = 32, heads: int = 4,
                 mlp: int = 64, layers: int = 2, classes: int = 10) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, d, patch, patch)
        n = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.blocks = nn.Sequential(*(Block(d, heads, mlp) for _ in range(layers)))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def make():
    """(ViT-style encoder in eval mode, one 1x3x32x32 image), seed 0."""
    torch.manual_seed(0)
    return ViT().eval(), (torch.randn(1, 3, 32, 32),)
