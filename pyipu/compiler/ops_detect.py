"""Detection ops: NonZero and NonMaxSuppression, whose result sizes depend on the data, and
RoiAlign (opcodes NONZERO, NMS, ROI_ALIGN; docs/bytecode.md).

A data-dependent result is written into a tensor of static capacity (NonZero: the input's
element count; NonMaxSuppression: batches × classes × min(boxes, the constant
max_output_boxes_per_class when it is one)), padded with zeros, and its run-time count is an
int64[1] tensor: dynamic.py carries it to what is computed from the result. An input with a
data-dependent leading dim passes its length to the instruction, which reads only those rows.
"""

from __future__ import annotations

import numpy as np

from pyipu.compiler.dynamic import Dyn, refuse
from pyipu.compiler.errors import UnsupportedDTypeError
from pyipu.compiler.ir import f64_bits
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import register
from pyipu.enums import DType, Op
from pyipu.reference.kernels_detect import ROI_MAX_GRID

# NMS keeps its candidates of one class in a worker's scratch: 12 bytes per box
NMS_MAX_BOXES = (1 << 20) // 12


def _scalar(n: Node, i: int, dtype: DType, what: str, default: np.ndarray) -> int:
    """Input i (one value of `dtype`) as a [1] tensor: a weight when constant or absent."""
    low = n.low
    name = f"{n.outputs[0]}:{what}"
    if not n.has_input(i):
        return low.b.weight(name, default, low.subgraph)
    if n.dtype(i) != dtype:
        raise UnsupportedDTypeError(
            f"{n.label}: input {i} ({what}) must be {dtype.name.lower()}, not "
            f"{n.dtype(i).name.lower()}"
        )
    shape = n.shape(i)
    if int(np.prod(shape)) != 1:
        n.shape_error(f"input {i} ({what}) must hold one value, its shape is {list(shape)}")
    if n.inputs[i] in low.constants:
        value = np.asarray(low.constants[n.inputs[i]]).reshape(1).astype(default.dtype)
        return low.b.weight(name, value, low.subgraph)
    return n.view(n.input(i), (1,), f":{what}") if shape != (1,) else n.input(i)


def _length_of(n: Node, i: int, axis: int) -> int | None:
    """The run-time length of input i when its dim `axis` is data-dependent (another dim:
    refused)."""
    d = n.low.dyn.get(n.inputs[i]) if n.has_input(i) else None
    if d is None:
        return None
    if d.axis != axis:
        raise refuse(n.label, f"input {i} is data-dependent along dim {d.axis}, not {axis}")
    return d.length


def _dynamic_output(
    n: Node, op: Op, inputs: list[int], shape: tuple[int, ...], attrs: list[int]
) -> None:
    low, b = n.low, n.low.b
    t = b.add(n.outputs[0], DType.INT64, shape, low.subgraph)
    count = b.add(n.outputs[0] + ":length", DType.INT64, (1,), low.subgraph)
    b.emit(low.subgraph, op, inputs, [t, count], attrs)
    low.values[n.outputs[0]] = t
    low.dyn[n.outputs[0]] = Dyn(len(shape) - 1 if op == Op.NONZERO else 0, count)


@register("NonZero", 9, 13)
def NonZero(n: Node) -> None:  # noqa: N802
    shape = n.shape(0)
    if not shape:
        n.shape_error("input must have rank >= 1")
    length = _length_of(n, 0, 0)
    numel = int(np.prod(shape))
    x = n.input(0)
    key = ("NonZero", x, length)
    if key in n.low.dyn_cache:  # NonZero of the same mask again (torch exports x[m] so)
        first = n.low.b.tensors[n.low.dyn_cache[key]].name
        n.low.values[n.outputs[0]] = n.low.values[first]
        n.low.dyn[n.outputs[0]] = n.low.dyn[first]
        return
    _dynamic_output(n, Op.NONZERO, [x] if length is None else [x, length], (len(shape), numel), [])
    n.low.dyn_cache[key] = n.low.values[n.outputs[0]]


@register("NonMaxSuppression", 10, 11)
def NonMaxSuppression(n: Node) -> None:  # noqa: N802
    for i in (0, 1):
        if n.dtype(i) != DType.FLOAT32:
            raise UnsupportedDTypeError(f"{n.label}: boxes and scores must be float32")
    boxes, scores = n.shape(0), n.shape(1)
    if len(boxes) != 3 or boxes[2] != 4 or len(scores) != 3 or scores[0] != boxes[0]:
        n.shape_error(f"boxes {list(boxes)} and scores {list(scores)}: [B, N, 4] and [B, C, N]")
    if scores[2] != boxes[1]:
        n.shape_error(f"boxes {list(boxes)} and scores {list(scores)} disagree on N")
    batches, count, classes = boxes[0], boxes[1], scores[1]
    if count > NMS_MAX_BOXES:
        n.shape_error(f"{count} boxes per batch (at most {NMS_MAX_BOXES})")
    center = int(n.attr("center_point_box", 0))
    if center not in (0, 1):
        n.fail(f"center_point_box must be 0 or 1, got {center}")
    lens = {_length_of(n, 0, 1), _length_of(n, 1, 2)}
    if len(lens) != 1:
        raise refuse(n.label, "boxes and scores have different data-dependent lengths")
    length = lens.pop()
    bound = count
    if n.has_input(2) and n.inputs[2] in n.low.constants:
        bound = max(0, min(count, int(np.asarray(n.low.constants[n.inputs[2]]).reshape(-1)[0])))
    elif not n.has_input(2):
        bound = 0
    ins = [
        n.input(0),
        n.input(1),
        _scalar(n, 2, DType.INT64, "max_output", np.zeros(1, np.int64)),
        _scalar(n, 3, DType.FLOAT32, "iou_threshold", np.zeros(1, np.float32)),
        _scalar(n, 4, DType.FLOAT32, "score_threshold", np.zeros(1, np.float32)),
    ]
    if length is not None:
        ins.append(length)
    cap = max(1, batches * classes * bound)
    _dynamic_output(n, Op.NMS, ins, (cap, 3), [center, int(n.has_input(4))])


@register("RoiAlign", 10, 16)
def RoiAlign(n: Node) -> None:  # noqa: N802
    if n.dtype(0) != DType.FLOAT32 or n.dtype(1) != DType.FLOAT32:
        raise UnsupportedDTypeError(f"{n.label}: X and rois must be float32")
    if n.dtype(2) != DType.INT64:
        raise UnsupportedDTypeError(f"{n.label}: batch_indices must be int64")
    x, rois, bidx = n.shape(0), n.shape(1), n.shape(2)
    if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or bidx != (rois[0],):
        n.shape_error(f"X {list(x)}, rois {list(rois)}, batch_indices {list(bidx)}")
    mode = n.attr("mode", "avg")
    if mode not in ("avg", "max"):
        n.fail(f"mode {mode!r} (avg or max)")
    default = "half_pixel" if n.opset >= 16 else "output_half_pixel"
    ctm = n.attr("coordinate_transformation_mode", default)
    if ctm not in ("half_pixel", "output_half_pixel"):
        n.fail(f"coordinate_transformation_mode {ctm!r}")
    oh, ow = int(n.attr("output_height", 1)), int(n.attr("output_width", 1))
    ratio = int(n.attr("sampling_ratio", 0))
    if oh < 1 or ow < 1 or not 0 <= ratio <= ROI_MAX_GRID:
        n.fail(f"output {oh}x{ow} and sampling_ratio {ratio} (0..{ROI_MAX_GRID})")
    if n.inputs[0] in n.low.dyn:
        raise refuse(n.label, "X has a data-dependent dim")
    lens = {v for v in (_length_of(n, 1, 0), _length_of(n, 2, 0)) if v is not None}
    if len(lens) > 1:
        raise refuse(n.label, "rois and batch_indices have different data-dependent lengths")
    attrs = [int(mode == "max"), int(ctm == "half_pixel"), ratio]
    attrs.append(f64_bits(float(n.attr("spatial_scale", 1.0))))
    ins = [n.input(0), n.input(1), n.input(2)]
    n.emit(Op.ROI_ALIGN, ins, (rois[0], x[1], oh, ow), DType.FLOAT32, attrs)
    if lens:
        n.low.dyn[n.outputs[0]] = Dyn(0, lens.pop())
