"""Building blocks shared by the zoo's convolutional networks."""

from __future__ import annotations

import torch
from torch import nn


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of `divisor`, never below 90 % of `v` (the
    MobileNet/EfficientNet reference code's rule)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNAct(nn.Sequential):
    """Conv2d (no bias) + BatchNorm2d + activation (None: no activation)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int = 3,
        stride: int = 1,
        groups: int = 1,
        act: type[nn.Module] | None = nn.ReLU,
        dilation: int = 1,
    ) -> None:
        pad = (kernel - 1) // 2 * dilation
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride, pad, dilation=dilation, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        ]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


class SqueezeExcite(nn.Module):
    """Global average pool, 1×1 conv down, activation, 1×1 conv up, gate, scale."""

    def __init__(
        self,
        channels: int,
        squeeze: int,
        act: type[nn.Module] = nn.ReLU,
        gate: type[nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.act = act()
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class InvertedResidual(nn.Module):
    """MobileNetV2-style block: optional 1×1 expansion, k×k depthwise, optional
    squeeze-excitation, linear 1×1 projection; residual when shapes allow."""

    def __init__(
        self,
        cin: int,
        expanded: int,
        cout: int,
        kernel: int,
        stride: int,
        act: type[nn.Module],
        se: nn.Module | None = None,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(ConvBNAct(cin, expanded, 1, act=act))
        layers.append(ConvBNAct(expanded, expanded, kernel, stride, groups=expanded, act=act))
        if se is not None:
            layers.append(se)
        layers.append(ConvBNAct(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class ClassifierHead(nn.Module):
    """Global average pool, flatten, dropout (identity in eval), linear."""

    def __init__(self, cin: int, classes: int = 1000, hidden: int = 0, act=nn.Hardswish) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if hidden:
            layers += [nn.Linear(cin, hidden), act(), nn.Dropout(0.2)]
            cin = hidden
        layers += [nn.Dropout(0.2), nn.Linear(cin, classes)]
        self.fc = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(x.mean((2, 3)), 1))


def init_random(model: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights, and BatchNorm statistics that keep activations of order one through
    deep stacks (a fresh BatchNorm is the identity; random running stats make the graph's
    constant folding and fusions do real work)."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(n, generator=g) * 0.5 + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
    return model.eval()
