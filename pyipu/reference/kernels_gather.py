"""Reference kernels: gathers and scatters with run-time indices (see numpy_interp)."""

from __future__ import annotations

from pyipu.reference.numpy_interp import kernel  # noqa: F401
