"""RegNetY-400MF (grouped convolutions + squeeze-excitation), ShuffleNetV2 1.0× (channel
shuffle) and ConvNeXt-T (7×7 depthwise, LayerNorm, GELU, layer scale)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .common import ClassifierHead, ConvBNAct, SqueezeExcite


class RegNetBlock(nn.Module):
    """Y block: 1×1, 3×3 grouped (group width g) with stride, SE on the block's input width
    × 0.25, 1×1 linear; projection shortcut when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int) -> None:
        super().__init__()
        self.a = ConvBNAct(cin, cout, 1)
        self.b = ConvBNAct(cout, cout, 3, stride, groups=cout // group_width)
        self.se = SqueezeExcite(cout, int(round(0.25 * cin)), nn.ReLU, nn.Sigmoid)
        self.c = ConvBNAct(cout, cout, 1, act=None)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = ConvBNAct(cin, cout, 1, stride, act=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c(self.se(self.b(self.a(x))))
        return F.relu(y + (x if self.proj is None else self.proj(x)))


class RegNetY400MF(nn.Module):
    DEPTHS = (1, 3, 6, 6)
    WIDTHS = (48, 104, 208, 440)
    GROUP_WIDTH = 8

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNAct(3, 32, 3, 2)]
        cin = 32
        for d, w in zip(self.DEPTHS, self.WIDTHS, strict=True):
            for i in range(d):
                layers.append(RegNetBlock(cin, w, 2 if i == 0 else 1, self.GROUP_WIDTH))
                cin = w
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.shape
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(b, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                ConvBNAct(cin, cin, 3, stride, groups=cin, act=None), ConvBNAct(cin, half, 1)
            )
        b2_in = cin if stride > 1 else half
        self.branch2 = nn.Sequential(
            ConvBNAct(b2_in, half, 1),
            ConvBNAct(half, half, 3, stride, groups=half, act=None),
            ConvBNAct(half, half, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNetV2 1.0× (Ma et al., table 5)."""

    REPEATS = (4, 8, 4)
    CHANNELS = (24, 116, 232, 464, 1024)

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNAct(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)]
        cin = 24
        for n, c in zip(self.REPEATS, self.CHANNELS[1:4], strict=True):
            for i in range(n):
                layers.append(ShuffleUnit(cin, c, 2 if i == 0 else 1))
                cin = c
        layers.append(ConvBNAct(cin, self.CHANNELS[-1], 1))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(self.CHANNELS[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean((2, 3)))


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (channels-last round trip)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6) + torch.rand(dim) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXtT(nn.Module):
    DEPTHS = (3, 3, 9, 3)
    DIMS = (96, 192, 384, 768)

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        d0 = self.DIMS[0]
        layers: list[nn.Module] = [nn.Conv2d(3, d0, 4, 4), LayerNorm2d(d0, eps=1e-6)]
        for i, (n, d) in enumerate(zip(self.DEPTHS, self.DIMS, strict=True)):
            if i:
                layers += [
                    LayerNorm2d(self.DIMS[i - 1], eps=1e-6),
                    nn.Conv2d(self.DIMS[i - 1], d, 2, 2),
                ]
            layers += [ConvNeXtBlock(d) for _ in range(n)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(self.DIMS[-1], eps=1e-6)
        self.fc = nn.Linear(self.DIMS[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.norm(self.features(x).mean((2, 3))))


__all__ = ["ClassifierHead", "ConvNeXtT", "RegNetY400MF", "ShuffleNetV2"]
