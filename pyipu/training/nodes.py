"""`NodeWriter`: appends ONNX nodes with fresh value names, at one opset (what the backward
pass and the optimizers' update graphs are written with)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper


class NodeWriter:
    def __init__(self, opset: int, prefix: str) -> None:
        self.opset = opset
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self._count = 0
        self._shared: dict[Hashable, str] = {}

    def op(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> Any:
        """One node; its output name (a list of them when n_out > 1)."""
        self._count += 1
        base = f"{self.prefix}/{op_type}:{self._count}"
        outs = [base + (f".{i}" if i else "") for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=base, **attrs))
        return outs[0] if n_out == 1 else outs

    def shared(self, key: Hashable, build: Callable[[], str]) -> str:
        """The value `build` writes, written once per writer for each `key`: the scalars every
        weight's update reads (a bias correction of the step) are one node each, not one per
        weight. The key names everything the value depends on."""
        if key not in self._shared:
            self._shared[key] = build()
        return self._shared[key]

    def const(self, value: Any, dtype: Any = None) -> str:
        array = np.asarray(value) if dtype is None else np.asarray(value, dtype)
        return self.op("Constant", [], value=numpy_helper.from_array(array))

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.array(list(values), np.int64))

    def reduce(self, op_type: str, x: str, axes: Sequence[int], keepdims: int) -> str:
        """ReduceSum / ReduceMean / ReduceSumSquare ... over `axes` (an attribute or an input,
        by opset)."""
        as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if as_input:
            return self.op(op_type, [x, self.ints(axes)], keepdims=keepdims)
        return self.op(op_type, [x], axes=list(axes), keepdims=keepdims)

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.ints(axes)])
        return self.op("Unsqueeze", [x], axes=list(axes))

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", [x, self.ints(shape)])
