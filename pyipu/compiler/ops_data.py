"""ONNX op lowerings: data movement by index (slice, pad, tile, gather, scatter, resize)."""

from __future__ import annotations

from pyipu.compiler.ops import register  # noqa: F401
