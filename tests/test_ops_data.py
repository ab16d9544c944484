"""Data movement by static index (REINDEX: Slice, Split, Pad, Tile, CenterCropPad, Resize
"nearest") and separable interpolation (INTERP: Resize/Upsample "linear"/"cubic"), plus the
view + TRANSPOSE ops DepthToSpace/SpaceToDepth: every case compiled, run on the NumPy reference
and compared with onnxruntime (or onnx.reference), and run on the C kernels and compared with
the reference."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from models import (
    F16,
    F32,
    I32,
    I64,
    arr,
    assert_matches_reference,
    check_op,
    compile_single_op,
    run_c,
    single_node,
)
from onnx.reference import ReferenceEvaluator

from pyipu import errors
from pyipu.compiler import (
    Compiler,
    ShapeError,
    UnsupportedAttributeError,
    UnsupportedDTypeError,
    UnsupportedError,
    ops_data,
)
from pyipu.compiler.executable import Executable
from pyipu.compiler.ir import ModelIR
from pyipu.enums import Op

ALL = [F32, F16, I32, I64, np.int8, np.uint8, np.bool_, np.uint32]


def ops_of(prog: ModelIR) -> list[Op]:
    return [i.op for i in prog.program(prog.main_programs[0]).instrs]


def check_ref(
    op: str,
    inputs: list[np.ndarray],
    attrs: dict[str, Any] | None = None,
    *,
    opset: int = 19,
    const_inputs: dict[int, Any] | None = None,
    tol: float = 1e-5,
) -> ModelIR:
    """As check_op, but the oracle is onnx.reference (ONNX's own expected outputs for Resize
    come from it; onnxruntime differs from it in a few corner modes)."""
    exe, feeds, _ = compile_single_op(op, inputs, attrs, opset=opset, const_inputs=const_inputs)
    got = exe.run_reference(feeds)
    assert_matches_reference(run_c(exe, feeds), got)
    model = single_node(op, inputs, attrs, opset=opset, const_inputs=const_inputs)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    g = got["out0"]
    assert g.dtype == want.dtype and g.shape == want.shape, (g.dtype, g.shape, want.shape)
    t = 2e-2 if want.dtype == np.float16 else tol
    np.testing.assert_allclose(g.astype(np.float32), want.astype(np.float32), rtol=t, atol=t)
    return exe.program


# ---------------------------------------------------------------- Slice


SLICES = [  # starts, ends, axes, steps
    ([1, 0], [3, 4], [0, 1], [1, 2]),
    ([-1, 10], [-100, -10], [1, 2], [-1, -2]),  # negative steps, out-of-range clamps
    ([1], [2**62], None, None),
    ([2, -3], [0, 2**62], [-3, -1], [-1, 1]),
]


@pytest.mark.parametrize("case", range(len(SLICES)))
@pytest.mark.parametrize("dt", ALL)
def test_slice(case: int, dt: Any) -> None:
    starts, ends, axes, steps = SLICES[case]
    c: dict[int, Any] = {1: np.array(starts), 2: np.array(ends)}
    if axes is not None or steps is not None:  # inputs are positional: axes before steps
        c[3] = np.array(axes if axes is not None else range(len(starts)))
    if steps is not None:
        c[4] = np.array(steps)
    prog = check_op("Slice", [arr((4, 5, 6), dt, case)], opset=13, const_inputs=c)
    assert Op.REINDEX in ops_of(prog)


def test_slice_opset1_attrs_and_whole_tensor_is_a_view() -> None:
    x = arr((3, 4), F32)
    check_op("Slice", [x], {"starts": [1], "ends": [100], "axes": [1]}, opset=1)
    prog = check_op("Slice", [x], {"starts": [0, 0], "ends": [3, 4]}, opset=1)
    assert Op.REINDEX not in ops_of(prog)


def test_slice_errors() -> None:
    with pytest.raises(UnsupportedError, match="empty"):
        compile_single_op(
            "Slice", [arr((4,), F32)], opset=13, const_inputs={1: np.array([3]), 2: np.array([1])}
        )
    with pytest.raises(UnsupportedAttributeError, match="must be a constant"):
        compile_single_op("Slice", [arr((4,), F32), np.array([1]), np.array([3])], opset=13)
    with pytest.raises(ShapeError, match="steps must not be 0"):
        c = {1: np.array([0]), 2: np.array([3]), 3: np.array([0]), 4: np.array([0])}
        compile_single_op("Slice", [arr((4,), F32)], opset=13, const_inputs=c)


# ---------------------------------------------------------------- Split


@pytest.mark.parametrize("dt", [F32, F16, I64, np.bool_])
def test_split_equal_and_given(dt: Any) -> None:
    x = arr((5, 6), dt)
    for opset, attrs, c in (
        (2, {"axis": 1, "split": [1, 2, 3]}, {}),
        (13, {"axis": -1}, {1: np.array([4, 2])}),
        (18, {"axis": 0, "num_outputs": 3}, {}),
    ):
        outs = 3 if opset != 13 else 2
        model = single_node("Split", [x], attrs, opset=opset, const_inputs=c, num_outputs=outs)
        exe = Compiler.compile(model, None)
        got = exe.run_reference({"in0": x})
        assert_matches_reference(run_c(exe, {"in0": x}), got)
        want = ReferenceEvaluator(model).run(None, {"in0": x})
        for k, w in enumerate(want):
            np.testing.assert_array_equal(got[f"out{k}"], w)


def test_split_errors() -> None:
    x = arr((5, 2), F32)
    model = single_node("Split", [x], {"axis": 0}, opset=13, num_outputs=2)
    with pytest.raises(ShapeError, match="equal parts"):
        Compiler.compile(model, None)


# ---------------------------------------------------------------- Pad, CenterCropPad, Tile


PADS = [  # mode, pads, axes
    ("constant", [1, 0, 2, 0, 3, 1], None),
    ("reflect", [2, 1, 0, 1, 3, 2], None),
    ("edge", [0, 2, 1, 3, 0, 4], None),
    ("wrap", [3, 1, 2, 4, 0, 1], None),
    ("constant", [-1, 2, 1, -2], [0, 2]),  # negative pads crop
    ("reflect", [1, 2], [-1]),
]


@pytest.mark.parametrize("case", range(len(PADS)))
@pytest.mark.parametrize("dt", [F32, F16, I32, I64, np.int8, np.bool_])
def test_pad(case: int, dt: Any) -> None:
    mode, pads, axes = PADS[case]
    c: dict[int, Any] = {1: np.array(pads)}
    if dt != np.bool_:
        c[2] = np.array(-3 if dt != F16 else 1.5, dtype=dt)
    if axes is not None:
        c[2] = c.get(2)
        c[3] = np.array(axes)
    x = arr((3, 4, 5), dt, case)
    check_op("Pad", [x], {"mode": mode}, opset=19, const_inputs=c)


def test_pad_legacy_attrs() -> None:
    x = arr((2, 3), F32)
    check_op("Pad", [x], {"pads": [1, 0, 0, 2], "value": 1.5}, opset=2)
    check_op("Pad", [x], {"pads": [0, 1, 1, 0], "mode": "edge"}, opset=2)


def test_pad_errors() -> None:
    x = arr((2, 3), F32)
    with pytest.raises(UnsupportedAttributeError, match="wrap"):
        compile_single_op(
            "Pad", [x], {"mode": "wrap"}, opset=18, const_inputs={1: np.zeros(4, I64)}
        )
    with pytest.raises(ShapeError, match="pads"):
        compile_single_op("Pad", [x], opset=13, const_inputs={1: np.zeros(3, I64)})
    with pytest.raises(UnsupportedDTypeError):
        compile_single_op("Pad", [arr((2, 3), I64)], {"pads": [0, 0, 1, 1]}, opset=2)
    # reflect: at most dim - 1 per side (x has 3 values along axis 1, 2 along axis 0)
    check_op("Pad", [x], {"mode": "reflect"}, opset=13, const_inputs={1: np.array([1, 2, 1, 2])})
    for pads in ([0, 3, 0, 0], [0, 0, 0, 3], [2, 0, 0, 0], [0, -1, 0, 2]):
        with pytest.raises(ShapeError, match="reflect"):
            compile_single_op(
                "Pad", [x], {"mode": "reflect"}, opset=13, const_inputs={1: np.array(pads)}
            )


@pytest.mark.parametrize("dt", [F32, I64, np.uint8])
def test_center_crop_pad(dt: Any) -> None:
    x = arr((5, 4, 3), dt)
    check_op("CenterCropPad", [x], opset=18, const_inputs={1: np.array([3, 7, 3])})
    check_op("CenterCropPad", [x], {"axes": [-2, 0]}, opset=18, const_inputs={1: np.array([1, 8])})


@pytest.mark.parametrize("dt", [F32, F16, I64, np.bool_])
def test_tile(dt: Any) -> None:
    check_op("Tile", [arr((2, 3, 1), dt)], opset=13, const_inputs={1: np.array([2, 1, 4])})


# ---------------------------------------------------------------- DepthToSpace, SpaceToDepth


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("dt", [F32, I64])
def test_depth_to_space(mode: str, dt: Any) -> None:
    prog = check_op(
        "DepthToSpace", [arr((2, 8, 3, 2), dt)], {"blocksize": 2, "mode": mode}, opset=13
    )
    assert ops_of(prog) == [Op.TRANSPOSE]


def test_space_to_depth() -> None:
    prog = check_op("SpaceToDepth", [arr((2, 3, 4, 6), F32)], {"blocksize": 2}, opset=13)
    assert ops_of(prog) == [Op.TRANSPOSE]
    with pytest.raises(ShapeError, match="multiples"):
        compile_single_op("SpaceToDepth", [arr((1, 1, 3, 4), F32)], {"blocksize": 2}, opset=13)


# ---------------------------------------------------------------- Resize, Upsample

SCALES = np.array([1, 1, 1.7, 0.6], np.float32)
NEAREST = [
    {"nearest_mode": m, "coordinate_transformation_mode": c}
    for m, c in (
        ("round_prefer_floor", "half_pixel"),
        ("round_prefer_ceil", "asymmetric"),
        ("floor", "align_corners"),
        ("ceil", "pytorch_half_pixel"),
        ("floor", "half_pixel_symmetric"),
    )
]


@pytest.mark.parametrize("case", range(len(NEAREST)))
@pytest.mark.parametrize("dt", [F32, F16, I64, np.uint8])
def test_resize_nearest(case: int, dt: Any) -> None:
    prog = check_ref(
        "Resize",
        [arr((1, 2, 5, 7), dt)],
        {"mode": "nearest", **NEAREST[case]},
        const_inputs={1: None, 2: SCALES},
    )
    assert ops_of(prog) == [Op.REINDEX]


INTERP_CASES = [
    {"mode": "linear"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "antialias": 1},
    {"mode": "cubic"},
    {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
    {"mode": "cubic", "antialias": 1, "coordinate_transformation_mode": "asymmetric"},
    {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
]


@pytest.mark.parametrize("case", range(len(INTERP_CASES)))
@pytest.mark.parametrize("dt", [F32, F16])
def test_resize_interp(case: int, dt: Any) -> None:
    prog = check_ref(
        "Resize", [arr((2, 2, 6, 5), dt)], INTERP_CASES[case], const_inputs={1: None, 2: SCALES}
    )
    assert ops_of(prog) == [Op.INTERP]


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_tf_crop_and_resize_extrapolates(mode: str) -> None:
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], np.float32)
    attrs = {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize"}
    attrs["extrapolation_value"] = 7.5
    check_ref(
        "Resize",
        [arr((1, 2, 4, 5), F32)],
        attrs,
        const_inputs={1: roi, 2: None, 3: np.array([1, 2, 6, 3])},
    )


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_sizes_axes_and_aspect_policy(policy: str) -> None:
    attrs = {"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": policy}
    check_ref(
        "Resize",
        [arr((1, 2, 4, 6), F32)],
        attrs,
        const_inputs={1: None, 2: None, 3: np.array([9, 5])},
    )


def test_resize_identity_is_a_view_and_opset11_scales() -> None:
    prog = check_ref(
        "Resize",
        [arr((1, 2, 3, 3), F32)],
        {"mode": "linear"},
        const_inputs={1: None, 2: np.ones(4, np.float32)},
    )
    assert ops_of(prog) != [Op.INTERP]
    check_op(
        "Resize",
        [arr((1, 1, 3, 4), F32)],
        {"mode": "linear"},
        opset=11,
        const_inputs={1: np.zeros(0, np.float32), 2: np.array([1, 1, 2, 2], np.float32)},
    )


def test_resize_opset10_and_upsample() -> None:
    s = np.array([1, 1, 2, 3], np.float32)
    x = arr((1, 2, 3, 2), F32)
    check_op("Resize", [x], {"mode": "nearest"}, opset=10, const_inputs={1: s})
    check_op("Resize", [x], {"mode": "linear"}, opset=10, const_inputs={1: s})
    check_op("Upsample", [x], {"mode": "nearest"}, opset=9, const_inputs={1: s})
    check_op("Upsample", [x], {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 3.0]}, opset=7)


@pytest.mark.parametrize(
    "mode, coord, excl",
    [
        ("linear", "half_pixel", False),
        ("cubic", "align_corners", True),
        ("nearest", "asymmetric", False),
        ("linear", "tf_crop_and_resize", False),
    ],
)
def test_resize_1d_fallback_matches_vectorized(mode: str, coord: str, excl: bool) -> None:
    """Older onnx has only the per-position 1-D resize: both paths give the same taps."""
    from onnx.reference.ops import op_resize as r

    fn = {"linear": r._linear_coeffs, "cubic": r._cubic_coeffs}.get(
        mode, lambda ratio, scale: r._nearest_coeffs(ratio, mode="round_prefer_floor")
    )
    kw = {"roi": [-0.1, 0.8], "coordinate_transformation_mode": coord, "exclude_outside": excl}
    data = arr((5, 3), F32).astype(np.float64)
    for scale, n_out in ((1.7, 8), (0.6, 3)):
        fast = ops_data.resize_1d(data, scale, n_out, fn, 2.0, kw)
        slow = ops_data.resize_1d(data, scale, n_out, fn, 2.0, kw, vectorized=False)
        np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-12)


def test_resize_errors() -> None:
    x = arr((1, 1, 3, 3), I64)
    c = {1: None, 2: np.array([1, 1, 2, 2], np.float32)}
    with pytest.raises(UnsupportedDTypeError):
        compile_single_op("Resize", [x], {"mode": "linear"}, opset=19, const_inputs=c)
    with pytest.raises(UnsupportedAttributeError, match="antialias"):
        compile_single_op(
            "Resize", [x], {"mode": "nearest", "antialias": 1}, opset=19, const_inputs=c
        )
    with pytest.raises(UnsupportedAttributeError, match="one of scales and sizes"):
        compile_single_op("Resize", [x], opset=19, const_inputs={1: None})


# ---------------------------------------------------------------- verifier


def _tampered(
    op: str, inputs: list[np.ndarray], attrs: dict, c: dict, table: int, fn: Any
) -> Executable:
    """The compiled program with the `table`-th TENSOR_DATA operand of the instruction
    rewritten by fn (array -> array, same size and dtype)."""
    exe, _, _ = compile_single_op(op, inputs, attrs, opset=19, const_inputs=c)
    prog = exe.program
    ins = next(
        i for i in prog.program(prog.main_programs[0]).instrs if i.op in (Op.REINDEX, Op.INTERP)
    )
    t = ins.inputs[table]
    spec = prog.tensors[t]
    a = np.frombuffer(spec.data, np.int64 if table == 1 else np.float32).copy()
    tensors = list(prog.tensors)
    tensors[t] = dataclasses.replace(spec, data=np.asarray(fn(a), a.dtype).tobytes())
    return Executable.from_program(dataclasses.replace(prog, tensors=tuple(tensors)))


def test_verifier_rejects_out_of_range_tables() -> None:
    x = arr((3, 4), F32)
    c = {1: np.array([1, 0]), 2: np.array([3, 3])}

    def bump(a: np.ndarray) -> np.ndarray:
        a[-1] = 4  # past the end of the last dim
        return a

    exe = _tampered("Slice", [x], {}, c, 1, bump)
    with pytest.raises(errors.BadProgramError, match="outside x"):
        run_c(exe, {"in0": x})

    def below(a: np.ndarray) -> np.ndarray:
        a[0] = -2
        return a

    with pytest.raises(errors.BadProgramError, match="below -1"):
        run_c(_tampered("Slice", [x], {}, c, 1, below), {"in0": x})


def test_verifier_rejects_mixed_extrapolated_taps() -> None:
    x = arr((1, 1, 4, 4), F32)
    c = {1: None, 2: np.array([1, 1, 2, 2], np.float32)}

    def mix(a: np.ndarray) -> np.ndarray:
        taps = 2  # linear: the last dim's first row has 2 taps at its end
        a[-taps] = -1
        return a

    exe = _tampered("Resize", [x], {"mode": "linear"}, c, 1, mix)
    with pytest.raises(errors.BadProgramError, match="all -1"):
        run_c(exe, {"in0": x})


def test_pad_with_a_run_time_value() -> None:
    """constant_value computed at run time: zero padding, then WHERE over the padded mask."""
    x = arr((2, 3), F32, 1)
    value = np.array(-7.5, np.float32)
    prog = check_op("Pad", [x, value], {}, opset=18, const_inputs={1: np.array([1, 0, 0, 2])})
    assert Op.WHERE in {i.op for i in prog.program(prog.main_programs[0]).instrs}
