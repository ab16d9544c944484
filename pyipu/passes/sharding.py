"""manual_sharding: place nodes on virtual IPUs and pipeline stages (PopRT's pass of that name).

    >>> sharder = Pass.get_pass("manual_sharding", {"conv1": 0, "fc": 1})  # doctest: +SKIP
    >>> model = sharder.run(model)  # doctest: +SKIP

The placement rule and the node attributes it writes are pyipu.compiler.sharding's (see
docs/runtime.md, "Manual sharding and pipelining").
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from pyipu.compiler.sharding import manual_sharding
from pyipu.passes.base import Pass, register


@register("manual_sharding")
class ManualSharding(Pass):
    """Place nodes on IPUs/pipeline stages from sharding points (sharding_info, pipelining_info)."""

    def __init__(
        self,
        sharding_info: Mapping[str, int] | None = None,
        pipelining_info: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__()
        self.sharding_info = dict(sharding_info or {})
        self.pipelining_info = dict(pipelining_info or {})

    def run(self, onnx_model: onnx.ModelProto) -> onnx.ModelProto:
        return manual_sharding(onnx_model, self.sharding_info, self.pipelining_info)
