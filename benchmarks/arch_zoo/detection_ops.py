"""NonMaxSuppression and RoiAlign as PyTorch custom ops that both exporters turn into the
ONNX operators of the same names, as torchvision's `nms` and `roi_align` export.

The eager kernels are plain PyTorch (greedy NMS; RoiAlign with half-pixel sample points,
bilinear, `sampling_ratio`² points averaged per bin): they only run when the legacy exporter
traces the module. The benchmark's reference is ONNX Runtime on the exported graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.onnx import symbolic_helper

MAX_BOXES = 1 << 30  # NonMaxSuppression's max_output_boxes_per_class: no limit


@torch.library.custom_op("arch_zoo::nms", mutates_args=())
def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of the boxes ([N, 4] x1 y1 x2 y2) kept by greedy NMS, by decreasing score."""
    b = boxes.detach().double().numpy()
    order = np.argsort(-scores.detach().numpy(), kind="stable")
    area = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    keep = []
    while order.size:  # one pass per kept box
        i, order = order[0], order[1:]
        keep.append(int(i))
        lo = np.maximum(b[i, :2], b[order, :2])
        hi = np.minimum(b[i, 2:], b[order, 2:])
        inter = np.clip(hi - lo, 0, None).prod(1)
        iou = inter / np.maximum(area[i] + area[order] - inter, 1e-12)
        order = order[iou <= iou_threshold]
    return torch.tensor(keep, dtype=torch.int64)


@nms.register_fake
def _nms_fake(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    n = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((n,), dtype=torch.int64)


@torch.library.custom_op("arch_zoo::roi_align", mutates_args=())
def roi_align(
    feat: torch.Tensor,
    boxes: torch.Tensor,
    batch_index: torch.Tensor,
    spatial_scale: float,
    output_size: int,
    sampling_ratio: int,
) -> torch.Tensor:
    """[K, C, output_size, output_size] averages of bilinear samples inside each box."""
    k = boxes.shape[0]
    _, _, h, w = feat.shape
    s, r = output_size, sampling_ratio
    b = boxes * spatial_scale - 0.5
    steps = (torch.arange(s * r, dtype=feat.dtype) + 0.5) / (s * r)  # inside [0, 1]
    xs = b[:, 0:1] + steps * (b[:, 2:3] - b[:, 0:1])  # [K, s*r]
    ys = b[:, 1:2] + steps * (b[:, 3:4] - b[:, 1:2])
    gx = (2 * xs + 1) / w - 1  # align_corners=False normalisation
    gy = (2 * ys + 1) / h - 1
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), -1)
    samples = F.grid_sample(feat[batch_index], grid, align_corners=False)
    return F.avg_pool2d(samples, r).reshape(k, feat.shape[1], s, s)


@roi_align.register_fake
def _roi_align_fake(feat, boxes, batch_index, spatial_scale, output_size, sampling_ratio):
    return feat.new_empty((boxes.shape[0], feat.shape[1], output_size, output_size))


# --- the legacy (TorchScript) exporter


@symbolic_helper.parse_args("v", "v", "f")
def _nms_symbolic(g: Any, boxes: Any, scores: Any, iou_threshold: float) -> Any:
    const = lambda v: g.op("Constant", value_t=v)  # noqa: E731
    b = g.op("Unsqueeze", boxes, const(torch.tensor([0])))
    s = g.op("Unsqueeze", scores, const(torch.tensor([0, 1])))
    sel = g.op(
        "NonMaxSuppression",
        b,
        s,
        const(torch.tensor([MAX_BOXES])),
        const(torch.tensor([iou_threshold], dtype=torch.float32)),
    )
    return g.op("Gather", sel, const(torch.tensor(2)), axis_i=1)


@symbolic_helper.parse_args("v", "v", "v", "f", "i", "i")
def _roi_align_symbolic(g, feat, boxes, batch_index, spatial_scale, output_size, sampling_ratio):
    return g.op(
        "RoiAlign",
        feat,
        boxes,
        batch_index,
        spatial_scale_f=spatial_scale,
        output_height_i=output_size,
        output_width_i=output_size,
        sampling_ratio_i=sampling_ratio,
    )


def register_legacy_symbolics(opset: int) -> None:
    torch.onnx.register_custom_op_symbolic("arch_zoo::nms", _nms_symbolic, opset)
    torch.onnx.register_custom_op_symbolic("arch_zoo::roi_align", _roi_align_symbolic, opset)


# --- the dynamo exporter (onnxscript)


def dynamo_translations() -> dict[Any, Any]:
    from onnxscript import opset18 as op

    def nms_onnx(boxes, scores, iou_threshold: float):
        sel = op.NonMaxSuppression(
            op.Unsqueeze(boxes, [0]),
            op.Unsqueeze(scores, [0, 1]),
            op.Constant(value_ints=[MAX_BOXES]),
            op.Constant(value_floats=[iou_threshold]),
        )
        return op.Gather(sel, op.Constant(value_int=2), axis=1)

    def roi_align_onnx(feat, boxes, batch_index, spatial_scale: float, output_size: int,
                       sampling_ratio: int):  # fmt: skip
        return op.RoiAlign(
            feat,
            boxes,
            batch_index,
            spatial_scale=spatial_scale,
            output_height=output_size,
            output_width=output_size,
            sampling_ratio=sampling_ratio,
        )

    return {
        torch.ops.arch_zoo.nms.default: nms_onnx,
        torch.ops.arch_zoo.roi_align.default: roi_align_onnx,
    }
