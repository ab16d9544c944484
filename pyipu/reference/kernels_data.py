"""Reference kernels: data movement by index (see numpy_interp)."""

from __future__ import annotations

from pyipu.reference.numpy_interp import kernel  # noqa: F401
