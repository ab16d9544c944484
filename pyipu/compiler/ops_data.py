"""ONNX op lowerings: data movement by index (slice, pad, tile, gather, scatter, resize).

Every op here is separable: output index i_d along dim d reads source position map_d[i_d] of the
input (or a pad value), so it becomes one REINDEX whose table holds the per-dim maps, computed
here at compile time from the static shapes and constant operands. Resize "linear"/"cubic" are
separable weighted sums and become one INTERP; its per-dim taps come from running
onnx.reference's 1-D resize on the identity matrix, so every coordinate mode, antialias and
exclude_outside are exactly the reference's. DepthToSpace/SpaceToDepth are views + TRANSPOSE.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, NoReturn

import numpy as np

from pyipu.compiler.errors import UnsupportedError
from pyipu.compiler.ir import ALL_DTYPES, FLOAT_DTYPES, f64_bits, np_dtype
from pyipu.compiler.lower import Node
from pyipu.compiler.ops import register
from pyipu.enums import DType, Op


def _strides(shape: Sequence[int]) -> list[int]:
    """C-contiguous element strides."""
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


def _bits(value: Any, dt: DType) -> int:
    """The element's bytes of `value` in dtype `dt`, zero-extended into a signed int64."""
    raw = np.asarray(value).astype(np_dtype(dt)).reshape(-1)[:1].tobytes()
    v = int.from_bytes(raw.ljust(8, b"\0"), "little")
    return v - (1 << 64) if v >= 1 << 63 else v


def _identity(maps: Sequence[np.ndarray], shape: Sequence[int]) -> bool:
    return all(
        len(m) == d and np.array_equal(m, np.arange(d)) for m, d in zip(maps, shape, strict=True)
    )


def _empty(n: Node, shape: Sequence[int]) -> NoReturn:
    raise UnsupportedError(
        f"{n.label}: the output would be empty {list(shape)} (zero-size tensors)"
    )


def reindex(
    n: Node,
    x: int,
    shape: Sequence[int],
    maps: Sequence[np.ndarray],
    dt: DType,
    pad: Any = 0,
    out: int = 0,
) -> None:
    """Output `out` = x (of `shape`) gathered by the per-dim maps (-1: the pad value)."""
    yshape = tuple(len(m) for m in maps)
    if 0 in yshape:
        _empty(n, yshape)
    if _identity(maps, shape):
        n.set_view(x, yshape, out=out)
        return
    table = np.concatenate([np.asarray(m, np.int64) for m in maps])
    t = n.low.b.weight(n.outputs[out] + ":reindex", table, n.low.subgraph)
    n.emit(Op.REINDEX, [x, t], yshape, dt, [_bits(pad, dt), *_strides(shape)], out=out)


def _ints(v: Any) -> list[int]:
    return [int(a) for a in np.asarray(v).reshape(-1)]


def _axes_list(n: Node, axes: Sequence[int] | None, rank: int, count: int) -> list[int]:
    if axes is None:
        return list(range(count))
    out = [n.axis(int(a), rank) for a in axes]
    if len(set(out)) != len(out):
        n.shape_error(f"axes {list(axes)} repeat an axis")
    return out


# ---------------------------------------------------------------- Slice, Split


@register("Slice", 1, 10, 11, 13)
def Slice(n: Node) -> None:  # noqa: N802 - registry functions are named after ONNX ops
    dt = n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    if n.opset < 10:
        starts, ends = _ints(n.attr("starts", [])), _ints(n.attr("ends", []))
        axes = n.attr("axes")
        steps = [1] * len(starts)
    else:
        starts, ends = n.const_ints(1, "starts"), n.const_ints(2, "ends")
        axes = n.const_ints(3, "axes") if n.has_input(3) else None
        steps = n.const_ints(4, "steps") if n.has_input(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(steps) or (
        axes is not None and len(axes) != len(starts)
    ):
        n.shape_error(f"starts {starts}, ends {ends}, axes {axes}, steps {steps} differ in length")
    maps = [np.arange(d) for d in src]
    for a, s, e, st in zip(
        _axes_list(n, axes, len(src), len(starts)), starts, ends, steps, strict=True
    ):
        if st == 0:
            n.shape_error("steps must not be 0")
        maps[a] = np.array(range(src[a])[slice(s, e, st)], np.int64)  # ONNX clamping = Python's
    reindex(n, n.input(0), src, maps, dt)


@register("Split", 1, 2, 11, 13, 18)
def Split(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    axis = n.axis(int(n.attr("axis", 0)), len(src))
    count = len(n.outputs)
    dim = src[axis]
    split = None
    if n.has_input(1) and (n.opset >= 13 or n.opset < 2):
        split = n.const_ints(1, "split")
    elif n.opset < 13 and n.attr("split") is not None:
        split = _ints(n.attr("split"))
    if split is None:
        num = n.attr("num_outputs") if n.opset >= 18 else None
        if num is not None:
            if int(num) != count:
                n.shape_error(f"num_outputs {num} but the node has {count} outputs")
            chunk = -(-dim // count)
            split = [chunk] * (count - 1) + [dim - chunk * (count - 1)]
            if split[-1] < 0:
                n.shape_error(f"cannot split {dim} into {count} chunks of {chunk}")
        elif n.opset >= 18:
            n.fail("one of the split input and the num_outputs attribute is required")
        else:
            if dim % count:
                n.shape_error(f"dim {dim} does not split into {count} equal parts")
            split = [dim // count] * count
    if len(split) != count or sum(split) != dim or min(split) < 0:
        n.shape_error(f"split {split} does not cut dim {dim} into {count} outputs")
    x, off = n.input(0), 0
    for k, size in enumerate(split):
        if n.outputs[k]:
            maps = [np.arange(d) for d in src]
            maps[axis] = np.arange(off, off + size)
            reindex(n, x, src, maps, dt, out=k)
        off += size


# ---------------------------------------------------------------- Pad, CenterCropPad, Tile

PAD_MODES = ("constant", "reflect", "edge", "wrap")


@register("Pad", 1, 2, 11, 13, 18, 19, 21)
def Pad(n: Node) -> None:  # noqa: N802
    mode = n.attr("mode", "constant")
    if mode not in PAD_MODES or (mode == "wrap" and n.opset < 19):
        n.fail(f"mode {mode!r} is not supported")
    dt = n.check_dtype(ALL_DTYPES if n.opset >= 11 else FLOAT_DTYPES, 0)
    src = n.shape(0)
    axes = None
    if n.opset < 11:
        pads = _ints(n.attr("pads" if n.opset >= 2 else "paddings", []))
        value: Any = n.attr("value", 0.0)
    else:
        pads = n.const_ints(1, "pads")
        value = 0
        if n.has_input(2) and n.inputs[2] not in n.low.constants and mode == "constant":
            _pad_runtime_value(n, dt, src, pads, axes)
            return
        if n.has_input(2) and mode == "constant":
            v = np.asarray(n.const(2, "constant_value"))
            if v.size > 1:
                n.shape_error(f"constant_value must be a scalar, got shape {list(v.shape)}")
            value = v.reshape(-1)[0] if v.size else 0
        if n.opset >= 18 and n.has_input(3):
            axes = n.const_ints(3, "axes")
    maps = _pad_maps(n, mode, src, pads, axes)
    reindex(n, n.input(0), src, maps, dt, pad=value if mode == "constant" else 0)


def _pad_runtime_value(
    n: Node, dt: DType, src: Sequence[int], pads: list[int], axes: list[int] | None
) -> None:
    """Constant padding with a run-time value: REINDEX with zeros, then WHERE over the
    compile-time mask of padded positions picks the value there."""
    if n.dtype(2) != dt or math.prod(n.shape(2)) != 1:
        n.shape_error("constant_value must be a scalar of the data's dtype")
    if n.opset >= 18 and n.has_input(3):
        axes = n.const_ints(3, "axes")
    maps = _pad_maps(n, "constant", src, pads, axes)
    yshape = tuple(len(m) for m in maps)
    table = np.concatenate([np.asarray(m, np.int64) for m in maps])
    b = n.low.b
    t = b.weight(n.outputs[0] + ":reindex", table, n.low.subgraph)
    y = n.emit_temp(Op.REINDEX, [n.input(0), t], yshape, dt, [0, *_strides(src)], ":zeropad")
    outside = np.zeros(yshape, dtype=bool)
    for d, m in enumerate(maps):
        idx: list[slice | None] = [None] * len(maps)
        idx[d] = slice(None)
        outside |= (np.asarray(m) < 0)[tuple(idx)]
    mask = b.weight(n.outputs[0] + ":padmask", outside, n.low.subgraph)
    value = b.view(n.input(2), (), n.outputs[0] + ":value")
    n.emit(Op.WHERE, [mask, value, y], yshape, dt)


def _pad_maps(
    n: Node,
    mode: Literal["constant", "reflect", "edge", "wrap"],  # ONNX's names are numpy's
    src: Sequence[int],
    pads: list[int],
    axes: list[int] | None,
) -> list[np.ndarray]:
    ax = _axes_list(n, axes, len(src), len(src))
    if len(pads) != 2 * len(ax):
        n.shape_error(f"pads {pads} must have 2 x {len(ax)} values")
    maps = [np.arange(d) for d in src]
    for k, a in enumerate(ax):
        b, e = pads[k], pads[len(ax) + k]
        n.check_table(src[a] + max(b, 0) + max(e, 0), f"pads {pads}")
        keep = maps[a][max(-b, 0) : src[a] - max(-e, 0)]  # negative pads crop first
        if keep.size == 0:
            n.fail(f"pads {pads} leave nothing of axis {a}")
        widths = (max(b, 0), max(e, 0))
        if mode == "reflect" and max(widths) >= keep.size:
            # One reflection reaches keep.size - 1 values (ONNX Runtime's bound; numpy would
            # reflect again and again).
            n.shape_error(
                f"mode 'reflect' pads {list(widths)} of axis {a} exceed {keep.size - 1}, the "
                f"widest reflection of its {keep.size} values"
            )
        if mode == "constant":
            maps[a] = np.pad(keep, widths, constant_values=-1)
        else:
            maps[a] = np.pad(keep, widths, mode=mode)
    return maps


@register("CenterCropPad", 18)
def CenterCropPad(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    shape = n.const_ints(1, "shape")
    axes = n.attr("axes")
    ax = _axes_list(n, axes, len(src), len(src))
    if len(shape) != len(ax):
        n.shape_error(f"shape {shape} must have {len(ax)} values")
    maps = [np.arange(d) for d in src]
    n.check_table(sum(abs(w) for w in shape), f"shape {shape}")
    for a, want in zip(ax, shape, strict=True):
        dim = src[a]
        if want < dim:
            start = (dim - want) // 2
            maps[a] = np.arange(start, start + want)
        elif want > dim:
            start = (want - dim) // 2
            m = np.full(want, -1, np.int64)
            m[start : start + dim] = np.arange(dim)
            maps[a] = m
    reindex(n, n.input(0), src, maps, dt)


@register("Tile", 6, 13)
def Tile(n: Node) -> None:  # noqa: N802
    dt = n.check_dtype(ALL_DTYPES, 0)
    src = n.shape(0)
    reps = n.const_ints(1, "repeats")
    if len(reps) != len(src) or min(reps, default=0) < 0:
        n.shape_error(f"repeats {reps} must be {len(src)} non-negative values")
    n.check_table(sum(d * r for d, r in zip(src, reps, strict=True)), f"repeats {reps}")
    reindex(
        n, n.input(0), src, [np.tile(np.arange(d), r) for d, r in zip(src, reps, strict=True)], dt
    )


# ---------------------------------------------------------------- DepthToSpace, SpaceToDepth


def _permute(n: Node, shape6: Sequence[int], perm: Sequence[int], final: Sequence[int]) -> None:
    dt = n.check_dtype(ALL_DTYPES, 0)
    x = n.view(n.input(0), shape6, ":6d")
    t = n.emit_temp(Op.TRANSPOSE, [x], [shape6[p] for p in perm], dt, list(perm), ":perm")
    n.set_view(t, final)


def _block(n: Node) -> tuple[int, int, int, int, int]:
    src = n.shape(0)
    if len(src) != 4:
        n.shape_error(f"input {list(src)} must be 4-D")
    b = int(n.attr("blocksize", 0))
    if b < 1:
        n.shape_error(f"blocksize {b} must be positive")
    return b, *src


@register("DepthToSpace", 1, 11, 13, 28)
def DepthToSpace(n: Node) -> None:  # noqa: N802
    b, bn, c, h, w = _block(n)
    if c % (b * b):
        n.shape_error(f"channels {c} are not a multiple of blocksize^2 = {b * b}")
    cc = c // (b * b)
    final = (bn, cc, h * b, w * b)
    mode = n.attr("mode", "DCR") if n.opset >= 11 else "DCR"
    if mode == "CRD":
        _permute(n, (bn, cc, b, b, h, w), (0, 1, 4, 2, 5, 3), final)
    elif mode == "DCR":
        _permute(n, (bn, b, b, cc, h, w), (0, 3, 4, 1, 5, 2), final)
    else:
        n.fail(f"mode {n.attr('mode')!r} is not supported")


@register("SpaceToDepth", 1, 13, 28)
def SpaceToDepth(n: Node) -> None:  # noqa: N802
    b, bn, c, h, w = _block(n)
    if h % b or w % b:
        n.shape_error(f"spatial dims {h}x{w} are not multiples of blocksize {b}")
    shape6 = (bn, c, h // b, b, w // b, b)
    mode = n.attr("mode", "DCR") if n.opset >= 28 else "DCR"
    if mode not in ("DCR", "CRD"):
        n.fail(f"mode {mode!r} is not supported")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    _permute(n, shape6, perm, (bn, c * b * b, h // b, w // b))


# ---------------------------------------------------------------- Resize, Upsample

RESIZE_MODES = ("nearest", "linear", "cubic")
COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _coeff_fn(n: Node, mode: str, nearest: str, antialias: bool) -> Callable[[float, float], Any]:
    """onnx.reference's per-position coefficient function for the mode (as its Resize does)."""
    from onnx.reference.ops import op_resize as r

    if mode == "nearest":
        if antialias:
            n.fail("antialias is not supported with mode 'nearest'")
        if nearest == "simple":  # opset < 11 (and Upsample): floor, ceil when downsampling
            return lambda ratio, scale: r._nearest_coeffs(ratio, "ceil" if scale < 1 else "floor")
        return lambda ratio, scale: r._nearest_coeffs(ratio, mode=nearest)
    if mode == "linear":
        return r._linear_coeffs_antialias if antialias else r._linear_coeffs
    a = float(n.attr("cubic_coeff_a", -0.75))
    fn = r._cubic_coeffs_antialias if antialias else r._cubic_coeffs
    return lambda ratio, scale: fn(ratio, scale, A=a)


def resize_1d(
    data: np.ndarray,
    scale: float,
    n_out: int,
    fn: Callable,
    extrap: float,
    kw: dict[str, Any],
    vectorized: bool = True,
) -> np.ndarray:
    """onnx.reference's 1-D resize of the columns of data [n_in, k] -> [n_out, k]: its
    vectorized helper, or its per-position one in onnx versions that lack it."""
    from onnx.reference.ops import op_resize as r

    if vectorized and hasattr(r, "_interpolate_1d_along_axis"):
        return r._interpolate_1d_along_axis(
            data, 0, scale, n_out, fn, extrapolation_value=extrap, **kw
        )
    out = np.zeros((n_out, data.shape[1]))
    for j in range(data.shape[1]):
        for i in range(n_out):
            out[i, j] = r._interpolate_1d_with_x(
                data[:, j], scale, n_out, float(i), fn, extrapolation_value=extrap, **kw
            )
    return out


def _axis_matrix(
    n_in: int,
    n_out: int,
    scale: float,
    fn: Callable,
    roi: list[float] | None,
    coord: str,
    excl: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(W [n_out, n_in], extrapolated [n_out]): the 1-D resize is linear in the data, so
    resizing the identity gives its matrix; resizing zeros with extrapolation value 1 flags the
    positions tf_crop_and_resize extrapolates."""
    kw = {"roi": roi, "coordinate_transformation_mode": coord, "exclude_outside": excl}
    w = np.zeros((n_out, n_in))
    for j0 in range(0, n_in, 256):  # columns in blocks bound the reference's temporaries
        eye = np.eye(n_in)[:, j0 : j0 + 256]
        w[:, j0 : j0 + 256] = resize_1d(eye, scale, n_out, fn, 0.0, kw)
    ext = resize_1d(np.zeros((n_in, 1)), scale, n_out, fn, 1.0, kw)[:, 0]
    return w, ext == 1.0


def _resize_plan(
    n: Node, src: tuple[int, ...]
) -> tuple[list[float], list[int], list[float] | None]:
    """(scale per dim, output size per dim, roi [starts..., ends...] or None), as
    onnx.reference computes them (axes, sizes, keep_aspect_ratio_policy)."""
    r = len(src)
    roi: list[float] | None = None
    scales: np.ndarray | None = None
    sizes: list[int] | None = None
    if n.op_type == "Upsample" or n.opset < 11:
        scales = n.attr("scales") if n.opset < 9 else n.const(1, "scales")
        scales = np.asarray(scales, np.float32).reshape(-1)
    else:
        if n.has_input(1) and n.const(1, "roi").size:
            roi = [float(v) for v in np.asarray(n.const(1, "roi")).reshape(-1)]
        if n.has_input(2) and n.const(2, "scales").size:
            scales = np.asarray(n.const(2, "scales"), np.float32).reshape(-1)
        if n.has_input(3) and n.const(3, "sizes").size:
            if scales is not None:
                n.fail("only one of scales and sizes may be given")
            sizes = n.const_ints(3, "sizes")
    if sizes is None:
        if scales is None:
            n.fail("one of scales and sizes is required")
        count = len(scales)
    else:
        count = len(sizes)
    axes_attr = n.attr("axes") if n.opset >= 18 else None
    axes = _axes_list(n, axes_attr, r, r)
    if count != len(axes):
        n.shape_error(
            f"{'scales' if sizes is None else 'sizes'} has {count} values, expected {len(axes)}"
        )
    if roi is not None:
        if len(roi) != 2 * len(axes):
            n.shape_error(f"roi has {len(roi)} values, expected {2 * len(axes)}")
        if not all(map(math.isfinite, roi)):
            n.shape_error(f"roi {roi} must be finite")
        full = [0.0] * r + [1.0] * r
        for i, a in enumerate(axes):
            full[a], full[r + a] = roi[i], roi[len(axes) + i]
        roi = full
    if sizes is not None:
        out = list(src)
        for i, a in enumerate(axes):
            out[a] = sizes[i]
        scale = [out[i] / src[i] for i in range(r)]
        policy = n.attr("keep_aspect_ratio_policy", "stretch") if n.opset >= 18 else "stretch"
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                n.fail(f"keep_aspect_ratio_policy {policy!r} is not supported")
            pick = min if policy == "not_larger" else max
            s = pick(scale[a] for a in axes)
            scale = [s if i in axes else 1.0 for i in range(r)]
            out = [int(s * src[i] + 0.5) if i in axes else src[i] for i in range(r)]
        return scale, out, roi
    assert scales is not None  # no sizes: scales were required above
    full_s = [1.0] * r
    for i, a in enumerate(axes):
        if not 0 < scales[i] < math.inf:  # also rejects NaN
            n.shape_error(f"scales {scales.tolist()} must be positive and finite")
        full_s[a] = float(scales[i])
    out = [int(float(np.float64(full_s[i]) * src[i])) for i in range(r)]
    return full_s, out, roi


MAX_RESIZE_DIM = 1 << 24
MAX_RESIZE_MATRIX = 1 << 27


def _resize(n: Node) -> None:
    src = n.shape(0)
    legacy = n.op_type == "Upsample" or n.opset < 11
    mode = n.attr("mode", "nearest")
    mode = "linear" if mode in ("bilinear", "trilinear") and legacy else mode
    if mode not in (RESIZE_MODES if not legacy else RESIZE_MODES[:2]):
        n.fail(f"mode {mode!r} is not supported")
    coord = "asymmetric" if legacy else n.attr("coordinate_transformation_mode", "half_pixel")
    nearest = "simple" if legacy else n.attr("nearest_mode", "round_prefer_floor")
    if coord not in COORD_MODES or (coord == "half_pixel_symmetric" and n.opset < 19):
        n.fail(f"coordinate_transformation_mode {coord!r} is not supported")
    if nearest not in (*NEAREST_MODES, "simple"):
        n.fail(f"nearest_mode {nearest!r} is not supported")
    antialias = bool(n.attr("antialias", 0)) if n.opset >= 18 else False
    dt = n.check_dtype(ALL_DTYPES if mode == "nearest" else FLOAT_DTYPES, 0)
    scale, out, roi = _resize_plan(n, src)
    if 0 in out:
        _empty(n, out)
    # Each resized axis gets a dense [n_out, n_in] float64 matrix at compile time.
    big = [(i, o) for i, o in zip(src, out, strict=True) if o > MAX_RESIZE_DIM]
    big += [(i, o) for i, o in zip(src, out, strict=True) if i * o > MAX_RESIZE_MATRIX]
    if big:
        n.shape_error(
            f"output shape {out} from input {list(src)} is too large to resize "
            f"(at most {MAX_RESIZE_DIM} per axis and {MAX_RESIZE_MATRIX} in x out)"
        )
    if coord == "tf_crop_and_resize" and roi is None:
        n.fail("tf_crop_and_resize needs the roi input")
    fn = _coeff_fn(n, mode, nearest, antialias)
    excl = bool(n.attr("exclude_outside", 0)) if not legacy else False
    extrap = float(n.attr("extrapolation_value", 0.0)) if not legacy else 0.0
    per_dim: list[tuple[np.ndarray, np.ndarray] | None] = []
    for d, (n_in, n_out) in enumerate(zip(src, out, strict=True)):
        droi = None if roi is None else [roi[d], roi[len(src) + d]]
        default_roi = droi is None or (math.isclose(droi[0], 0.0) and math.isclose(droi[1], 1.0))
        if math.isclose(scale[d], 1.0) and n_out == n_in and default_roi:
            per_dim.append(None)  # the reference skips this axis: exact identity
        else:
            per_dim.append(_axis_matrix(n_in, n_out, scale[d], fn, droi, coord, excl))
    if mode == "nearest":
        maps = []
        for d, m in enumerate(per_dim):
            if m is None:
                maps.append(np.arange(src[d]))
                continue
            w, ext = m
            if not np.all((w == 0) | (w == 1)) or not np.all(w.sum(axis=1)[~ext] == 1):
                n.fail("nearest resize did not select one source per output (internal)")
            maps.append(np.where(ext, -1, w.argmax(axis=1)))
        reindex(n, n.input(0), src, maps, dt, pad=extrap)
        return
    if all(m is None for m in per_dim):
        n.set_view(n.input(0), src)
        return
    idx_rows, w_rows, taps = [], [], []
    for d, m in enumerate(per_dim):
        if m is None:
            idx_rows.append(np.arange(src[d]))
            w_rows.append(np.ones(src[d]))
            taps.append(1)
            continue
        w, ext = m
        t = max(1, int((w != 0).sum(axis=1).max()))
        idx = np.zeros((len(w), t), np.int64)
        wt = np.zeros((len(w), t))
        for i, row in enumerate(w):
            nz = np.flatnonzero(row)
            if ext[i]:
                idx[i] = -1
                continue
            idx[i, : len(nz)] = nz
            idx[i, len(nz) :] = nz[0] if len(nz) else 0
            wt[i, : len(nz)] = row[nz]
        idx_rows.append(idx.reshape(-1))
        w_rows.append(wt.reshape(-1))
        taps.append(t)
    b = n.low.b
    ti = b.weight(
        n.outputs[0] + ":interp_idx", np.concatenate(idx_rows).astype(np.int64), n.low.subgraph
    )
    tw = b.weight(
        n.outputs[0] + ":interp_w", np.concatenate(w_rows).astype(np.float32), n.low.subgraph
    )
    attrs = [f64_bits(extrap), *taps, *_strides(src)]
    n.emit(Op.INTERP, [n.input(0), ti, tw], out, dt, attrs)


register("Resize", 10, 11, 13, 18, 19)(_resize)
register("Upsample", 7, 9)(_resize)
