"""Mobile classification networks: MobileNetV2, MobileNetV3 small/large, EfficientNet-B0 and
MnasNet 1.0, at their published default widths (1000 classes, 224×224)."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from .common import ClassifierHead, ConvBNAct, InvertedResidual, SqueezeExcite, make_divisible


class MobileNetV2(nn.Module):
    # expansion t, channels c, repeats n, first stride s (Sandler et al., table 2)
    CONFIG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
              (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNAct(3, 32, 3, 2, act=nn.ReLU6)]
        cin = 32
        for t, c, n, s in self.CONFIG:
            for i in range(n):
                layers.append(InvertedResidual(cin, cin * t, c, 3, s if i == 0 else 1, nn.ReLU6))
                cin = c
        layers.append(ConvBNAct(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


RE, HS = nn.ReLU, nn.Hardswish
# kernel, expanded, out, squeeze-excite, activation, stride (Howard et al., tables 1 and 2)
V3_LARGE = ((3, 16, 16, False, RE, 1), (3, 64, 24, False, RE, 2), (3, 72, 24, False, RE, 1),
            (5, 72, 40, True, RE, 2), (5, 120, 40, True, RE, 1), (5, 120, 40, True, RE, 1),
            (3, 240, 80, False, HS, 2), (3, 200, 80, False, HS, 1), (3, 184, 80, False, HS, 1),
            (3, 184, 80, False, HS, 1), (3, 480, 112, True, HS, 1), (3, 672, 112, True, HS, 1),
            (5, 672, 160, True, HS, 2), (5, 960, 160, True, HS, 1),
            (5, 960, 160, True, HS, 1))  # fmt: skip
V3_SMALL = ((3, 16, 16, True, RE, 2), (3, 72, 24, False, RE, 2), (3, 88, 24, False, RE, 1),
            (5, 96, 40, True, HS, 2), (5, 240, 40, True, HS, 1), (5, 240, 40, True, HS, 1),
            (5, 120, 48, True, HS, 1), (5, 144, 48, True, HS, 1), (5, 288, 96, True, HS, 2),
            (5, 576, 96, True, HS, 1), (5, 576, 96, True, HS, 1))  # fmt: skip


def v3_blocks(config: tuple) -> tuple[list[nn.Module], int]:
    """The stem and inverted-residual blocks of a MobileNetV3 config, and its last width."""
    layers: list[nn.Module] = [ConvBNAct(3, 16, 3, 2, act=HS)]
    cin = 16
    for k, exp, out, se, act, s in config:
        gate = SqueezeExcite(exp, make_divisible(exp // 4), nn.ReLU, nn.Hardsigmoid) if se else None
        layers.append(InvertedResidual(cin, exp, out, k, s, act, gate))
        cin = out
    return layers, cin


class MobileNetV3(nn.Module):
    def __init__(self, config: tuple, last: int, hidden: int, classes: int = 1000) -> None:
        super().__init__()
        layers, cin = v3_blocks(config)
        layers.append(ConvBNAct(cin, last, 1, act=HS))
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(last, classes, hidden=hidden, act=HS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


mobilenet_v3_large = partial(MobileNetV3, V3_LARGE, 960, 1280)
mobilenet_v3_small = partial(MobileNetV3, V3_SMALL, 576, 1024)


class EfficientNetB0(nn.Module):
    # expansion, kernel, stride, in, out, repeats (Tan & Le, table 1)
    CONFIG = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
              (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
              (6, 3, 1, 192, 320, 1))  # fmt: skip

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNAct(3, 32, 3, 2, act=nn.SiLU)]
        for e, k, s, cin, cout, n in self.CONFIG:
            for i in range(n):
                c = cin if i == 0 else cout
                se = SqueezeExcite(c * e, max(1, c // 4), nn.SiLU, nn.Sigmoid)
                layers.append(InvertedResidual(c, c * e, cout, k, s if i == 0 else 1, nn.SiLU, se))
        layers.append(ConvBNAct(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class MnasNet(nn.Module):
    """MnasNet-B1 depth multiplier 1.0 (torchvision's `mnasnet1_0`): no squeeze-excitation."""

    # in, out, kernel, stride, expansion, repeats
    CONFIG = ((16, 24, 3, 2, 3, 3), (24, 40, 5, 2, 3, 3), (40, 80, 5, 2, 6, 3),
              (80, 96, 3, 1, 6, 2), (96, 192, 5, 2, 6, 4), (192, 320, 3, 1, 6, 1))  # fmt: skip

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            ConvBNAct(3, 32, 3, 2),
            ConvBNAct(32, 32, 3, 1, groups=32),
            ConvBNAct(32, 16, 1, act=None),
        ]
        for cin, cout, k, s, e, n in self.CONFIG:
            for i in range(n):
                c = cin if i == 0 else cout
                layers.append(InvertedResidual(c, c * e, cout, k, s if i == 0 else 1, nn.ReLU))
        layers.append(ConvBNAct(320, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
