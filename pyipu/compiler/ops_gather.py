"""ONNX op lowerings: gathers and scatters with run-time indices, and ops composed from them."""

from __future__ import annotations

from pyipu.compiler.ops import register  # noqa: F401
