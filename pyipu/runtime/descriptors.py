"""Tensor descriptors returned by Runner.get_*_inputs/outputs (`poprt.runtime.DataDesc`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyipu.enums import DType, to_numpy


@dataclass(frozen=True)
class DataDesc:
    """One anchor: name, one batch's shape, data type and size."""

    name: str
    shape: list[int]
    data_type: DType
    size_in_bytes: int
    popef_contains_tensor_data: bool = False
    subgraph: int | None = None  # fused models: the subgraph the anchor belongs to

    def numpy_data_type(self) -> np.dtype:
        return to_numpy(self.data_type)

    @property
    def sizeInBytes(self) -> int:  # noqa: N802 - PopRT's C++ field name
        return self.size_in_bytes


InputDesc = DataDesc
OutputDesc = DataDesc
