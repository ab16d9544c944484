"""The NumPy reference interpreter of pyipu programs (the executable spec of docs/bytecode.md)."""

from pyipu.reference.numpy_interp import KERNELS, Machine, run

__all__ = ["KERNELS", "Machine", "run"]
