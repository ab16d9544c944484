"""Transformers: ViT-S/16, Swin-T, a BERT-base encoder and a GPT-2 (small) decoder.

Attention is `F.scaled_dot_product_attention`, as current PyTorch model code writes it (the
exporters lower it to MatMul/Softmax), except Swin's window attention (see there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Sequential):
    def __init__(self, dim: int, hidden: int, approximate: str = "none") -> None:
        super().__init__(nn.Linear(dim, hidden), nn.GELU(approximate), nn.Linear(hidden, dim))


class PreNormBlock(nn.Module):
    """x + attn(LN(x)), then x + mlp(LN(x)): ViT and GPT-2."""

    def __init__(self, dim: int, heads: int, eps: float, approximate: str = "none") -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, eps=eps)
        self.attn = SelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, 4 * dim, approximate)

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), causal=causal)
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    """ViT-S/16 by default (Dosovitskiy et al.; DeiT-S dims): 12 pre-norm blocks, class token."""

    def __init__(
        self, dim: int = 384, depth: int = 12, heads: int = 6, classes: int = 1000
    ) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 197, dim) * 0.02)
        self.blocks = nn.ModuleList(PreNormBlock(dim, heads, 1e-6) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.fc(self.norm(x)[:, 0])


class BertLayer(nn.Module):
    """Post-norm: LN(x + attn(x)), LN(x + ffn(x)); GELU with erf."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = SelfAttention(dim, heads)
        self.ln1 = nn.LayerNorm(dim, eps=1e-12)
        self.mlp = Mlp(dim, 4 * dim)
        self.ln2 = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.mlp(x))


class Bert(nn.Module):
    """BERT-base (12 layers, 768 wide, 12 heads, vocabulary 30522) with its tanh pooler; inputs
    are token ids and the padding mask, as a tokenizer hands them over."""

    def __init__(
        self, dim: int = 768, depth: int = 12, heads: int = 12, vocab: int = 30522
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(512, dim)
        self.typ = nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(dim, heads) for _ in range(depth))
        self.pool = nn.Linear(dim, dim)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = ids.shape[1]
        pos = torch.arange(n, device=ids.device).unsqueeze(0)
        x = self.ln(self.tok(ids) + self.pos(pos) + self.typ(torch.zeros_like(ids)))
        # additive mask: 0 where attended, a large negative where padded
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pool(x[:, 0]))


class GPT2(nn.Module):
    """GPT-2 small (12 layers, 768 wide, 12 heads, vocabulary 50257): pre-norm, tanh GELU,
    causal attention, the LM head tied to the token embedding."""

    def __init__(
        self, dim: int = 768, depth: int = 12, heads: int = 12, vocab: int = 50257
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(1024, dim)
        self.blocks = nn.ModuleList(PreNormBlock(dim, heads, 1e-5, "tanh") for _ in range(depth))
        self.ln = nn.LayerNorm(dim, eps=1e-5)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.01)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.tok(ids) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x, causal=True)
        return self.ln(x) @ self.tok.weight.t()


def window_partition(x: torch.Tensor, w: int) -> torch.Tensor:
    b, h, wd, c = x.shape
    x = x.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, w * w, c)


def window_reverse(x: torch.Tensor, w: int, h: int, wd: int) -> torch.Tensor:
    c = x.shape[-1]
    x = x.view(-1, h // w, wd // w, w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, wd, c)


class WindowAttention(nn.Module):
    """Attention inside w×w windows with a learned relative position bias."""

    def __init__(self, dim: int, heads: int, w: int) -> None:
        super().__init__()
        self.heads, self.w = heads, w
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias_table = nn.Parameter(torch.randn((2 * w - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij"))
        rel = (coords.flatten(1)[:, :, None] - coords.flatten(1)[:, None, :]).permute(1, 2, 0)
        index = (rel[..., 0] + w - 1) * (2 * w - 1) + rel[..., 1] + w - 1
        self.register_buffer("index", index.flatten(), persistent=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        bias = self.bias_table[self.index].view(n, n, -1).permute(2, 0, 1).unsqueeze(0)
        if mask is not None:  # [windows, n, n] -> [b, heads, n, n], windows vary fastest in b
            nw = mask.shape[0]
            bias = (bias + mask.unsqueeze(1)).repeat(b // nw, 1, 1, 1)
        # explicit attention, as torchvision's Swin writes it (with SDPA and this mask,
        # torch 2.13's dynamo exporter fails in its decompositions: a reshape lowered to view)
        q = qkv[0] * (c // self.heads) ** -0.5
        attn = torch.softmax(q @ qkv[1].transpose(-2, -1) + bias, -1)
        return self.proj((attn @ qkv[2]).transpose(1, 2).reshape(b, n, c))


def shift_mask(h: int, wd: int, w: int, s: int) -> torch.Tensor:
    """The additive mask that keeps a shifted window's regions from attending to each other."""
    img = torch.zeros(1, h, wd, 1)
    cnt = 0
    for hs in (slice(0, -w), slice(-w, -s), slice(-s, None)):
        for ws in (slice(0, -w), slice(-w, -s), slice(-s, None)):
            img[:, hs, ws, :] = cnt
            cnt += 1
    win = window_partition(img, w).squeeze(-1)
    diff = win.unsqueeze(1) - win.unsqueeze(2)
    return diff.ne(0).float() * -100.0


class SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, res: int, w: int, shift: int) -> None:
        super().__init__()
        if res <= w:  # the window covers the whole map: no shift (Liu et al.)
            w, shift = res, 0
        self.w, self.shift, self.res = w, shift, res
        self.ln1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, w)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)
        mask = shift_mask(res, res, w, shift) if shift else None
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        r, w, s = self.res, self.w, self.shift
        y = self.ln1(x).view(b, r, r, c)
        if s:
            y = torch.roll(y, (-s, -s), (1, 2))
        y = window_reverse(self.attn(window_partition(y, w), self.mask), w, r, r)
        if s:
            y = torch.roll(y, (s, s), (1, 2))
        x = x + y.reshape(b, n, c)
        return x + self.mlp(self.ln2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim: int, res: int) -> None:
        super().__init__()
        self.res = res
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, c = x.shape
        x = x.view(b, self.res, self.res, c)
        parts = (x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2])
        x = torch.cat(parts, -1).view(b, -1, 4 * c)
        return self.reduction(self.norm(x))


class SwinT(nn.Module):
    """Swin-T (Liu et al.): patch 4, window 7, dims 96·2^i, depths (2, 2, 6, 2), heads
    (3, 6, 12, 24); every second block of a stage shifts its windows by 3."""

    def __init__(self, depths: tuple[int, ...] = (2, 2, 6, 2), classes: int = 1000) -> None:
        super().__init__()
        dim, res, w = 96, 56, 7
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.patch_norm = nn.LayerNorm(dim)
        layers: list[nn.Module] = []
        for i, (d, heads) in enumerate(zip(depths, (3, 6, 12, 24), strict=True)):
            if i:
                layers.append(PatchMerging(dim, res))
                dim, res = dim * 2, res // 2
            layers += [SwinBlock(dim, heads, res, w, 0 if j % 2 == 0 else w // 2) for j in range(d)]
        self.layers = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_norm(self.patch(x).flatten(2).transpose(1, 2))
        return self.fc(self.norm(self.layers(x)).mean(1))
