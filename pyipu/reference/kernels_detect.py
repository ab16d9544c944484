"""Reference kernels: NONZERO and NMS (data-dependent result sizes) and ROI_ALIGN.

A data-dependent result fills its output of static capacity from the front, the rest is zero,
and its count (at most the capacity) is the second output, int64[1]. An optional valid-length
input (int64[1], clamped to [0, extent]) says how many leading rows of a padded input are data.
"""

from __future__ import annotations

import math

import numpy as np

from pyipu.compiler.ir import Instr, bits_f64
from pyipu.enums import Op
from pyipu.errors import InvalidArgumentError
from pyipu.reference.numpy_interp import kernel

F32 = np.float32
ROI_MAX_GRID = 1024  # sampling_ratio 0: at most this many samples per bin and axis


def _valid(x: np.ndarray, extent: int) -> int:
    return min(max(int(x.reshape(-1)[0]), 0), extent)


@kernel(Op.NONZERO)
def nonzero(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> tuple[np.ndarray, ...]:
    x = xs[0]
    if len(xs) == 2:
        x = x[: _valid(xs[1], x.shape[0])]
    found = np.stack(np.nonzero(x)).astype(np.int64)  # row-major order
    out = np.zeros(y.shape, np.int64)
    out[:, : found.shape[1]] = found
    return out, np.array([found.shape[1]], np.int64)


def _corners(b: np.ndarray, center: bool) -> tuple[np.ndarray, ...]:
    """lo0, lo1, hi0, hi1 of boxes [..., 4] in float32."""
    if center:
        half0, half1 = b[..., 2] / F32(2), b[..., 3] / F32(2)
        return b[..., 0] - half0, b[..., 1] - half1, b[..., 0] + half0, b[..., 1] + half1
    return (
        np.minimum(b[..., 0], b[..., 2]),
        np.minimum(b[..., 1], b[..., 3]),
        np.maximum(b[..., 0], b[..., 2]),
        np.maximum(b[..., 1], b[..., 3]),
    )


def _suppressed(kept: np.ndarray, rest: np.ndarray, center: bool, thr: np.float32) -> np.ndarray:
    """Per box of `rest` [m, 4]: IoU with box `kept` [4] > thr (ONNX Runtime's rule)."""
    a0, a1, a2, a3 = _corners(kept, center)
    b0, b1, b2, b3 = _corners(rest, center)
    i0, i1 = np.maximum(a0, b0), np.maximum(a1, b1)
    i2, i3 = np.minimum(a2, b2), np.minimum(a3, b3)
    with np.errstate(all="ignore"):
        inter = (i2 - i0) * (i3 - i1)
        area_a, area_b = (a2 - a0) * (a3 - a1), (b2 - b0) * (b3 - b1)
        uni = area_a + area_b - inter
        ok = (i2 > i0) & (i3 > i1) & (area_a > 0) & (area_b > 0) & (uni > 0)
        return ok & (inter / np.where(ok, uni, F32(1)) > thr)


@kernel(Op.NMS)
def nms(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> tuple[np.ndarray, ...]:
    center, has_thr = bool(ins.attrs[0]), bool(ins.attrs[1])
    boxes, scores = xs[0].astype(F32), xs[1].astype(F32)
    max_out = int(xs[2].reshape(-1)[0])
    iou = F32(xs[3].reshape(-1)[0])
    score_thr = F32(xs[4].reshape(-1)[0])
    n = _valid(xs[5], boxes.shape[1]) if len(xs) == 6 else boxes.shape[1]
    rows: list[tuple[int, int, int]] = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            if max_out <= 0:
                break
            s = scores[b, c, :n]
            cand = np.flatnonzero(~np.isnan(s) & ((s > score_thr) if has_thr else True))
            order = cand[np.lexsort((cand, -s[cand].astype(np.float64)))]
            kept = 0
            while order.size and kept < max_out:  # one pass per kept box
                i, order = order[0], order[1:]
                rows.append((b, c, int(i)))
                kept += 1
                order = order[~_suppressed(boxes[b, i], boxes[b, order], center, iou)]
    cap = y.shape[0]
    out = np.zeros(y.shape, np.int64)
    if rows:
        out[: min(len(rows), cap)] = np.array(rows[:cap], np.int64)
    return out, np.array([min(len(rows), cap)], np.int64)


def _sample_axis(start: np.float32, bin_size: np.float32, grid: int, pooled: int) -> np.ndarray:
    """[pooled, grid] sample coordinates along one axis, float32 as the C kernel rounds them."""
    p = np.arange(pooled, dtype=F32)[:, None]
    i = np.arange(grid, dtype=F32)[None, :]
    return (start + p * bin_size) + (i + F32(0.5)) * bin_size / F32(grid)


def _taps(c: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Low and high tap indices, their weights and the in-range mask of coordinates c."""
    inside = (c >= F32(-1)) & (c <= F32(size))
    c = np.where(c <= 0, F32(0), c)
    lo = c.astype(np.int64)
    edge = lo >= size - 1
    lo = np.where(edge, size - 1, lo)
    hi = np.where(edge, size - 1, lo + 1)
    c = np.where(edge, lo.astype(F32), c)
    frac = (c - lo.astype(F32)).astype(F32)
    return lo, hi, frac, inside


@kernel(Op.ROI_ALIGN)
def roi_align(ins: Instr, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    max_mode, half_pixel, ratio = (int(a) for a in ins.attrs[:3])
    scale = F32(bits_f64(ins.attrs[3]))
    x, rois, bidx = xs[0].astype(F32), xs[1].astype(F32), xs[2].astype(np.int64)
    n, _, h, w = x.shape
    oh, ow = y.shape[2], y.shape[3]
    off = F32(0.5 if half_pixel else 0.0)
    out = np.zeros(y.shape, F32)
    for k in range(rois.shape[0]):
        if not 0 <= bidx[k] < n:
            raise InvalidArgumentError(
                f"batch index {bidx[k]} of region {k} is out of range [0, {n})"
            )
        r = rois[k]
        x0, y0 = r[0] * scale - off, r[1] * scale - off
        rw, rh = r[2] * scale - off - x0, r[3] * scale - off - y0
        if not half_pixel:
            rw, rh = max(rw, F32(1)), max(rh, F32(1))
        bh, bw = rh / F32(oh), rw / F32(ow)
        gh = ratio if ratio > 0 else _grid(rh / F32(oh))
        gw = ratio if ratio > 0 else _grid(rw / F32(ow))
        count = F32(max(gh * gw, 1))
        if gh == 0 or gw == 0:
            continue
        ys = _sample_axis(y0, bh, gh, oh).reshape(-1)  # [oh * gh]
        xs_ = _sample_axis(x0, bw, gw, ow).reshape(-1)  # [ow * gw]
        yl, yh, ly, yin = _taps(ys, h)
        xl, xh, lx, xin = _taps(xs_, w)
        hy, hx = F32(1) - ly, F32(1) - lx
        plane = x[bidx[k]]  # [C, H, W]
        t = [
            (hy[:, None] * hx[None, :]) * plane[:, yl][:, :, xl],
            (hy[:, None] * lx[None, :]) * plane[:, yl][:, :, xh],
            (ly[:, None] * hx[None, :]) * plane[:, yh][:, :, xl],
            (ly[:, None] * lx[None, :]) * plane[:, yh][:, :, xh],
        ]
        inside = yin[:, None] & xin[None, :]
        if max_mode:
            s = np.maximum(np.maximum(np.maximum(t[0], t[1]), t[2]), t[3])
        else:
            s = ((t[0] + t[1]) + t[2]) + t[3]
        s = np.where(inside, s, F32(0)).reshape(-1, oh, gh, ow, gw)
        if max_mode:
            out[k] = s.max(axis=(2, 4))
        else:
            out[k] = s.sum(axis=(2, 4), dtype=F32) / count
    return out


def _grid(bin_size: np.float32) -> int:
    if not bin_size > 0:
        return 0
    return ROI_MAX_GRID if bin_size >= ROI_MAX_GRID else math.ceil(float(bin_size))
