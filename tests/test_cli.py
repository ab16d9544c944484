"""The `pyipu` command (PopRT's flags) and `popef_dump`."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from helpers import subprocess_env, tool
from onnx import TensorProto, helper

from pyipu import runtime


def _dynamic_add_model(path) -> None:
    g = helper.make_graph(
        [helper.make_node("Add", ["X", "Y"], ["Z"]), helper.make_node("Relu", ["Z"], ["R"])],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ("batch", 3)) for n in "XY"],
        [helper.make_tensor_value_info("R", TensorProto.FLOAT, ("batch", 3))],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def _run(args, cwd):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=subprocess_env())


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_convert_and_export(tmp_path, precision):
    _dynamic_add_model(tmp_path / "add.onnx")
    result = _run(
        [
            tool("pyipu"),
            "--input_model",
            "add.onnx",
            "--input_shape",
            "X=2,3",
            "Y=2,3",
            "--precision",
            precision,
            "--batches_per_step",
            "2",
            "--output_dir",
            "out",
            "--export_popef",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    converted = onnx.load(str(tmp_path / "out" / f"add.{precision}.onnx"))
    dims = [d.dim_value for d in converted.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3]
    dtype = np.float16 if precision == "fp16" else np.float32
    with runtime.Runner(str(tmp_path / "out" / "executable.popef")) as r:
        assert r.batches_per_step == 2
        x = np.array([[1, -2, 3], [4, 5, -6]], dtype)
        out = np.zeros((2, 3), dtype)
        r.execute({"X": x, "Y": x}, {"R": out})
        np.testing.assert_array_equal(out, np.maximum(2 * x, 0))

    dump = _run([tool("popef_dump"), "-i", "out/executable.popef"], tmp_path)
    assert dump.returncode == 0, dump.stderr
    assert "input  X" in dump.stdout and "output R" in dump.stdout
    assert "batches_per_step 2" in dump.stdout and "add" in dump.stdout
    assert "1472 compute + 0 I/O tiles" in dump.stdout


def test_dynamic_shape_without_input_shape_is_a_clear_error(tmp_path):
    _dynamic_add_model(tmp_path / "add.onnx")
    result = _run([tool("pyipu"), "--input_model", "add.onnx", "--export_popef"], tmp_path)
    assert result.returncode == 1
    assert "input_shape" in result.stderr


def test_bad_flags(tmp_path):
    _dynamic_add_model(tmp_path / "add.onnx")
    result = _run([tool("pyipu"), "--input_model", "add.onnx", "--input_shape", "X:2"], tmp_path)
    assert result.returncode != 0 and "NAME=D0,D1" in result.stderr
    result = _run([tool("pyipu")], tmp_path)
    assert result.returncode != 0 and "--input_model" in result.stderr


def test_popef_dump_rejects_corrupt_file(tmp_path):
    (tmp_path / "bad.popef").write_bytes(b"PYIPUEF\0" + b"\0" * 100)
    result = _run([tool("popef_dump"), "bad.popef"], tmp_path)
    assert result.returncode == 1 and "bad.popef" in result.stderr
