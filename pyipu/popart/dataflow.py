"""`DataFlow` and `AnchorReturnType`: how many batches one `run` takes and what it returns."""

from __future__ import annotations

import builtins
import enum
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pyipu.popart.errors import popart_exception


class AnchorReturnTypeId(enum.IntEnum):
    Final = 0
    EveryN = 1
    All = 2
    Sum = 3


class TileSet(enum.IntEnum):
    Compute = 0
    IO = 1
    Undefined = 2


class ExchangeStrategy(enum.IntEnum):
    JustInTime = 0
    OverlapInnerLoop = 1
    OverlapLoops = 2
    OverlapStep = 3


class AnchorReturnType:
    """`AnchorReturnType("FINAL" | "ALL" | "SUM")` or `AnchorReturnType("EVERYN", n)`: the last
    batch's value, every batch's, their sum, or every n-th batch's (case-insensitive)."""

    def __init__(
        self,
        artString: str,  # noqa: N803
        returnPeriod: int | TileSet = 0,  # noqa: N803
        tileSet: TileSet = TileSet.Compute,  # noqa: N803
        exchangeStrategy: ExchangeStrategy = ExchangeStrategy.JustInTime,  # noqa: N803
    ) -> None:
        kinds = {
            "final": AnchorReturnTypeId.Final,
            "everyn": AnchorReturnTypeId.EveryN,
            "all": AnchorReturnTypeId.All,
            "sum": AnchorReturnTypeId.Sum,
        }
        kind = kinds.get(str(artString).lower())
        if kind is None:
            raise popart_exception(
                f"AnchorReturnType {artString!r}: expected FINAL, EVERYN, ALL or SUM"
            )
        period = int(returnPeriod)
        if isinstance(returnPeriod, TileSet):  # ("ALL", TileSet.IO, ...)
            period, tileSet = 0, returnPeriod
        if kind == AnchorReturnTypeId.EveryN and period < 1:
            raise popart_exception("AnchorReturnType('EVERYN', n) needs n >= 1")
        self.kind = kind
        self.period = period if kind == AnchorReturnTypeId.EveryN else 0
        self.tileSet, self.exchangeStrategy = tileSet, exchangeStrategy

    def id(self) -> AnchorReturnTypeId:
        return self.kind

    def rp(self) -> int:
        return self.period

    def str(self) -> builtins.str:
        return self.kind.name.upper()

    def batches(self, batches_per_step: int) -> int:
        """How many values per replica one run returns (1 for FINAL and SUM)."""
        if self.kind == AnchorReturnTypeId.All:
            return batches_per_step
        if self.kind == AnchorReturnTypeId.EveryN:
            if batches_per_step % self.period:
                raise popart_exception(
                    f"EVERYN {self.period} does not divide batchesPerStep {batches_per_step}"
                )
            return batches_per_step // self.period
        return 1

    def collect(self, per_batch: list[np.ndarray]) -> list[np.ndarray]:
        """The values kept from one replica's batches, in order."""
        if self.kind == AnchorReturnTypeId.All:
            return per_batch
        if self.kind == AnchorReturnTypeId.EveryN:
            return per_batch[self.period - 1 :: self.period]
        if self.kind == AnchorReturnTypeId.Sum:
            return [np.sum(per_batch, axis=0).astype(per_batch[0].dtype)]
        return per_batch[-1:]

    def __repr__(self) -> builtins.str:
        n = f", {self.period}" if self.kind == AnchorReturnTypeId.EveryN else ""
        return f"AnchorReturnType({self.str()!r}{n})"


class DataFlow:
    """`DataFlow(batchesPerStep, {id: AnchorReturnType})` or
    `DataFlow(batchesPerStep, [ids], AnchorReturnType)` (one return type for all)."""

    def __init__(
        self,
        batchesPerStep: int,  # noqa: N803
        anchorTensors: Mapping[str, AnchorReturnType] | Sequence[str],  # noqa: N803
        anchorReturnType: AnchorReturnType | None = None,  # noqa: N803
    ) -> None:
        if not isinstance(batchesPerStep, (int, np.integer)) or batchesPerStep < 1:
            raise popart_exception(
                f"batchesPerStep must be an integer >= 1, got {batchesPerStep!r}"
            )
        self.batchesPerStep = int(batchesPerStep)
        if isinstance(anchorTensors, Mapping):
            anchors = dict(anchorTensors)
        else:
            art = anchorReturnType or AnchorReturnType("ALL")
            anchors = dict.fromkeys(anchorTensors, art)
        for tid, art in anchors.items():
            if not isinstance(tid, str) or not isinstance(art, AnchorReturnType):
                raise popart_exception(f"anchor {tid!r}: expected id -> AnchorReturnType")
            art.batches(self.batchesPerStep)  # EVERYN must divide
        self.anchors: dict[str, AnchorReturnType] = anchors

    def nAnchors(self) -> int:  # noqa: N802
        return len(self.anchors)

    def isAnchored(self, tensorId: str) -> bool:  # noqa: N802, N803
        return tensorId in self.anchors

    def art(self, tensorId: str) -> AnchorReturnType:  # noqa: N803
        if tensorId not in self.anchors:
            raise popart_exception(f"{tensorId!r} is not an anchor of this DataFlow")
        return self.anchors[tensorId]

    def __repr__(self) -> str:
        return f"DataFlow({self.batchesPerStep}, {self.anchors!r})"


def anchor_shape(
    art: AnchorReturnType, bps: int, accumulation: int, replicas: int, shape: Any
) -> tuple[int, ...]:
    """PopART's `initAnchorArrays` rule: [batches, accumulation, replicas] for ALL / EVERYN, just
    [replicas] for FINAL / SUM, dimensions of 1 dropped, then the anchor's own shape."""
    if art.kind in (AnchorReturnTypeId.All, AnchorReturnTypeId.EveryN):
        lead = [art.batches(bps), accumulation, replicas]
    else:
        lead = [replicas]
    return tuple(d for d in lead if d != 1) + tuple(shape)
