"""Training on pyipu: reverse-mode differentiation of ONNX graphs (`gradients`), written as
ONNX nodes that pyipu's compiler and kernels run like any model (docs/training.md)."""

from pyipu.training import rules_index, rules_math, rules_nn, rules_shape  # noqa: F401
from pyipu.training.autodiff import gradients
from pyipu.training.registry import RULES

__all__ = ["RULES", "gradients"]
