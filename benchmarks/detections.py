"""Comparing two engines' detections (boxes [n, 4], scores [n], labels [n], by decreasing
score): the order among equal scores is arbitrary, so detections are paired, not rows.

The same n; each of `want`'s detections has one of `got`'s of its own with its label, its score
to 1e-5 and its box to `tolerance` of the largest box coordinate (a maximum matching by
augmenting paths), and `got`'s scores decrease. The error is the largest deviation of a pair:
box coordinates relative to the largest, scores relative to the largest score.
"""

from __future__ import annotations

import numpy as np

SCORE_TIE = 1e-5  # scores this close (relative) may come in either order


def detection_error(
    want: dict[str, np.ndarray], got: dict[str, np.ndarray], tolerance: float
) -> float:
    """The largest deviation over paired detections; AssertionError when they do not pair."""
    n = len(want["scores"])
    if got["scores"].shape != want["scores"].shape:
        raise AssertionError(f"{got['scores'].shape[0]} detections, the reference has {n}")
    if (np.diff(got["scores"]) > 0).any():
        raise AssertionError(f"scores not in decreasing order: {got['scores']}")
    w, g = (
        np.column_stack([d["labels"], d["scores"], d["boxes"]]).astype(np.float64)
        for d in (want, got)
    )
    scale = max(float(np.abs(w[:, 2:]).max(initial=0)), 1e-30)
    top = max(float(np.abs(w[:, 1]).max(initial=0)), 1e-30)
    fits = [
        np.nonzero(
            (g[:, 0] == r[0])
            & (np.abs(g[:, 1] - r[1]) <= SCORE_TIE * abs(r[1]))
            & (np.abs(g[:, 2:] - r[2:]).max(axis=1, initial=0) <= tolerance * scale)
        )[0].tolist()
        for r in w
    ]
    owner = pairing(fits, n)
    unpaired = sorted(set(range(n)) - set(owner))
    if unpaired:
        i = unpaired[0]
        box = ", ".join(f"{v:.6g}" for v in w[i, 2:])
        raise AssertionError(
            f"{len(unpaired)} of {n} detections unpaired; the first: row {i}, label "
            f"{int(w[i, 0])}, score {w[i, 1]:.7g}, box [{box}]"
        )
    error = 0.0
    for j, i in enumerate(owner):
        if i >= 0:
            box = float(np.abs(g[j, 2:] - w[i, 2:]).max(initial=0)) / scale
            error = max(error, box, abs(g[j, 1] - w[i, 1]) / top)
    return error


def pairing(fits: list[list[int]], n: int) -> list[int]:
    """owner[j]: the row i that takes j (-1: none) when each row i takes one of `fits[i]`
    (indices below n) of its own, as many rows placed as can be: augmenting paths."""
    owner = [-1] * n

    def place(i: int, seen: set[int]) -> bool:
        for j in fits[i]:
            if j not in seen:
                seen.add(j)
                if owner[j] < 0 or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(fits)):
        place(i, set())
    return owner
