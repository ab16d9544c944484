"""ONNX op lowerings: reductions, arg-reductions, cumulative sums and top-k (see ops.py)."""

from __future__ import annotations

from pyipu.compiler.ops import register  # noqa: F401
