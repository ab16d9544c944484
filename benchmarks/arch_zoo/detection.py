"""Detectors with their post-processing in the graph, as torchvision exports them:

- SSDLite320-MobileNetV3-Large (Liu et al.; Howard et al. §6.2): MobileNetV3-large features at
  stride 16 (the expansion of the first stride-32 block) and 32, four extra blocks, depthwise-
  separable heads, 6 default boxes per location, 91 classes; softmax, box decoding, top 300
  per class, score > 0.001, class-aware NMS (IoU 0.55), at most 300 detections. The top-k
  runs on all classes at once instead of torchvision's per-class Python loop.
- Faster R-CNN on MobileNetV2 features (torchvision's documented single-feature-map example):
  RPN with 5 sizes × 3 ratios, top 1000 proposals, NMS 0.7, the best 100 kept (torchvision
  keeps 1000: reduced so the 64 M-weight box head's FC runs on 100 regions), RoiAlign 7×7,
  TwoMLPHead 1024, class-aware NMS 0.5 over score > 0.05, at most 100 detections.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .common import ConvBNAct
from .detection_ops import nms, roi_align
from .mobile import V3_LARGE, MobileNetV2, v3_blocks

CLIP = math.log(1000.0 / 16)


def decode(deltas: torch.Tensor, anchors: torch.Tensor, weights: tuple[float, ...]) -> torch.Tensor:
    """Box deltas (dx, dy, dw, dh) against x1 y1 x2 y2 anchors -> x1 y1 x2 y2 boxes."""
    wa = anchors[..., 2] - anchors[..., 0]
    ha = anchors[..., 3] - anchors[..., 1]
    cx = anchors[..., 0] + 0.5 * wa + deltas[..., 0] / weights[0] * wa
    cy = anchors[..., 1] + 0.5 * ha + deltas[..., 1] / weights[1] * ha
    w = torch.exp((deltas[..., 2] / weights[2]).clamp(max=CLIP)) * wa
    h = torch.exp((deltas[..., 3] / weights[3]).clamp(max=CLIP)) * ha
    return torch.stack((cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h), -1)


def class_aware_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    labels: torch.Tensor,
    iou: float,
    limit: int,
    size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torchvision's batched_nms: boxes of different classes are moved apart so that one NMS
    never compares them (by the image size, as boxes are clipped to it, where torchvision
    uses the largest coordinate); the best `limit` survivors."""
    offsets = labels.to(boxes.dtype) * (size + 1)
    keep = nms(boxes + offsets[:, None], scores, iou)[:limit]
    return boxes[keep], scores[keep], labels[keep]


def grid_anchors(size: int, stride: int, shapes: list[tuple[float, float]]) -> torch.Tensor:
    """[size*size*len(shapes), 4] anchors centred on each cell, shapes (w, h) in pixels."""
    c = (torch.arange(size, dtype=torch.float32) + 0.5) * stride
    cy, cx = torch.meshgrid(c, c, indexing="ij")
    wh = torch.tensor(shapes)
    ctr = torch.stack((cx, cy), -1).reshape(-1, 1, 2)
    return torch.cat((ctr - wh / 2, ctr + wh / 2), -1).reshape(-1, 4)


def separable(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(ConvBNAct(cin, cin, 3, groups=cin, act=nn.ReLU6), nn.Conv2d(cin, cout, 1))


def extra_block(cin: int, cout: int) -> nn.Sequential:
    mid = cout // 2
    return nn.Sequential(
        ConvBNAct(cin, mid, 1, act=nn.ReLU6),
        ConvBNAct(mid, mid, 3, 2, groups=mid, act=nn.ReLU6),
        ConvBNAct(mid, cout, 1, act=nn.ReLU6),
    )


class SSDLite(nn.Module):
    SIZE, CLASSES, ANCHORS = 320, 91, 6

    def __init__(self) -> None:
        super().__init__()
        layers, _ = v3_blocks(V3_LARGE)
        # layers[13] is the first stride-32 block: its expansion output is the stride-16 map
        self.stage1 = nn.Sequential(*layers[:13], layers[13].block[0])
        self.stage2 = nn.Sequential(
            *layers[13].block[1:], *layers[14:], ConvBNAct(160, 960, 1, act=nn.Hardswish)
        )
        self.extra = nn.ModuleList(
            extra_block(a, b) for a, b in ((960, 512), (512, 256), (256, 256), (256, 128))
        )
        widths = (672, 960, 512, 256, 256, 128)
        self.cls = nn.ModuleList(separable(c, self.ANCHORS * self.CLASSES) for c in widths)
        self.reg = nn.ModuleList(separable(c, self.ANCHORS * 4) for c in widths)
        # a trained head is confident and mostly says background: with PyTorch's default init
        # every one of the 90 × 3234 class scores is about 1/91 and all pass the 0.001 threshold
        for head in self.cls:
            head[1].weight.data *= 30
            head[1].bias.data.view(self.ANCHORS, self.CLASSES)[:, 0] = 14.0
        self.register_buffer("anchors", self.default_boxes(), persistent=False)

    def default_boxes(self) -> torch.Tensor:
        """SSD's default boxes: scales 0.2..0.95 over the six maps, aspect ratios 1, 2, 3."""
        maps = (20, 10, 5, 3, 2, 1)
        scales = [0.2 + (0.95 - 0.2) * k / (len(maps) - 1) for k in range(len(maps))] + [1.0]
        out = []
        for k, n in enumerate(maps):
            s, s2 = scales[k], math.sqrt(scales[k] * scales[k + 1])
            shapes = [(s, s), (s2, s2)]
            for r in (2.0, 3.0):
                q = math.sqrt(r)
                shapes += [(s * q, s / q), (s / q, s * q)]
            px = [(w * self.SIZE, h * self.SIZE) for w, h in shapes]
            out.append(grid_anchors(n, self.SIZE / n, px))
        return torch.cat(out)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[anchors, classes] logits and [anchors, 4] box deltas."""
        feats = [self.stage1(x)]
        feats.append(self.stage2(feats[0]))
        for blk in self.extra:
            feats.append(blk(feats[-1]))
        logits = torch.cat([h(f).permute(0, 2, 3, 1).reshape(1, -1, self.CLASSES)
                            for h, f in zip(self.cls, feats, strict=True)], 1)[0]  # fmt: skip
        deltas = torch.cat([h(f).permute(0, 2, 3, 1).reshape(1, -1, 4)
                            for h, f in zip(self.reg, feats, strict=True)], 1)[0]  # fmt: skip
        return logits, deltas

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, deltas = self.heads(x)
        boxes = decode(deltas, self.anchors, (10.0, 10.0, 5.0, 5.0)).clamp(0, self.SIZE)
        scores = F.softmax(logits, -1)[:, 1:].t()  # [classes - 1, anchors]
        top, idx = scores.topk(300, dim=1)
        labels = torch.arange(1, self.CLASSES).unsqueeze(1).expand_as(idx)
        top, idx, labels = top.flatten(), idx.flatten(), labels.flatten()
        keep = top > 0.001
        return class_aware_nms(boxes[idx[keep]], top[keep], labels[keep], 0.55, 300, self.SIZE)


class FasterRCNN(nn.Module):
    SIZE, CLASSES, STRIDE = 320, 91, 32
    SIZES, RATIOS = (32, 64, 128, 256, 512), (0.5, 1.0, 2.0)

    def __init__(self) -> None:
        super().__init__()
        self.backbone = MobileNetV2().features
        a = len(self.SIZES) * len(self.RATIOS)
        self.rpn_conv = nn.Conv2d(1280, 1280, 3, padding=1)
        self.rpn_cls = nn.Conv2d(1280, a, 1)
        self.rpn_reg = nn.Conv2d(1280, 4 * a, 1)
        self.fc6 = nn.Linear(1280 * 7 * 7, 1024)
        self.fc7 = nn.Linear(1024, 1024)
        self.cls = nn.Linear(1024, self.CLASSES)
        self.reg = nn.Linear(1024, 4 * self.CLASSES)
        # trained heads are confident; with PyTorch's default init every class scores about
        # 1/91 and nothing passes the 0.05 threshold, leaving the last NMS nothing to do
        for fc in (self.fc6, self.fc7):
            nn.init.kaiming_normal_(fc.weight)
        nn.init.normal_(self.cls.weight, std=0.5)
        shapes = []
        for r in self.RATIOS:  # torchvision's order: ratios outer, sizes inner
            for s in self.SIZES:
                shapes.append((s / math.sqrt(r), s * math.sqrt(r)))
        anchors = grid_anchors(self.SIZE // self.STRIDE, self.STRIDE, shapes)
        self.register_buffer("anchors", anchors, persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = self.backbone(x)
        t = F.relu(self.rpn_conv(f))
        objectness = self.rpn_cls(t).permute(0, 2, 3, 1).reshape(-1)
        deltas = self.rpn_reg(t).permute(0, 2, 3, 1).reshape(-1, 4)
        proposals = decode(deltas, self.anchors, (1.0, 1.0, 1.0, 1.0)).clamp(0, self.SIZE)
        top, idx = objectness.topk(1000)
        keep = nms(proposals[idx], top, 0.7)[:100]
        rois = proposals[idx[keep]]
        pooled = roi_align(f, rois, torch.zeros_like(keep), 1.0 / self.STRIDE, 7, 2)
        h = F.relu(self.fc7(F.relu(self.fc6(pooled.flatten(1)))))
        scores = F.softmax(self.cls(h), -1)[:, 1:]
        d = self.reg(h).reshape(-1, self.CLASSES, 4)[:, 1:]
        boxes = decode(d, rois[:, None, :], (10.0, 10.0, 5.0, 5.0)).clamp(0, self.SIZE)
        labels = torch.arange(1, self.CLASSES).expand_as(scores)
        boxes, scores, labels = boxes.reshape(-1, 4), scores.flatten(), labels.flatten()
        keep = scores > 0.05
        return class_aware_nms(boxes[keep], scores[keep], labels[keep], 0.5, 100, self.SIZE)
