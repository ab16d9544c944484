"""`builder.aiGraphcore`: PopART's loss ops, written as standard ONNX ops so the model stays
loadable anywhere (ONNX Runtime included).

- `nllloss([probs, label], reduction=Mean, ignoreIndex=None, inputIsLogProbability=False)`:
  -log(probs[i, label[i]]) per sample (probs [N, C] or [N, C, d...] with label [N, d...]),
  samples whose label is `ignoreIndex` count zero and are left out of the mean;
- `l1loss([x], lambda, reduction=Mean)`: lambda · |x|;
- `identityloss([x], reduction=Mean)`: x itself, reduced.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import numpy as np

from pyipu.popart.errors import popart_exception

if TYPE_CHECKING:
    from pyipu.popart.builder import Builder


class ReductionType(enum.IntEnum):
    """How a loss over a batch becomes the value returned (PopART's names)."""

    Sum = 0
    Mean = 1
    NoReduction = 2


class AiGraphcore:
    def __init__(self, builder: Builder) -> None:
        self.b = builder

    def identityloss(
        self,
        args: list[str],
        reduction: ReductionType = ReductionType.Mean,
        debugContext: str = "",  # noqa: N803
    ) -> str:
        (x,) = _arity(args, 1, "identityloss")
        return self._reduce(x, reduction)

    def l1loss(
        self,
        args: list[str],
        lambda_: float = 1.0,
        reduction: ReductionType = ReductionType.Mean,
        debugContext: str = "",  # noqa: N803
        **kw: Any,
    ) -> str:
        (x,) = _arity(args, 1, "l1loss")
        scale = float(kw.pop("lambda", lambda_))
        on = self.b.aiOnnx
        scaled = on.mul([on.abs([x]), self._const(np.float32(scale), x)])
        return self._reduce(scaled, reduction)

    def nllloss(
        self,
        args: list[str],
        reduction: ReductionType = ReductionType.Mean,
        ignoreIndex: int | None = None,  # noqa: N803
        inputIsLogProbability: bool = False,  # noqa: N803
        debugContext: str = "",  # noqa: N803
    ) -> str:
        probs, label = _arity(args, 2, "nllloss")
        on = self.b.aiOnnx
        classes = self.b.getTensorShape(probs)[1]
        logp = probs if inputIsLogProbability else on.log([probs])
        # one-hot of the label along axis 1 picks each sample's class
        onehot = on.onehot(
            [label, self._const(np.float32(classes)), self._const(np.array([0, 1], np.float32))],
            axis=1,
        )
        chosen = on.mul([logp, onehot])
        if self.b.opsets["ai.onnx"] >= 13:  # axes became an input
            picked = on.reducesum([chosen, self._const(np.array([1], np.int64))], keepdims=0)
        else:
            picked = on.reducesum([chosen], axes=[1], keepdims=0)
        loss = on.neg([picked])
        if ignoreIndex is None:
            return self._reduce(loss, reduction)
        keep = on.cast(
            [on.logical_not([on.equal([label, self._const(np.int64(ignoreIndex), label)])])], to=1
        )
        loss = on.mul([loss, keep])
        if reduction != ReductionType.Mean:
            return self._reduce(loss, reduction)
        total = self._reduce(loss, ReductionType.Sum)
        count = on.max([self._reduce(keep, ReductionType.Sum), self._const(np.float32(1))])
        return on.div([total, count])

    def _reduce(self, x: str, reduction: ReductionType) -> str:
        on = self.b.aiOnnx
        if reduction == ReductionType.Sum:
            return on.reducesum([x], keepdims=0)
        if reduction == ReductionType.Mean:
            return on.reducemean([x], keepdims=0)
        if reduction == ReductionType.NoReduction:
            return on.identity([x])
        raise popart_exception(f"unknown reduction {reduction!r}")

    def _const(self, value: np.ndarray | np.generic, like: str | None = None) -> str:
        array = np.array(value)
        if like is not None and np.issubdtype(array.dtype, np.integer):
            dt = self.b.getTensorInfo(like).numpy_dtype()
            array = array.astype(dt)
        return self.b.aiOnnx.constant([], value=_tensor(array))


def _tensor(array: np.ndarray) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(array)


def _arity(args: list[str], n: int, op: str) -> list[str]:
    if len(args) != n:
        raise popart_exception(f"{op} takes {n} input(s), got {len(args)}: {args}")
    return list(args)
