"""Data-dependent result sizes (NonZero, NonMaxSuppression, TopK with a run-time K, what is
computed from them) and RoiAlign: every graph compiled, run on the C runtime and on the NumPy
reference, and compared with onnxruntime. A graph output whose dim depends on the data is
padded to its static capacity, and `<name>:count` holds its extent: only that part is
compared (the padding is zero)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
import pytest
from models import assert_matches_reference, edited, run_c, run_ort, with_attr
from onnx import TensorProto, helper

from pyipu.compiler import Compiler
from pyipu.compiler.errors import UnsupportedOpError
from pyipu.compiler.lower import COUNT_SUFFIX
from pyipu.enums import Op
from pyipu.errors import BadProgramError

F32, I64 = np.float32, np.int64
OPSET = 16


def graph(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    consts: dict[str, np.ndarray] | None = None,
    opset: int = OPSET,
) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs.items()
        ],
        [],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in (consts or {}).items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    types = {v.name: v.type for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    for o in outputs:
        model.graph.output.append(helper.make_value_info(o, types[o]))
    return model


def trimmed(
    got: dict[str, np.ndarray], axes: dict[str, int], zero_padded: bool
) -> dict[str, np.ndarray]:
    out = {}
    for name, v in got.items():
        if name.endswith(COUNT_SUFFIX):
            continue
        if name in axes:
            n = int(got[name + COUNT_SUFFIX][0])
            pad = np.take(v, np.arange(n, v.shape[axes[name]]), axis=axes[name])
            assert not (zero_padded and pad.any()), name  # NONZERO and NMS pad with zeros
            v = np.take(v, np.arange(n), axis=axes[name])
        out[name] = v
    return out


def check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], axes: dict[str, int],
          tol: float = 1e-5, zero_padded: bool = True) -> dict[str, np.ndarray]:  # fmt: skip
    exe = Compiler.compile(model)
    ref = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), ref)
    got, want = trimmed(ref, axes, zero_padded), run_ort(model, feeds)
    assert set(got) == set(want)
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape)
        scale = max(1.0, float(np.abs(w).max(initial=0)))
        assert float(np.abs(g.astype(np.float64) - w).max(initial=0)) <= tol * scale, name
    return got


# ---------------------------------------------------------------- NonZero


@pytest.mark.parametrize("fill", ["random", "none", "all"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_nonzero(shape: tuple[int, ...], fill: str) -> None:
    rng = np.random.default_rng(len(shape))
    x = {"random": rng.random(shape) > 0.6, "none": np.zeros(shape, bool),
         "all": np.ones(shape, bool)}[fill]  # fmt: skip
    model = graph([helper.make_node("NonZero", ["x"], ["y"])], {"x": x}, ["y"])
    check(model, {"x": x}, {"y": 1})


@pytest.mark.parametrize("dt", [F32, np.float16, np.int32, np.uint8])
def test_nonzero_dtypes(dt: Any) -> None:
    x = np.array([[-0.0, 1.5, 2], [0, 0, 3]]).astype(dt)  # -0.0 is zero
    model = graph([helper.make_node("NonZero", ["x"], ["y"])], {"x": x}, ["y"])
    check(model, {"x": x}, {"y": 1})


def test_masked_select_chain() -> None:
    """x[x > t] as torch exports it: NonZero, Transpose, GatherND, then row-wise ops and a
    Slice of the first rows carry the count."""
    x = np.random.default_rng(3).standard_normal((6, 5)).astype(F32)
    nodes = [
        helper.make_node("Greater", ["x", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx"], ["v"]),
        helper.make_node("Exp", ["v"], ["e"]),
        helper.make_node("Unsqueeze", ["e", "ax1"], ["u"]),
        helper.make_node("Slice", ["u", "zero", "four", "zero"], ["s"]),
        helper.make_node("Shape", ["s"], ["shp"]),
        helper.make_node("ConstantOfShape", ["shp"], ["z"]),
    ]
    consts = {"t": np.array(0.3, F32), "ax1": np.array([1]), "zero": np.array([0]),
              "four": np.array([4])}  # fmt: skip
    model = graph(nodes, {"x": x}, ["e", "s", "z"], consts)
    got = check(model, {"x": x}, {"e": 0, "s": 0, "z": 0}, zero_padded=False)
    assert got["s"].shape == (4, 1)


def test_reduction_over_padding_is_refused() -> None:
    x = np.ones((4,), F32)
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("ReduceSum", ["nz"], ["y"], keepdims=0),
    ]
    with pytest.raises(UnsupportedOpError, match="ReduceSum"):
        Compiler.compile(graph(nodes, {"x": x}, ["y"]))


def test_nonzero_folds() -> None:
    nodes = [
        helper.make_node("NonZero", ["c"], ["nz"]),
        helper.make_node("Cast", ["nz"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["f"], ["s"], keepdims=0),
        helper.make_node("Add", ["x", "s"], ["y"]),
    ]
    x = np.ones((2,), F32)
    model = graph(nodes, {"x": x}, ["y"], {"c": np.array([[0, 1, 1], [1, 0, 0]], F32)})
    check(model, {"x": x}, {})


# ---------------------------------------------------------------- NonMaxSuppression


def boxes_and_scores(b: int, n: int, c: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 10, (b, n, 2))
    wh = rng.uniform(0.5, 4, (b, n, 2))
    boxes = np.concatenate([xy, xy + wh], -1).astype(F32)
    scores = rng.random((b, c, n)).astype(F32)
    scores[..., ::7] = scores[..., 1::7][..., : scores[..., ::7].shape[-1]]  # ties
    return boxes, scores


@pytest.mark.parametrize(
    "b,n,c,max_out,iou,thr,center",
    [
        (1, 20, 1, 100, 0.5, None, 0),
        (2, 30, 3, 5, 0.3, 0.2, 0),
        (3, 25, 2, 4, 0.6, 0.5, 1),
        (1, 12, 2, 0, 0.5, None, 0),
        (2, 40, 4, 40, 0.0, 0.9, 0),
        (1, 16, 1, 16, 1.0, None, 1),
    ],
)
def test_nms(b: int, n: int, c: int, max_out: int, iou: float, thr: float | None,
             center: int) -> None:  # fmt: skip
    boxes, scores = boxes_and_scores(b, n, c, seed=n)
    if center:
        boxes = np.concatenate([(boxes[..., :2] + boxes[..., 2:]) / 2,
                                boxes[..., 2:] - boxes[..., :2]], -1).astype(F32)  # fmt: skip
    consts = {"m": np.array([max_out], I64), "iou": np.array([iou], F32)}
    ins = ["boxes", "scores", "m", "iou"]
    if thr is not None:
        consts["thr"] = np.array([thr], F32)
        ins.append("thr")
    node = helper.make_node("NonMaxSuppression", ins, ["sel"], center_point_box=center)
    feeds = {"boxes": boxes, "scores": scores}
    check(graph([node], feeds, ["sel"], consts), feeds, {"sel": 0})


def test_nms_run_time_max_output() -> None:
    boxes, scores = boxes_and_scores(2, 20, 2, seed=5)
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou"], ["sel"])
    feeds = {"boxes": boxes, "scores": scores, "m": np.array([3], I64),
             "iou": np.array([0.4], F32)}  # fmt: skip
    check(graph([node], feeds, ["sel"]), feeds, {"sel": 0})


def test_nms_of_selected_boxes() -> None:
    """NMS over a padded candidate list (boxes chosen by NonZero): the padding is no box."""
    boxes, scores = boxes_and_scores(1, 30, 1, seed=7)
    nodes = [
        helper.make_node("Greater", ["s1", "t"], ["keep"]),
        helper.make_node("NonZero", ["keep"], ["nz"]),
        helper.make_node("Squeeze", ["nz", "zero"], ["idx"]),
        helper.make_node("Gather", ["b0", "idx"], ["bsel"], axis=0),
        helper.make_node("Gather", ["s1", "idx"], ["ssel"], axis=0),
        helper.make_node("Unsqueeze", ["bsel", "zero"], ["bb"]),
        helper.make_node("Unsqueeze", ["ssel", "zero1"], ["ss"]),
        helper.make_node("NonMaxSuppression", ["bb", "ss", "m", "iou"], ["sel"]),
        helper.make_node("Gather", ["sel", "two"], ["k"], axis=1),
        helper.make_node("Gather", ["bsel", "k"], ["out"], axis=0),
    ]
    consts = {"t": np.array(0.4, F32), "zero": np.array([0]), "zero1": np.array([0, 1]),
              "m": np.array([100]), "iou": np.array([0.3], F32), "two": np.array(2)}  # fmt: skip
    feeds = {"b0": boxes[0], "s1": scores[0, 0]}
    model = graph(nodes, feeds, ["out", "sel"], consts)
    check(model, feeds, {"out": 0, "sel": 0}, zero_padded=False)


# ---------------------------------------------------------------- RoiAlign


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align(mode: str, ctm: str, ratio: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 10, 12)).astype(F32)
    xy = rng.uniform(-4, 40, (6, 2))
    rois = np.concatenate([xy, xy + rng.uniform(1, 30, (6, 2))], -1).astype(F32)
    bidx = np.array([0, 1, 1, 0, 1, 0], I64)
    node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], mode=mode,
                            coordinate_transformation_mode=ctm, output_height=3,
                            output_width=4, sampling_ratio=ratio, spatial_scale=0.25)  # fmt: skip
    feeds = {"x": x, "rois": rois, "bi": bidx}
    check(graph([node], feeds, ["y"]), feeds, {}, tol=1e-4)


def test_roi_align_opset10() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 8, 8)).astype(F32)
    rois = np.array([[0, 0, 7, 7], [1.5, 2.5, 5, 6], [3, 3, 3.2, 3.1]], F32)
    node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=2,
                            output_width=2)  # fmt: skip
    feeds = {"x": x, "rois": rois, "bi": np.zeros(3, I64)}
    check(graph([node], feeds, ["y"], opset=10), feeds, {}, tol=1e-4)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_regions_of_many_samples(mode: str) -> None:
    """A region's samples are found once for all its channels, in the worker's scratch; a
    region with more samples than that holds (an adaptive grid of 30 x 30 per bin here) finds
    them per channel. Both next to each other, regions partly outside the map, channels split
    between work items (the runner's two workers)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 5, 16, 16)).astype(F32)
    rois = np.array([[-40, -30, 170, 180], [2, 3, 9, 14], [-5, 8, 20, 300], [1, 1, 2, 2]], F32)
    node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], mode=mode,
                            output_height=7, output_width=7, sampling_ratio=0)  # fmt: skip
    feeds = {"x": x, "rois": rois, "bi": np.zeros(4, I64)}
    check(graph([node], feeds, ["y"]), feeds, {}, tol=1e-4)


# ---------------------------------------------------------------- TopK with a run-time K


@pytest.mark.parametrize("k", [0, 1, 4, 7])
@pytest.mark.parametrize("largest", [0, 1])
def test_topk_run_time_k(k: int, largest: int) -> None:
    x = np.random.default_rng(k).standard_normal((3, 7)).astype(F32)
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)
    feeds = {"x": x, "k": np.array([k], I64)}
    check(graph([node], feeds, ["v", "i"]), feeds, {"v": 1, "i": 1}, zero_padded=False)


def test_topk_k_from_a_data_dependent_shape() -> None:
    """K = min(number of scores above a threshold, 5), as detection post-processing writes
    it: Shape of NonZero's result, Gather, Min, then TopK over the full scores."""
    s = np.random.default_rng(4).random(12).astype(F32)
    nodes = [
        helper.make_node("Greater", ["s", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Shape", ["nz"], ["shp"]),
        helper.make_node("Gather", ["shp", "one"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
        helper.make_node("Min", ["n1", "five"], ["k"]),
        helper.make_node("TopK", ["s", "k"], ["v", "i"]),
    ]
    consts = {"t": np.array(0.5, F32), "one": np.array(1), "zero": np.array([0]),
              "five": np.array([5])}  # fmt: skip
    for thr in (0.5, 0.95, 1.5):
        consts["t"] = np.array(thr, F32)
        feeds = {"s": s}
        check(graph(nodes, feeds, ["v", "i"], consts), feeds, {"v": 0, "i": 0}, zero_padded=False)


@pytest.mark.parametrize("clamp,bound", [("Min", 5), ("Min", 50), ("Max", 3), ("Max", 20)])
@pytest.mark.parametrize("thr", [0.2, 0.7, 1.5])
def test_expand_to_a_clamped_data_dependent_shape(clamp: str, bound: int, thr: float) -> None:
    """labels = arange(3).expand(min(n, bound), 3) as torch's default exporter writes detection
    post-processing: Shape of NonZero's result, Squeeze, Min (or Max) with a constant,
    Reshape, Concat with a constant, Expand. The shape stays symbolic: the output's capacity
    is the clamped bound and its count the clamped run-time length."""
    s = np.random.default_rng(5).random(12).astype(F32)
    nodes = [
        helper.make_node("Greater", ["s", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Shape", ["nz"], ["shp"], start=1, end=2),
        helper.make_node("Squeeze", ["shp"], ["n"]),
        helper.make_node(clamp, ["bound", "n"], ["k"]),
        helper.make_node("Reshape", ["k", "minus_one"], ["k1"]),
        helper.make_node("Concat", ["k1", "three"], ["shape"], axis=0),
        helper.make_node("Expand", ["row", "shape"], ["y"]),
        helper.make_node("Mul", ["y", "y"], ["y2"]),
    ]
    consts = {"t": np.array(thr, F32), "bound": np.array(bound), "minus_one": np.array([-1]),
              "three": np.array([3]), "row": np.arange(1, 4, dtype=I64)}  # fmt: skip
    feeds = {"s": s}
    model = graph(nodes, feeds, ["y", "y2"], consts)
    got = check(model, feeds, {"y": 0, "y2": 0}, zero_padded=False)
    n = int((s > thr).sum())
    assert got["y"].shape == ((min if clamp == "Min" else max)(n, bound), 3)


def test_shape_arithmetic_of_two_lengths_runs_at_run_time() -> None:
    """Min of two data-dependent lengths is computed at run time (a K for TopK here), not
    kept symbolic."""
    s = np.random.default_rng(6).random(10).astype(F32)
    nodes = [
        helper.make_node("Greater", ["s", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Less", ["s", "u"], ["m2"]),
        helper.make_node("NonZero", ["m2"], ["nz2"]),
        helper.make_node("Shape", ["nz"], ["a"], start=1),
        helper.make_node("Shape", ["nz2"], ["b"], start=1),
        helper.make_node("Min", ["a", "b"], ["k"]),
        helper.make_node("TopK", ["s", "k"], ["v", "i"]),
    ]
    consts = {"t": np.array(0.3, F32), "u": np.array(0.6, F32)}
    feeds = {"s": s}
    check(graph(nodes, feeds, ["v", "i"], consts), feeds, {"v": 0, "i": 0}, zero_padded=False)


def test_shape_cast_to_float_runs_at_run_time() -> None:
    """K = int(0.5 * float(n)): a shape cast to float is computed with at run time."""
    s = np.random.default_rng(7).random(10).astype(F32)
    nodes = [
        helper.make_node("Greater", ["s", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Shape", ["nz"], ["a"], start=1),
        helper.make_node("Cast", ["a"], ["af"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["af", "half"], ["hf"]),
        helper.make_node("Cast", ["hf"], ["k"], to=TensorProto.INT64),
        helper.make_node("TopK", ["s", "k"], ["v", "i"]),
    ]
    consts = {"t": np.array(0.3, F32), "half": np.array([0.5], F32)}
    feeds = {"s": s}
    check(graph(nodes, feeds, ["v", "i"], consts), feeds, {"v": 0, "i": 0}, zero_padded=False)


# ---------------------------------------------------------------- the verifier


def _nms_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    boxes, scores = boxes_and_scores(1, 10, 2)
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou"], ["sel"])
    feeds = {"boxes": boxes, "scores": scores}
    consts = {"m": np.array([3], I64), "iou": np.array([0.5], F32)}
    return graph([node], feeds, ["sel"], consts), feeds


@pytest.mark.parametrize(
    "op,pos,value,text",
    [
        (Op.NMS, 0, 2, "attr 0 must be 0 or 1"),
        (Op.NMS, 1, -1, "attr 1 must be 0 or 1"),
        (Op.ROI_ALIGN, 0, 3, "mode and half_pixel must be 0 or 1"),
        (Op.ROI_ALIGN, 2, 5000, r"sampling_ratio in \[0, 1024\]"),
    ],
)
def test_verifier_rejects_bad_attributes(op: Op, pos: int, value: int, text: str) -> None:
    if op == Op.NMS:
        model, feeds = _nms_model()
    else:
        x, rois = np.ones((1, 1, 4, 4), F32), np.array([[0, 0, 2, 2]], F32)
        node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"])
        feeds = {"x": x, "rois": rois, "bi": np.zeros(1, I64)}
        model = graph([node], feeds, ["y"])
    exe = edited(Compiler.compile(model), lambda i: with_attr(i, pos, value) if i.op == op else i)
    with pytest.raises(BadProgramError, match=text):
        run_c(exe, feeds)


def test_verifier_rejects_a_wrong_capacity() -> None:
    """NONZERO's indices must be [rank, numel]: a shorter output is refused before any run."""
    x = np.ones((2, 3), bool)
    model = graph([helper.make_node("NonZero", ["x"], ["y"])], {"x": x}, ["y"])
    exe = Compiler.compile(model)
    y = next(k for k, t in enumerate(exe.program.tensors) if tuple(t.shape) == (2, 6))
    shrunk = edited(exe, tensor=lambda k, t: dataclasses.replace(t, shape=(2, 5)) if k == y else t)
    with pytest.raises(BadProgramError, match=r"must be int64 \[rank, numel\]"):
        run_c(shrunk, {"x": x})


def test_nms_count_is_clamped_to_the_capacity() -> None:
    """A run-time max_output_boxes_per_class larger than the boxes: the capacity is the boxes'
    count per class, and no more rows are ever written."""
    boxes = np.tile(np.array([[0, 0, 1, 1]], F32), (1, 5, 1)) + np.arange(5, dtype=F32)[:, None] * 2
    scores = np.random.default_rng(0).random((1, 1, 5)).astype(F32)
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "m"], ["sel"])
    feeds = {"boxes": boxes.reshape(1, 5, 4), "scores": scores, "m": np.array([1000], I64)}
    got = check(graph([node], feeds, ["sel"]), feeds, {"sel": 0})
    assert got["sel"].shape == (5, 3)
