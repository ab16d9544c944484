"""Models for the PopTorch tests. `mobilenet_v2` is torchvision's MobileNetV2 written out
(torchvision's compiled part is not installable here): the same inverted-residual blocks, widths,
strides, ReLU6, BatchNorm, dropout and classifier, and torchvision's weight initialisation, with
random weights instead of pretrained ones."""

from __future__ import annotations

import torch
from torch import nn


def _divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class ConvBNActivation(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(c_in, c_out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = int(round(c_in * expand))
        self.use_res_connect = stride == 1 and c_in == c_out
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvBNActivation(c_in, hidden, kernel=1))
        layers += [
            ConvBNActivation(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, c_out, 1, 1, 0, bias=False),
            nn.BatchNorm2d(c_out),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
               [6, 160, 3, 2], [6, 320, 1, 1]]  # fmt: skip

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0) -> None:
        super().__init__()
        c_in = _divisible(32 * width_mult)
        self.last_channel = _divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNActivation(3, c_in, stride=2)]
        for t, c, n, s in self.SETTING:
            c_out = _divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(c_in, c_out, s if i == 0 else 1, t))
                c_in = c_out
        features.append(ConvBNActivation(c_in, self.last_channel, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(self.last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2(weights: None = None, num_classes: int = 1000) -> MobileNetV2:
    """torchvision.models.mobilenet_v2's signature; pretrained weights are never downloaded."""
    if weights is not None:
        raise ValueError("only weights=None: these tests download nothing")
    return MobileNetV2(num_classes)


class ExampleModelWithLoss(nn.Module):
    """The PopTorch guide's training example: a Linear layer and an MSE loss."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 10)
        self.loss = nn.MSELoss()

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        fc = self.fc(x)
        if self.training:
            return fc, self.loss(fc, target)
        return fc
