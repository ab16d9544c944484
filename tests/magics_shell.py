"""Shared set-up of the %ipu magic tests: one IPython shell with the extension loaded, models.

Without IPython/ipywidgets/matplotlib the magic tests skip, except under CI=true where they fail
(the `test` extra installs them)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def require_notebook_libraries() -> None:
    """Skip the calling test module without them, except under CI=true (where it fails)."""
    if os.environ.get("CI") != "true":
        for name in ("IPython", "ipywidgets", "matplotlib"):
            pytest.importorskip(name, reason=f"{name} is in the test extra")


def small_model() -> onnx.ModelProto:
    """y = relu(x @ W), x [4, 64], W [64, 32]."""
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 64))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 32))],
        [numpy_helper.from_array(w, "W")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])


def shell() -> Any:
    """The IPython test shell with `%load_ext pyipu.magics` done."""
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    ip.run_line_magic("load_ext", "pyipu.magics")
    return ip


def magic(ip: Any, line: str, cell: str | None = None) -> Any:
    """Run `%ipu line` (or `%%ipu line` + cell) with its display output captured."""
    from IPython.utils.capture import capture_output

    with capture_output():
        if cell is None:
            return ip.run_line_magic("ipu", line)
        return ip.run_cell_magic("ipu", line, cell)
