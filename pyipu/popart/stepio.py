"""What a `run` reads and writes: `PyStepIO` (arrays holding every micro-batch of a step),
`PyStepIOCallback` (arrays handed over one micro-batch at a time) and `PyWeightsIO`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pyipu.popart.errors import popart_exception


class PyStepIO:
    """`PyStepIO({input id: array}, {anchor id: array})`: each input array holds the step's
    micro-batches, shaped [batchesPerStep, accumulationFactor, replicas] (dimensions of 1
    dropped) + the input's shape; anchors as `initAnchorArrays` makes them."""

    def __init__(self, inputs: Mapping[str, Any], outputs: Mapping[str, np.ndarray]) -> None:
        self.inputs = dict(inputs)
        self.outputs = dict(outputs)
        self.checked = True

    def enableRuntimeAsserts(self, enabled: bool) -> None:  # noqa: N802
        self.checked = bool(enabled)


class PyStepIOCallback:
    """Callbacks per micro-batch: `input_cb(id, prefetch) -> array`, `input_complete_cb(id)`,
    `output_cb(id) -> array to fill`, `output_complete_cb(id)`."""

    def __init__(
        self,
        input_callback: Callable[[str, bool], np.ndarray],
        input_complete_callback: Callable[[str], None],
        output_callback: Callable[[str], np.ndarray],
        output_complete_callback: Callable[[str], None],
    ) -> None:
        self.input_cb, self.input_complete_cb = input_callback, input_complete_callback
        self.output_cb, self.output_complete_cb = output_callback, output_complete_callback


class PyWeightsIO:
    """`PyWeightsIO({weight id: array})`: where `readWeights` writes, what `writeWeights` reads."""

    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        for tid, a in weights.items():
            if not isinstance(a, np.ndarray):
                raise popart_exception(f"PyWeightsIO: {tid!r} is not a numpy array")
        self.weights = dict(weights)


def split_steps(array: np.ndarray, lead: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """`array` viewed as [n micro-batches, *shape] given PopART's leading dims `lead`
    (batches, accumulation, replicas; the ones equal to 1 are absent from the array)."""
    kept = tuple(d for d in lead if d != 1)
    if array.shape != kept + shape:
        raise ValueError(f"shape {list(array.shape)}, expected {list(kept + shape)}")
    return array.reshape((math.prod(lead),) + shape)
