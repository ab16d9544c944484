"""DeepLabV3 (Chen et al.) on a dilated ResNet-50: output stride 8 (layer3 dilation 2,
layer4 dilation 4), ASPP with rates 12/24/36 and image pooling, 21 classes, bilinear resize
back to the input size (torchvision's `deeplabv3_resnet50` without the auxiliary head)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .common import ConvBNAct


class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int, dilation: int) -> None:
        super().__init__()
        cout = mid * 4
        self.a = ConvBNAct(cin, mid, 1)
        self.b = ConvBNAct(mid, mid, 3, stride, dilation=dilation)
        self.c = ConvBNAct(mid, cout, 1, act=None)
        self.down = (
            ConvBNAct(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c(self.b(self.a(x)))
        return F.relu(y + (x if self.down is None else self.down(x)))


def resnet50_dilated() -> nn.Sequential:
    layers: list[nn.Module] = [ConvBNAct(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin, dilation = 64, 1
    # (blocks, width, stride, replace stride with dilation)
    for n, mid, stride, dilate in ((3, 64, 1, False), (4, 128, 2, False), (6, 256, 2, True),
                                   (3, 512, 2, True)):  # fmt: skip
        prev = dilation
        if dilate:
            dilation, stride = dilation * stride, 1
        for i in range(n):
            # the first block keeps the previous dilation (torchvision's ResNet)
            layers.append(
                Bottleneck(cin, mid, stride if i == 0 else 1, prev if i == 0 else dilation)
            )
            cin = mid * 4
    return nn.Sequential(*layers)


class ASPP(nn.Module):
    def __init__(self, cin: int, rates: tuple[int, ...] = (12, 24, 36), cout: int = 256) -> None:
        super().__init__()
        self.branches = nn.ModuleList(
            [ConvBNAct(cin, cout, 1)] + [ConvBNAct(cin, cout, 3, dilation=r) for r in rates]
        )
        self.pool = ConvBNAct(cin, cout, 1)
        self.project = ConvBNAct(cout * (len(rates) + 2), cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [b(x) for b in self.branches]
        p = self.pool(F.adaptive_avg_pool2d(x, 1))
        outs.append(F.interpolate(p, size=x.shape[-2:], mode="bilinear", align_corners=False))
        return self.project(torch.cat(outs, 1))  # dropout 0.5 here: identity in eval


class DeepLabV3(nn.Module):
    def __init__(self, classes: int = 21) -> None:
        super().__init__()
        self.backbone = resnet50_dilated()
        self.head = nn.Sequential(ASPP(2048), ConvBNAct(256, 256, 3), nn.Conv2d(256, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.head(self.backbone(x))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)
