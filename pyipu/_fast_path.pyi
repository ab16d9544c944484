"""Types of the Cython extension pyipu._fast_path (_fast_path.pyx); _core re-exports them."""

from typing import Any

import numpy as np

from pyipu._core import Runtime

class FastPath:
    def __init__(
        self, runtime: Runtime, anchors: list[tuple[str, int, np.dtype[Any], list[int]]]
    ) -> None: ...
    def execute(self, inputs: object, outputs: object) -> bool: ...
