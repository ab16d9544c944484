"""Reference kernels: reductions, arg-reductions, cumulative sums, top-k (see numpy_interp)."""

from __future__ import annotations

from pyipu.reference.numpy_interp import kernel  # noqa: F401
