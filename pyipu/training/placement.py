"""Placement of a training graph on the virtual IPUs of a manually sharded model.

The forward pass keeps the user's placement (`__ipu_number`, and `__pipeline_stage` when
pipelined). With S forward stages, the backward nodes written for a forward node of stage k run
in stage 2S - 2 - k on the same IPU (the last forward stage computes its own backward too), so
a pipeline has 2S - 1 stages and every IPU holds the forward and the backward of its layers, as
PopART places them. Nodes nobody placed (a loss added by the session, the gradient's seed, the
sum of a weight's gradients) run in the latest stage among their inputs' producers; a node
without inputs runs with its first consumer. Stage numbers are written dense (0 .. 2S - 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from pyipu.compiler.staging import (
    IPU_ATTR,
    STAGE_ATTR,
    STEP_END_ATTR,
    int_attr,
    set_int_attr,
    user_stage,
)


class Stages:
    """Dense stages of a forward pass and their IPUs; the backward stages mirror them."""

    def __init__(self, forward: Sequence[onnx.NodeProto]) -> None:
        forward = list(forward)  # keeps each node's Python object (and so its id) alive
        raw: dict[int, int] = {}  # id(node) → the user's stage number
        for n in forward:
            if int_attr(n, IPU_ATTR) is not None:  # else placed below, after its inputs
                raw[id(n)] = user_stage(n)
        numbers = sorted(set(raw.values())) or [0]
        dense = {v: i for i, v in enumerate(numbers)}
        self.forward = len(numbers)
        self.ipu_of: dict[int, int] = {}  # dense forward stage → IPU
        for n in forward:
            if id(n) in raw:
                self.ipu_of.setdefault(dense[raw[id(n)]], int_attr(n, IPU_ATTR) or 0)
        self.stage: dict[str, int] = {}  # value name → stage of the node producing it
        for n in forward:
            k = dense[raw[id(n)]] if id(n) in raw else self._latest(n)
            self.put(n, k)

    @property
    def count(self) -> int:
        """Forward and backward stages (the last forward stage holds its own backward)."""
        return 2 * self.forward - 1

    def mirror(self, k: int) -> int:
        return 2 * self.forward - 2 - k

    def ipu(self, stage: int) -> int:
        return self.ipu_of.get(min(stage, self.mirror(stage)), 0)

    def _latest(self, n: onnx.NodeProto) -> int:
        return max((self.stage.get(i, 0) for i in n.input if i), default=0)

    def put(self, n: onnx.NodeProto, stage: int) -> None:
        set_int_attr(n, IPU_ATTR, self.ipu(stage))
        set_int_attr(n, STAGE_ATTR, stage)
        for o in n.output:
            self.stage[o] = stage

    def put_all(self, nodes: Sequence[onnx.NodeProto], stage: int) -> None:
        for n in nodes:
            self.put(n, stage)

    def place(self, nodes: Sequence[onnx.NodeProto], origin: Mapping[str, onnx.NodeProto]) -> None:
        """Stages for the nodes not placed yet, the backward pass's from the forward node each
        was written for (`origin`, by name; see module)."""
        consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in nodes:
            for i in n.input:
                consumers.setdefault(i, []).append(n)
        inputless = []
        for n in nodes:
            if int_attr(n, STEP_END_ATTR) or int_attr(n, STAGE_ATTR) is not None:
                continue
            f = origin.get(n.name)
            if f is not None:
                k = max(self.mirror(int_attr(f, STAGE_ATTR) or 0), self._latest(n))
            elif not any(n.input):
                inputless.append(n)
                continue
            else:
                k = self._latest(n)
            self.put(n, k)
        for n in inputless:  # with its first consumer (constants then need no forwarding)
            users = [int_attr(c, STAGE_ATTR) for c in consumers.get(n.output[0], [])]
            self.put(n, min((u for u in users if u is not None), default=0))


def pipeline_stages(nodes: Sequence[onnx.NodeProto]) -> int:
    """How many forward stages the placed nodes form."""
    return len({user_stage(n) for n in nodes if int_attr(n, IPU_ATTR) is not None}) or 1


def mark_step_end(nodes: Sequence[onnx.NodeProto]) -> None:
    for n in nodes:
        set_int_attr(n, STEP_END_ATTR, 1)
